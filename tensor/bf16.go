package tensor

import "math"

// bfloat16: float32's sign, exponent and top 7 mantissa bits, stored as
// the float32's upper 16 bits. A GPU's bf16 storage (tensor/cuda's half
// buffers), the wire's bf16 tensors and the CPU emulator all round as
// ToBF16 does, so a value crossing between them is the same bits.

// ToBF16 is x rounded to bfloat16, to nearest with ties to even, as CUDA's
// __float2bfloat16_rn: a NaN stays a NaN (0x7fc0 with x's sign dropped),
// an overflow becomes an infinity.
func ToBF16(x float32) uint16 {
	u := math.Float32bits(x)
	if u&0x7fffffff > 0x7f800000 {
		return 0x7fc0
	}
	u += 0x7fff + (u>>16)&1
	return uint16(u >> 16)
}

// FromBF16 is the float32 a bfloat16 holds (exactly).
func FromBF16(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// RoundBF16 is x rounded to bfloat16 and back: the float32 a bf16 store
// of x keeps.
func RoundBF16(x float32) float32 { return FromBF16(ToBF16(x)) }

// PutBF16 rounds src into dst (len(src) elements), element by element.
func PutBF16(dst []uint16, src []float32) {
	dst = dst[:len(src)]
	for i, v := range src {
		dst[i] = ToBF16(v)
	}
}

// GetBF16 widens src into dst (len(src) elements).
func GetBF16(dst []float32, src []uint16) {
	dst = dst[:len(src)]
	for i, h := range src {
		dst[i] = FromBF16(h)
	}
}
