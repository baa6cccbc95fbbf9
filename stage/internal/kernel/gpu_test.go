package kernel

import (
	"fmt"
	"math"
	"math/rand"
	"strings"
	"testing"

	"github.com/graphpipe/graphpipe/dag"
	"github.com/graphpipe/graphpipe/tensor/cuda"
	"github.com/graphpipe/graphpipe/tensor/cuda/cudatest"
)

// gpuCases is every op case (opCases, model@2's included: their init
// functions run after this file's variables are set) and the larger shapes
// of gpuExtraCases and gpuV2Cases.
func gpuCases() []opCase {
	return append(append(append([]opCase(nil), opCases...), gpuExtraCases...), gpuV2Cases...)
}

// gpuExtraCases add larger shapes to opCases, so that the GEMM strides of
// attention and linear are exercised beyond one-element tiles.
var gpuExtraCases = append([]opCase(nil),
	opCase{"attention-wide", `{"name":"x","shape":[8,16],"dtype":"float32"}`, `"op":"attention","inputs":["x"],"attrs":{"heads":4}`},
	opCase{"attention-wide-causal", `{"name":"x","shape":[6,12],"dtype":"float32"}`, `"op":"attention","inputs":["x"],"attrs":{"heads":3,"causal":true}`},
	opCase{"linear-wide", `{"name":"x","shape":[5,33],"dtype":"float32"}`, `"op":"linear","inputs":["x"],"attrs":{"out":17}`},
	opCase{"linear-wide-in_out", `{"name":"x","shape":[5,33],"dtype":"float32"}`, `"op":"linear","inputs":["x"],"attrs":{"out":17,"weight_layout":"in_out"}`},
	// fewer heads than samples (3), and one head: the strided batches over
	// every (sample, head) at other strides
	opCase{"attention-few-heads", `{"name":"x","shape":[5,8],"dtype":"float32"}`, `"op":"attention","inputs":["x"],"attrs":{"heads":2}`},
	opCase{"attention-one-head-causal", `{"name":"x","shape":[6,4],"dtype":"float32"}`, `"op":"attention","inputs":["x"],"attrs":{"heads":1,"causal":true}`},
	// sequences longer than the softmax's 32 lanes, not a multiple of them
	opCase{"attention-long", `{"name":"x","shape":[45,8],"dtype":"float32"}`, `"op":"attention","inputs":["x"],"attrs":{"heads":2}`},
	opCase{"attention-long-causal", `{"name":"x","shape":[37,6],"dtype":"float32"}`, `"op":"attention","inputs":["x"],"attrs":{"heads":3,"causal":true}`},
	// more rows than one pass of the column sums takes (colParts: chunks of 3)
	opCase{"linear-tall", `{"name":"x","shape":[1500,5],"dtype":"float32"}`, `"op":"linear","inputs":["x"],"attrs":{"out":120}`},
	opCase{"layer_norm-tall", `{"name":"x","shape":[1500,120],"dtype":"float32"}`, `"op":"layer_norm","inputs":["x"]`},
)

// TestColParts: the chunks of the two-pass column sums cover every row
// once, and there are never more of them than rows.
func TestColParts(t *testing.T) {
	for rows := 0; rows <= 700; rows++ {
		for _, cols := range []int{1, 7, 120, 1024, 70000} {
			chunk, parts := colParts(rows, cols)
			if rows == 0 {
				if parts != 0 {
					t.Fatalf("rows 0, cols %d: %d parts", cols, parts)
				}
				continue
			}
			if chunk < 1 || parts < 1 || parts > rows || chunk*parts < rows || (parts-1)*chunk >= rows {
				t.Fatalf("rows %d, cols %d: chunk %d, parts %d", rows, cols, chunk, parts)
			}
		}
	}
}

