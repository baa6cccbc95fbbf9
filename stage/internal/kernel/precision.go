package kernel

import "fmt"

// Precision is what matrix products on the device compute in (stage's
// SetPrecision says what each means).
type Precision uint8

const (
	FP32 Precision = iota // FP32 operands and math
	TF32                  // FP32 operands read as TF32 by the tensor cores, FP32 accumulation
	BF16                  // operands rounded to bfloat16, FP32 accumulation
)

// precisionNames are the precisions' names, by value: the flag's words.
var precisionNames = [...]string{FP32: "fp32", TF32: "tf32", BF16: "bf16"}

func (p Precision) String() string {
	if int(p) < len(precisionNames) {
		return precisionNames[p]
	}
	return fmt.Sprintf("precision(%d)", uint8(p))
}

// ParsePrecision is the precision named name ("" is fp32).
func ParsePrecision(name string) (Precision, error) {
	if name == "" {
		return FP32, nil
	}
	for p, n := range precisionNames {
		if n == name {
			return Precision(p), nil
		}
	}
	return FP32, fmt.Errorf("precision %q: unknown (known: fp32, tf32, bf16)", name)
}
