//go:build toyop

package kernel

// The toy operator scale2 (y = 2x), dag/op_toy.go and toy.go, as an op
// case: the finite-difference, float32 and GPU-emulator checks every op
// gets; TestAgainstPyTorch then asks for its PyTorch golden case, which a
// real op adds (docs/adding-an-op.md).

func init() {
	opCases = append(opCases, opCase{"scale2", `{"name":"x","shape":[2,3],"dtype":"float32"}`, `"op":"scale2","inputs":["x"]`})
}