// checkOpsOn runs every op kind's forward and backward on d and on the CPU
// backend (float32) and compares them within 1e-3 relative. Gradients start
// non-zero, so that accumulation (+=) is checked too, and the backward runs
// three ways: inputs and weights together, inputs alone, weights alone.
func checkOpsOn(t *testing.T, d *cuda.Device) {
	var worst closeness
	defer func() { t.Logf("largest relative difference, device against CPU: %.3g (%s)", worst.rel, worst.what) }()
	for _, c := range gpuCases() {
		t.Run(c.name, func(t *testing.T) { checkOpOn(t, d, c, &worst) })
	}
}

// opCtx is the pass an op test runs in: 3 rows (what parameter and constant
// make), and a seed, step and first sample for dropout's mask.
func opCtx() *Pass { return &Pass{Seed: 5, Pos: Position{Step: 2, Sample: 7, Rows: 3}} }

// checkOpOn compares one case's op on d with its CPU kernel: the output,
// the buffers the forward updates (batch_norm's running statistics: each
// side moves its own copy), and every gradient.
func checkOpOn(t *testing.T, d *cuda.Device, c opCase, worst *closeness) {
	checkOpWith(t, d, c, worst, scopeOpts{}, 1e-3)
}

// checkOpWith is checkOpOn with the GPU kernel run as opts says, within
// tol relative (to 1 + |want|). With opts.tf32 the inputs, parameters and
// the output's gradient are rounded to TF32 first, on both sides, so that
// the CPU's FP32 computes what TF32 products of them compute, up to the
// order of the sums (and what an algorithm's own transforms round).
func checkOpWith(t *testing.T, d *cuda.Device, c opCase, worst *closeness, opts scopeOpts, tol float64) {
	checkOpIn(t, d, c, worst, opts, FP32, tol)
}

// checkOpIn is checkOpWith with the kernel's values in precision prec:
// in BF16 its activations and their gradients are bf16 on the device (the
// inputs and the output's gradient rounded to bf16 on both sides first;
// the parameters stay float32, as master weights do, the products reading
// their bf16 copies).
func checkOpIn(t *testing.T, d *cuda.Device, c opCase, worst *closeness, opts scopeOpts, prec Precision, tol float64) {
	g, i, cpu, gpu, devErr := opKernels(t, d, c)
	gk, generic := gpu.(*gpuKernel)
	if !generic {
		t.Fatalf("%s: the GPU kernel is the CPU's %T", c.name, gpu)
	}
	gk.opts, gk.res = opts, Copies{How: Compute{Precision: prec}}
	close3 := func(t *testing.T, what string, got, want []float32) float64 {
		t.Helper()
		return cudatest.Near(t, what, got, want, tol)
	}
	x64, p64 := randomValues(g, i, 3, rand.New(rand.NewSource(11)))
	positive(c, x64)
	x, p, pg := narrow(x64), narrow(p64), narrow(p64)
	round := func(vs []*Value[float32], bf16 bool) {
		for _, v := range vs {
			switch {
			case v == nil || v.Data == nil:
			case opts.tf32:
				v.Data = cudatest.RoundTF32(v.Data)
			case bf16 && prec == BF16:
				v.Data = cudatest.RoundBF16(v.Data)
			}
		}
	}
	if prec == BF16 { // a layer's parameters at their initialisation's scale (1/√fan-in), as a model's are
		fanIn(g, i, p)
		fanIn(g, i, pg)
	}
	round(x, true)
	round(p, false)
	round(pg, false)
	yc, stc, err := cpu.Forward(x, p)
	if err != nil {
		t.Fatal(err)
	}
	yg, stg, err := gpu.Forward(x, pg)
	if err != nil {
		t.Fatal(err)
	}
	worst.note(c.name+": y", close3(t, "y", yg.Data, yc.Data))
	for j := len(g.Params(i)); j < len(p); j++ { // the buffers
		worst.note(fmt.Sprintf("%s: buffer %d", c.name, j), close3(t, fmt.Sprintf("buffer %d", j), pg[j].Data, p[j].Data))
	}
	gy := outputGrad(yc.Shape)
	round([]*Value[float32]{gy}, true)
	for _, mode := range []struct {
		name    string
		inputs  bool
		weights bool
	}{{"both", true, true}, {"inputs", true, false}, {"weights", false, true}} {
		gxc, gpc := seeded(x, mode.inputs), seeded(p[:len(g.Params(i))], mode.weights)
		gxg, gpg := seeded(x, mode.inputs), seeded(p[:len(g.Params(i))], mode.weights)
		if !mode.weights {
			gpc, gpg = nil, nil
		} else { // no gradients for the buffers
			gpc, gpg = append(gpc, make([]*Value[float32], len(p)-len(gpc))...), append(gpg, make([]*Value[float32], len(p)-len(gpg))...)
		}
		cpu.Backward(gy, x, p, yc, stc, gxc, gpc)
		gpu.Backward(gy, x, pg, yg, stg, gxg, gpg)
		if *devErr != nil {
			t.Fatal(*devErr)
		}
		for j := range gxc {
			if gxc[j] != nil {
				worst.note(fmt.Sprintf("%s: %s: gx%d", c.name, mode.name, j), close3(t, fmt.Sprintf("%s: gx%d", mode.name, j), gxg[j].Data, gxc[j].Data))
			}
		}
		for j := range gpc {
			if gpc[j] != nil {
				worst.note(fmt.Sprintf("%s: %s: gp%d", c.name, mode.name, j), close3(t, fmt.Sprintf("%s: gp%d", mode.name, j), gpg[j].Data, gpc[j].Data))
			}
		}
	}
}

