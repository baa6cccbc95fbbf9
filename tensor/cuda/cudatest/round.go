package cudatest

import "math"

// RoundBF16 rounds x to bfloat16 (nearest even) and back: what the device
// does to a product's operands in bf16.
func RoundBF16(x []float32) []float32 {
	out := make([]float32, len(x))
	for i, v := range x {
		u := math.Float32bits(v)
		u += 0x7fff + (u>>16)&1
		out[i] = math.Float32frombits(u &^ 0xffff)
	}
	return out
}

// RoundTF32 rounds x to TF32 (10 mantissa bits; nearest even) and back:
// what the device does to a product's operands in tf32.
func RoundTF32(x []float32) []float32 {
	out := make([]float32, len(x))
	for i, v := range x {
		u := math.Float32bits(v)
		if u&0x7f800000 != 0x7f800000 {
			u += 0xfff + (u>>13)&1
			u &^= 0x1fff
		}
		out[i] = math.Float32frombits(u)
	}
	return out
}
