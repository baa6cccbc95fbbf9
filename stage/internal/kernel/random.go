package kernel

import (
	"hash/fnv"
)

// dropKey is the key of op's dropout masks at step: mix(mix(mix(seed) ^
// fnv(op)) ^ step), docs/model-format.md, mix being SplitMix64's finaliser
// (Splitmix) and fnv 64-bit FNV-1a.
func dropKey(seed int64, op string, step int) uint64 {
	return Splitmix(Splitmix(Splitmix(uint64(seed))^FNV(op)) ^ uint64(step))
}

// dropped says whether element elem of sample is zeroed, at rate p, under
// key k: (mix(mix(k ^ sample) ^ elem) >> 11) · 2⁻⁵³ < p.
func dropped(k, sample, elem uint64, p float64) bool {
	h := Splitmix(Splitmix(k^sample) ^ elem)
	return float64(h>>11)*(1.0/(1<<53)) < p
}

func FNV(s string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(s))
	return h.Sum64()
}

// Splitmix is SplitMix64's finaliser.
func Splitmix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}