// opKernels is op case c's graph and op, its CPU kernel and its kernel on
// d, and where that one reports a device failure.
func opKernels(t *testing.T, d *cuda.Device, c opCase) (*dag.Graph, int, Kernel[float32], Kernel[float32], *error) {
	t.Helper()
	g, i := oneOp(t, c)
	cpu, err := New[float32](g, i, opCtx())
	if err != nil {
		t.Fatal(err)
	}
	devErr := new(error)
	gpu, err := NewGPU(g, i, d, nil, devErr, opCtx())
	if err != nil {
		t.Fatal(err)
	}
	return g, i, cpu, gpu, devErr
}

// outputGrad is the output's gradient the op checks give the backward:
// (j mod 7 − 3)/3 at element j.
func outputGrad(shape []int) *Value[float32] {
	gy := NewValue[float32](shape...)
	for j := range gy.Data {
		gy.Data[j] = float32(j%7-3) / 3
	}
	return gy
}

// seeded gives a gradient buffer per float value, starting at 0.25 (nil
// for int values, or for all when not wanted).
func seeded(vs []*Value[float32], want bool) []*Value[float32] {
	out := make([]*Value[float32], len(vs))
	for i, v := range vs {
		if !want || v == nil || v.Data == nil {
			continue
		}
		out[i] = NewValue[float32](v.Shape...)
		for j := range out[i].Data {
			out[i].Data[j] = 0.25
		}
	}
	return out
}

// closeness keeps the largest relative difference seen and where.
type closeness struct {
	rel  float64
	what string
}

func (c *closeness) note(what string, rel float64) {
	if rel > c.rel {
		c.rel, c.what = rel, what
	}
}

// close3 fails where got and want differ by more than 1e-3 relative (to
// 1 + |want|), or where one of them is NaN and the other not, and returns
// the largest such difference.
func close3(t *testing.T, what string, got, want []float32) float64 {
	t.Helper()
	return cudatest.Near(t, what, got, want, 1e-3)
}

func TestOpsOnEmulator(t *testing.T) { checkOpsOn(t, cudatest.Emulator(t)) }

func TestOpsOnGPU(t *testing.T) { checkOpsOn(t, cudatest.GPU(t)) }

