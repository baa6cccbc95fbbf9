package stage

import "hash/fnv"

// Position places a micro-batch in training: the step, and the index in the
// step's batch of the micro-batch's first row (a data-parallel replica's
// rows start further in). Ops that draw random numbers (dropout) draw them
// from (seed, step, op, sample), so that every plan, micro-batch size,
// replica split and restart draws the same.
type Position struct {
	Step   int
	Sample int
}

// runCtx is what an executor tells its kernels about the pass they run:
// kernels that need it (dropout) keep a pointer to their executor's.
type runCtx struct {
	seed int64
	pos  Position
}

// mix is the SplitMix64 finalizer, its increment included.
func mix(z uint64) uint64 {
	z += 0x9e3779b97f4a7c15
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// dropKey is the key of op's dropout masks at step: mix(mix(mix(seed) ^
// fnv(op)) ^ step), docs/model-format.md.
func dropKey(seed int64, op string, step int) uint64 {
	h := fnv.New64a()
	h.Write([]byte(op))
	return mix(mix(mix(uint64(seed))^h.Sum64()) ^ uint64(step))
}

// dropped says whether element elem of sample is zeroed, at rate p, under
// key k: (mix(mix(k ^ sample) ^ elem) >> 11) · 2⁻⁵³ < p.
func dropped(k, sample, elem uint64, p float64) bool {
	h := mix(mix(k^sample) ^ elem)
	return float64(h>>11)*(1.0/(1<<53)) < p
}
