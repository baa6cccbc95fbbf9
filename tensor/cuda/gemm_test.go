package cuda

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/graphpipe/graphpipe/tensor"
)

func randSlice(r *rand.Rand, n int) []float32 {
	s := make([]float32, n)
	for i := range s {
		s[i] = float32(r.NormFloat64())
	}
	return s
}

func put(t testing.TB, d *Device, s []float32) Buffer {
	t.Helper()
	b, err := d.Upload(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func download(t testing.TB, d *Device, b Buffer, n int) []float32 {
	t.Helper()
	out := make([]float32, n)
	if err := d.Download(out, b); err != nil {
		t.Fatal(err)
	}
	return out
}

// maxRel is the largest |got − want| / (|want| + floor).
func maxRel(got, want []float32, floor float64) float64 {
	var worst float64
	for i := range want {
		worst = max(worst, math.Abs(float64(got[i])-float64(want[i]))/(math.Abs(float64(want[i]))+floor))
	}
	return worst
}

// checkGemms runs Sgemm, SgemmBatched, Gemm16, GemmRounded and GemmTF32 on d against
// tensor.SgemmNaive over transposes, odd sizes, strides, alpha and beta.
func checkGemms(t *testing.T, d *Device) {
	r := rand.New(rand.NewPCG(7, 8))
	for _, sz := range [][3]int{{1, 1, 1}, {3, 5, 7}, {17, 33, 9}, {64, 48, 80}} {
		for _, ta := range []bool{false, true} {
			for _, tb := range []bool{false, true} {
				m, n, k := sz[0], sz[1], sz[2]
				name := fmt.Sprintf("%dx%dx%d/ta=%v/tb=%v", m, n, k, ta, tb)
				t.Run(name, func(t *testing.T) {
					bindHere(t, d)
					lda, ldb, ldc := pick(ta, m, k)+2, pick(tb, k, n)+1, n+3
					a := randSlice(r, pick(ta, k, m)*lda)
					b := randSlice(r, pick(tb, n, k)*ldb)
					c := randSlice(r, m*ldc)
					want := append([]float32(nil), c...)
					tensor.SgemmNaive(ta, tb, m, n, k, 0.5, a, lda, b, ldb, 0.25, want, ldc)
					g := GemmArgs{TransA: ta, TransB: tb, M: m, N: n, K: k, Alpha: 0.5, Beta: 0.25,
						A: put(t, d, a), B: put(t, d, b), C: put(t, d, c), LDA: lda, LDB: ldb, LDC: ldc}
					if err := d.Sgemm(g); err != nil {
						t.Fatal(err)
					}
					if e := maxRel(download(t, d, g.C, len(c)), want, 1); e > 1e-5 {
						t.Errorf("sgemm: largest relative difference %.3g", e)
					}
					checkGemm16(t, d, g, a, b, c)
					checkRounded(t, d, g, a, b, c)
					checkTF32(t, d, g, a, b, c)
				})
			}
		}
	}
	t.Run("batched", func(t *testing.T) {
		bindHere(t, d)
		const m, n, k, count = 5, 6, 7, 3
		a, b := randSlice(r, count*m*k), randSlice(r, count*k*n)
		want := make([]float32, count*m*n)
		for q := 0; q < count; q++ {
			tensor.SgemmNaive(false, true, m, n, k, 1, a[q*m*k:], k, b[q*k*n:], k, 0, want[q*m*n:], n)
		}
		g := GemmArgs{TransB: true, M: m, N: n, K: k, Alpha: 1, A: put(t, d, a), B: put(t, d, b), C: put(t, d, make([]float32, count*m*n))}
		if err := d.SgemmBatched(g, m*k, k*n, m*n, count); err != nil {
			t.Fatal(err)
		}
		if e := maxRel(download(t, d, g.C, len(want)), want, 1); e > 1e-5 {
			t.Errorf("batched: largest relative difference %.3g", e)
		}
	})
	t.Run("batched rounded", func(t *testing.T) {
		bindHere(t, d)
		// strides past each operand, transposed A, alpha and beta
		const m, n, k, count, sa, sb, sc = 5, 6, 7, 3, 5*7 + 3, 7*6 + 1, 5*6 + 2
		a, b, c := randSlice(r, count*sa), randSlice(r, count*sb), randSlice(r, count*sc)
		ar, br := roundHalf(a, BF16), roundHalf(b, BF16)
		want := append([]float32(nil), c...)
		for q := 0; q < count; q++ {
			tensor.SgemmNaive(true, false, m, n, k, 0.5, ar[q*sa:], m, br[q*sb:], n, 0.25, want[q*sc:], n)
		}
		g := GemmArgs{TransA: true, M: m, N: n, K: k, Alpha: 0.5, Beta: 0.25, A: put(t, d, a), B: put(t, d, b), C: put(t, d, c)}
		if err := d.GemmRoundedBatched(g, BF16, sa, sb, sc, count); err != nil {
			t.Fatal(err)
		}
		got := download(t, d, g.C, len(c))
		if e := maxRel(got, want, 1); e > 1e-5 {
			t.Errorf("batched bf16: largest relative difference %.3g from FP32 math on BF16-rounded inputs", e)
		}
		exact := append([]float32(nil), c...)
		for q := 0; q < count; q++ {
			tensor.SgemmNaive(true, false, m, n, k, 0.5, a[q*sa:], m, b[q*sb:], n, 0.25, exact[q*sc:], n)
		}
		if e := maxRel(got, exact, 1); e < 1e-4 {
			t.Errorf("batched bf16 is within %.3g of FP32 math on unrounded inputs: were the inputs rounded?", e)
		}
	})
	t.Run("batched tf32", func(t *testing.T) {
		bindHere(t, d)
		const m, n, k, count, sa, sb, sc = 5, 6, 7, 3, 5*7 + 3, 7*6 + 1, 5*6 + 2
		a, b, c := randSlice(r, count*sa), randSlice(r, count*sb), randSlice(r, count*sc)
		ar, br := roundTF32(a), roundTF32(b)
		want := append([]float32(nil), c...)
		for q := 0; q < count; q++ {
			tensor.SgemmNaive(false, true, m, n, k, 0.5, ar[q*sa:], k, br[q*sb:], k, 0.25, want[q*sc:], n)
		}
		g := GemmArgs{TransB: true, M: m, N: n, K: k, Alpha: 0.5, Beta: 0.25, A: put(t, d, a), B: put(t, d, b), C: put(t, d, c)}
		if err := d.GemmTF32Batched(g, sa, sb, sc, count); err != nil {
			t.Fatal(err)
		}
		if e := maxRel(download(t, d, g.C, len(c)), want, 1); e > tf32Tol(d) {
			t.Errorf("batched tf32: largest relative difference %.3g from FP32 math on TF32-rounded inputs", e)
		}
		if err := d.GemmTF32Batched(g, sa, sb, sc, count+1); err == nil {
			t.Error("a batch past the end of the operands was accepted")
		}
	})
	t.Run("too small", func(t *testing.T) {
		bindHere(t, d)
		g := GemmArgs{M: 4, N: 4, K: 4, Alpha: 1, A: put(t, d, make([]float32, 15)), B: put(t, d, make([]float32, 16)), C: put(t, d, make([]float32, 16))}
		if err := d.Sgemm(g); err == nil {
			t.Error("a 15-element A was accepted for a 4×4 operand")
		}
	})
}

// checkGemm16 runs g's product on BF16 and FP16 copies of its operands:
// FP32 accumulation of rounded inputs, within the rounding of the inputs.
func checkGemm16(t *testing.T, d *Device, g GemmArgs, a, b, c []float32) {
	for _, h := range []Half{BF16, FP16} {
		ah, err := d.HalfBuffer(len(a))
		if err != nil {
			t.Fatal(err)
		}
		bh, _ := d.HalfBuffer(len(b))
		if err := d.Convert(ah, g.A, h); err != nil {
			t.Fatal(err)
		}
		if err := d.Convert(bh, g.B, h); err != nil {
			t.Fatal(err)
		}
		ar, br := roundHalf(a, h), roundHalf(b, h)
		want := append([]float32(nil), c...)
		tensor.SgemmNaive(g.TransA, g.TransB, g.M, g.N, g.K, 0.5, ar, g.LDA, br, g.LDB, 0.25, want, g.LDC)
		out := put(t, d, c)
		h16 := g
		h16.A, h16.B, h16.C = ah, bh, out
		if err := d.Gemm16(h16, h); err != nil {
			t.Fatal(err)
		}
		if e := maxRel(download(t, d, out, len(c)), want, 1); e > 1e-4 {
			t.Errorf("%s gemm: largest relative difference %.3g from FP32 math on rounded inputs", h, e)
		}
	}
}

// checkRounded runs g's product through GemmRounded (BF16): FP32 math on
// BF16-rounded inputs, and not FP32 math on the inputs themselves.
func checkRounded(t *testing.T, d *Device, g GemmArgs, a, b, c []float32) {
	ar, br := roundHalf(a, BF16), roundHalf(b, BF16)
	want := append([]float32(nil), c...)
	tensor.SgemmNaive(g.TransA, g.TransB, g.M, g.N, g.K, 0.5, ar, g.LDA, br, g.LDB, 0.25, want, g.LDC)
	exact := append([]float32(nil), c...)
	tensor.SgemmNaive(g.TransA, g.TransB, g.M, g.N, g.K, 0.5, a, g.LDA, b, g.LDB, 0.25, exact, g.LDC)
	r := g
	r.C = put(t, d, c)
	if err := d.GemmRounded(r, BF16); err != nil {
		t.Fatal(err)
	}
	got := download(t, d, r.C, len(c))
	if e := maxRel(got, want, 1); e > 1e-5 {
		t.Errorf("bf16 gemm: largest relative difference %.3g from FP32 math on BF16-rounded inputs", e)
	}
	if e := maxRel(got, exact, 1); g.K > 1 && e < 1e-4 {
		t.Errorf("bf16 gemm is within %.3g of FP32 math on unrounded inputs: were the inputs rounded?", e)
	}
}

// checkTF32 runs g's product through GemmTF32: FP32 math on TF32-rounded
// inputs, and not FP32 math on the inputs themselves.
func checkTF32(t *testing.T, d *Device, g GemmArgs, a, b, c []float32) {
	ar, br := roundTF32(a), roundTF32(b)
	want := append([]float32(nil), c...)
	tensor.SgemmNaive(g.TransA, g.TransB, g.M, g.N, g.K, 0.5, ar, g.LDA, br, g.LDB, 0.25, want, g.LDC)
	exact := append([]float32(nil), c...)
	tensor.SgemmNaive(g.TransA, g.TransB, g.M, g.N, g.K, 0.5, a, g.LDA, b, g.LDB, 0.25, exact, g.LDC)
	r := g
	r.C = put(t, d, c)
	if err := d.GemmTF32(r); err != nil {
		t.Fatal(err)
	}
	got := download(t, d, r.C, len(c))
	if e := maxRel(got, want, 1); e > tf32Tol(d) {
		t.Errorf("tf32 gemm: largest relative difference %.3g from FP32 math on TF32-rounded inputs", e)
	}
	if e := maxRel(got, exact, 1); g.K > 1 && e < 2e-5 {
		t.Errorf("tf32 gemm is within %.3g of FP32 math on unrounded inputs: were the inputs rounded?", e)
	}
}

// tf32Tol is how far a TF32 product may be from FP32 math on operands
// rounded to nearest even: the emulator's rounding is that, so only the
// order of the additions differs; a GPU's tensor cores are fed by cuBLAS,
// which does not document how it breaks ties (or whether it truncates), and
// one operand a TF32 ulp (2⁻¹⁰) off moves a product by up to about 1e-3 of
// its terms.
func tf32Tol(d *Device) float64 {
	if d.Emulated {
		return 1e-5
	}
	return 2e-3
}

// roundTF32 rounds to TF32 (10 mantissa bits) and back, to nearest even.
func roundTF32(x []float32) []float32 {
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

// TestTF32RoundingEmulated: the emulator's TF32 product reads each operand
// rounded to 10 mantissa bits, to nearest with ties to even; infinities
// pass. (A GPU's cuBLAS may break ties otherwise, or keep subnormals
// differently: exact ties are checked here only, the GPU's products within
// checkGemms' tolerance.)
func TestTF32RoundingEmulated(t *testing.T) {
	d := emulator(t)
	bindHere(t, d)
	one := put(t, d, []float32{1})
	for _, c := range []struct{ in, want float32 }{
		{1 + 0x1p-11, 1},                     // a tie: to the even neighbour, 1
		{1 + 3*0x1p-11, 1 + 0x1p-9},          // a tie: to the even neighbour above
		{1 + 0x1p-11 + 0x1p-20, 1 + 0x1p-10}, // past the tie: up
		{1 + 0x1p-11 - 0x1p-20, 1},           // short of it: down
		{-(1 + 3*0x1p-11), -(1 + 0x1p-9)},    // the sign kept
		{0x1p-130 * (1 + 0x1p-11), 0x1p-130}, // a subnormal
		{float32(math.Inf(1)), float32(math.Inf(1))},
	} {
		out := put(t, d, []float32{0})
		if err := d.GemmTF32(GemmArgs{M: 1, N: 1, K: 1, Alpha: 1, A: put(t, d, []float32{c.in}), B: one, C: out}); err != nil {
			t.Fatal(err)
		}
		if got := download(t, d, out, 1)[0]; got != c.want || roundTF32([]float32{c.in})[0] != c.want {
			t.Errorf("tf32(%x) = %x on the emulator, %x in the test's rounding; want %x", c.in, got, roundTF32([]float32{c.in})[0], c.want)
		}
	}
}

// roundHalf rounds to BF16 or FP16 and back, to nearest even.
func roundHalf(x []float32, h Half) []float32 {
	out := make([]float32, len(x))
	for i, v := range x {
		if h == BF16 {
			u := math.Float32bits(v)
			u += 0x7fff + (u>>16)&1
			out[i] = math.Float32frombits(u &^ 0xffff)
		} else {
			out[i] = f16round(v)
		}
	}
	return out
}

// f16round rounds a float32 to the nearest FP16 value (ties to even) for
// values in FP16's normal range, which the tests stay in.
func f16round(v float32) float32 {
	if v == 0 {
		return v
	}
	e := math.Floor(math.Log2(math.Abs(float64(v))))
	q := math.Ldexp(1, int(e)-10) // the spacing of FP16 values near v
	return float32(math.RoundToEven(float64(v)/q) * q)
}

// bindHere makes d current on the calling goroutine's thread until the test
// ends: every t.Run body runs on a goroutine of its own.
func bindHere(t *testing.T, d *Device) {
	t.Helper()
	runtime.LockOSThread()
	t.Cleanup(runtime.UnlockOSThread)
	if err := d.Bind(); err != nil {
		t.Fatal(err)
	}
}

func TestGemmsEmulated(t *testing.T) { checkGemms(t, emulator(t)) }

func TestGemmsOnGPU(t *testing.T) {
	runtime.LockOSThread() // the device's context is current on this thread only
	defer runtime.UnlockOSThread()
	d, err := Open(0)
	if err != nil {
		t.Skipf("no GPU to test on: %v", err)
	}
	defer d.Close()
	if err := d.Bind(); err != nil {
		t.Fatal(err)
	}
	t.Logf("GPU 0: %s (%s, %d SMs, %.1f GB)", d.Name, d.Arch, d.SMs, float64(d.Memory)/1e9)
	checkGemms(t, d)
}