// TestGPUIndexOutOfRange: the device path refuses a bad index with the CPU
// path's error, naming the op.
func TestGPUIndexOutOfRange(t *testing.T) {
	d := cudatest.Emulator(t)
	for _, c := range []opCase{opCases[15], opCases[16], opCases[21]} { // embedding, embedding_bag, cross-entropy
		t.Run(c.name, func(t *testing.T) {
			g, i := oneOp(t, c)
			var devErr error
			gk, _ := NewGPU(g, i, d, nil, &devErr, &Pass{})
			ck, _ := New[float32](g, i, &Pass{})
			x64, p64 := randomValues(g, i, 2, rand.New(rand.NewSource(3)))
			x, p := narrow(x64), narrow(p64)
			for _, v := range x {
				if v.Ints != nil {
					v.Ints[len(v.Ints)-1] = 99
				}
			}
			_, _, gerr := gk.Forward(x, p)
			_, _, cerr := ck.Forward(x, p)
			if gerr == nil || cerr == nil || gerr.Error() != cerr.Error() {
				t.Fatalf("index 99: device error %v, CPU error %v", gerr, cerr)
			}
		})
	}
}

// fanIn scales op i's parameters (not its buffers) by 1/√(their last
// dimension), the scale PyTorch's initialisations give them: the op
// cases' N(0, 1) weights make logits of tens (attention's scores), whose
// bf16 rounding (±2⁻⁹ of tens) moves a softmax by more than any model's
// values would.
func fanIn(g *dag.Graph, i int, p []*Value[float32]) {
	for j := range g.Params(i) {
		v := p[j]
		if len(v.Shape) < 2 {
			continue
		}
		c := float32(1 / math.Sqrt(float64(v.Shape[len(v.Shape)-1])))
		for k := range v.Data {
			v.Data[k] *= c
		}
	}
}

// TestOpsInBF16Emulated runs every op case's kernel with its activations
// and their gradients in bf16 on the emulator against the CPU's float32
// kernel, the parameters at their initialisation's scale (fanIn), within
// 3e-2 relative (to 1 + |want|): bf16 keeps 8 significant bits (a
// rounding's relative error is at most 2⁻⁹, about 2e-3); an op's result in
// these cases passes through at most 4 roundings in a row (a product's
// operands, its result, the next op's input), and its products' sums of up
// to 48 terms, each term's rounding error independent, add about
// √48·2⁻⁹ ≈ 1.4e-2 at worst: 2.2e-2 in all (measured: 1.2e-2, linear-tall);
// an op that kept in bf16 what autocast keeps in float32 (a sum, a
// statistic) misses it by far (batch_norm's x̂ stored in bf16 did: an
// input gradient of 0.0055 where float32's is 0.041).
// Attention within 1e-1: its weights' gradients sum every position's
// q, k and v gradients (3·45 terms a row in attention-long), each stored in
// bf16 as autocast stores them, whose errors add while their values cancel
// (measured: 8.0e-2, attention-long's in_proj bias; its fused float32
// kernels alone are within 1e-3: TestFusedAttentionEmulated).
func TestOpsInBF16Emulated(t *testing.T) {
	d := cudatest.Emulator(t)
	var worst closeness
	defer func() {
		t.Logf("largest relative difference, bf16 device against float32 CPU: %.3g (%s)", worst.rel, worst.what)
	}()
	for _, c := range gpuCases() {
		tol := 3e-2
		if strings.HasPrefix(c.name, "attention") {
			tol = 1e-1
		}
		t.Run(c.name, func(t *testing.T) { checkOpIn(t, d, c, &worst, scopeOpts{}, BF16, tol) })
	}
}

// TestFusedAttentionEmulated checks the fused attention kernels (forced in
// float32) against the CPU's unfused attention within checkOpsOn's 1e-3:
// every attention case, causal and not, wide, long and one-headed.
func TestFusedAttentionEmulated(t *testing.T) {
	d := cudatest.Emulator(t)
	var worst closeness
	defer func() { t.Logf("largest relative difference, fused against the CPU: %.3g (%s)", worst.rel, worst.what) }()
	n := 0
	for _, c := range gpuCases() {
		if !strings.HasPrefix(c.name, "attention") {
			continue
		}
		n++
		t.Run(c.name, func(t *testing.T) { checkOpWith(t, d, c, &worst, scopeOpts{fusedAttn: true}, 1e-3) })
	}
	if n < 8 {
		t.Fatalf("only %d attention cases", n)
	}
}
