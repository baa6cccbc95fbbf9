package stage

import (
	"math"
	"testing"

	"github.com/graphpipe/graphpipe/dag"
	"github.com/graphpipe/graphpipe/stage/internal/kernel"
	"github.com/graphpipe/graphpipe/tensor"
	"github.com/graphpipe/graphpipe/tensor/cuda"
	"github.com/graphpipe/graphpipe/tensor/cuda/cudatest"
)

// rounders are what each precision does to a product's operands.
var rounders = map[string]func([]float32) []float32{"bf16": cudatest.RoundBF16, "tf32": cudatest.RoundTF32}

// gemmSpan is how many elements a stored rows × cols matrix at stride ld
// reads, over count batches stride apart.
func gemmSpan(rows, cols, ld, count, stride int) int {
	if rows == 0 || cols == 0 {
		return 0
	}
	return (max(count, 1)-1)*stride + (rows-1)*ld + cols
}

func pickT(trans bool, rows, cols int) int {
	if trans {
		return rows
	}
	return cols
}

// gemmChecker checks every matrix product a kernel runs on the device
// against float32 math on its operands rounded as the executor's precision
// rounds them (kernel.TestHookGemm).
type gemmChecker struct {
	t              *testing.T
	precision      string
	plain, batched int
	worst          float64
}

func (c *gemmChecker) hook(d *cuda.Device, g cuda.GemmArgs, sa, sb, sc, count int, precision string) func() {
	t := c.t
	if precision != c.precision {
		t.Fatalf("a matrix product ran in %s on a %s executor", precision, c.precision)
	}
	lda, ldb, ldc := g.LDA, g.LDB, g.LDC
	if lda == 0 {
		lda = pickT(g.TransA, g.M, g.K)
	}
	if ldb == 0 {
		ldb = pickT(g.TransB, g.K, g.N)
	}
	if ldc == 0 {
		ldc = g.N
	}
	read := func(b cuda.Buffer, n int) []float32 {
		out := make([]float32, n)
		if err := d.Download(out, b); err != nil {
			t.Fatal(err)
		}
		return out
	}
	a := read(g.A, gemmSpan(pickT(g.TransA, g.K, g.M), pickT(g.TransA, g.M, g.K), lda, count, sa))
	b := read(g.B, gemmSpan(pickT(g.TransB, g.N, g.K), pickT(g.TransB, g.K, g.N), ldb, count, sb))
	nc := gemmSpan(g.M, g.N, ldc, count, sc)
	want := read(g.C, nc)
	ar, br := rounders[precision](a), rounders[precision](b)
	// the emulator rounds TF32 operands to nearest even, as tf32Round; a
	// GPU's cuBLAS may break ties otherwise (or truncate): a TF32 ulp, 2⁻¹⁰,
	// in one operand moves a product by up to about 1e-3 of its terms
	tol := 1e-5
	if precision == "tf32" && !d.Emulated {
		tol = 2e-3
	}
	if g.C.Half { // a bf16 result (an activation): rounded once more, so within one bf16 step (2⁻⁸)
		tol = 1.0 / 256
	}
	for q := 0; q < max(count, 1); q++ {
		for i := 0; g.Beta == 0 && i < g.M; i++ { // C's old contents are not read
			clear(want[q*sc+i*ldc : q*sc+i*ldc+g.N])
		}
		tensor.SgemmNaive(g.TransA, g.TransB, g.M, g.N, g.K, g.Alpha, ar[q*sa:], lda, br[q*sb:], ldb, g.Beta, want[q*sc:], ldc)
	}
	return func() {
		got := read(g.C, nc)
		if g.C.Half {
			want = cudatest.RoundBF16(want)
		}
		for i := range want {
			e := math.Abs(float64(got[i])-float64(want[i])) / (1 + math.Abs(float64(want[i])))
			if !(e <= tol) {
				t.Fatalf("%s: %dx%dx%d product (ta %v, tb %v, %d batches): element %d is %v, float32 math on rounded inputs %v", precision, g.M, g.N, g.K, g.TransA, g.TransB, count, i, got[i], want[i])
			}
			c.worst = max(c.worst, e)
		}
		if count == 0 {
			c.plain++
		} else {
			c.batched++
		}
	}
}

// TestPrecisionGemmsOnEmulator: a tf32 or bf16 executor on the kernels'
// emulator runs every matrix product of a training step (linear, matmul,
// attention's batched per-head products, in bf16 fused instead;
// convolutions; forward, input and weight gradients) as float32 math on
// operands rounded to TF32 or bf16 (a bf16 result rounded too),
// each product checked as it runs; the loss tracks float32's within 1%, not
// equal to it.
func TestPrecisionGemmsOnEmulator(t *testing.T) { checkPrecisionGemms(t, cudatest.Emulator(t)) }

// TestPrecisionGemmsOnGPU is TestPrecisionGemmsOnEmulator on a real GPU (skipped without one).
func TestPrecisionGemmsOnGPU(t *testing.T) { checkPrecisionGemms(t, cudatest.GPU(t)) }

func checkPrecisionGemms(t *testing.T, d *cuda.Device) {
	v2, err := dag.Load([]byte(v2Net))
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range []*dag.Graph{v2, small(t, "mmt")} {
		t.Run(g.Name(), func(t *testing.T) {
			loss := map[string]float64{}
			for _, p := range Precisions {
				tr, err := NewTrainer(g, TrainOptions{Optimizer: "sgd", LR: 0.01, MicroBatch: int(g.BatchSize()) / 2})
				if err != nil {
					t.Fatal(err)
				}
				if err := tr.Ex.UseDevice(d); err != nil {
					t.Fatal(err)
				}
				if err := tr.Ex.SetPrecision(p); err != nil {
					t.Fatal(err)
				}
				c := &gemmChecker{t: t, precision: p}
				if p != "fp32" {
					kernel.TestHookGemm = c.hook
				}
				l, _, err := tr.Step(0)
				kernel.TestHookGemm = nil
				tr.Ex.Close()
				if err != nil {
					t.Fatal(err)
				}
				loss[p] = l
				if p != "fp32" {
					t.Logf("%s: %d products and %d batched ones checked, largest difference %.3g", p, c.plain, c.batched, c.worst)
					if c.plain == 0 || g.Name() == "mmt" && p == "tf32" && c.batched == 0 { // bf16's attention runs fused: no batched products

						t.Fatalf("%s: %d products, %d batched: the step's products were not all seen", p, c.plain, c.batched)
					}
				}
			}
			for _, p := range []string{"tf32", "bf16"} {
				rel := math.Abs(loss[p]-loss["fp32"]) / math.Abs(loss["fp32"])
				t.Logf("loss %.7g in %s, %.7g in fp32 (%.3g relative)", loss[p], p, loss["fp32"], rel)
				if rel > 0.01 || loss[p] == loss["fp32"] {
					t.Fatalf("%s loss %v against fp32 %v", p, loss[p], loss["fp32"])
				}
			}
		})
	}
}

// TestPrecisionRefusals: tf32 and bf16 need a device; unknown precisions
// are refused.
func TestPrecisionRefusals(t *testing.T) {
	ex, err := NewExecutor(small(t, "mlp"), []int{0}, 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"tf32", "bf16"} {
		if err := ex.SetPrecision(p); err == nil {
			t.Errorf("%s accepted on the CPU backend", p)
		}
	}
	if err := ex.SetPrecision("fp8"); err == nil {
		t.Error("fp8 accepted")
	}
	if err := ex.SetPrecision("fp32"); err != nil {
		t.Error(err)
	}
}
