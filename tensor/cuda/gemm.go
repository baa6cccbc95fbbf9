package cuda

import "fmt"

// GemmArgs describes C = alpha·op(A)·op(B) + beta·C on row-major matrices:
// op(A) is m×k, op(B) is k×n, C is m×n; LDx are row strides in elements.
type GemmArgs struct {
	TransA, TransB bool
	M, N, K        int
	Alpha, Beta    float32
	A, B, C        Buffer
	LDA, LDB, LDC  int
}

func (g *GemmArgs) defaults() error {
	if g.LDA == 0 {
		g.LDA = pick(g.TransA, g.M, g.K)
	}
	if g.LDB == 0 {
		g.LDB = pick(g.TransB, g.K, g.N)
	}
	if g.LDC == 0 {
		g.LDC = g.N
	}
	if g.M < 0 || g.N < 0 || g.K < 0 {
		return fmt.Errorf("cuda: gemm: negative size %d×%d×%d", g.M, g.N, g.K)
	}
	need := func(b Buffer, rows, cols, ld int, what string) error {
		if cols > ld {
			return fmt.Errorf("cuda: gemm: %s has rows of %d elements but a stride of %d", what, cols, ld)
		}
		if rows > 0 && cols > 0 && (rows-1)*ld+cols > b.N {
			return fmt.Errorf("cuda: gemm: %s holds %d elements, needs %d", what, b.N, (rows-1)*ld+cols)
		}
		return nil
	}
	// stored shapes: A is m×k (k×m transposed), B is k×n (n×k transposed)
	if err := need(g.A, pick(g.TransA, g.K, g.M), pick(g.TransA, g.M, g.K), g.LDA, "A"); err != nil {
		return err
	}
	if err := need(g.B, pick(g.TransB, g.N, g.K), pick(g.TransB, g.K, g.N), g.LDB, "B"); err != nil {
		return err
	}
	return need(g.C, g.M, g.N, g.LDC, "C")
}

// batch checks g as the first of count products whose operands sit at
// fixed strides (elements) from A, B and C: the last one must fit too.
func (g *GemmArgs) batch(strideA, strideB, strideC, count int) error {
	if err := g.defaults(); err != nil {
		return err
	}
	if count < 1 || strideA < 0 || strideB < 0 || strideC < 0 {
		return fmt.Errorf("cuda: batched gemm: %d batches at strides %d, %d, %d", count, strideA, strideB, strideC)
	}
	last := *g // Offset's pointers count FP32s: for 16-bit operands only its N is used here
	last.A, last.B, last.C = g.A.Offset((count-1)*strideA), g.B.Offset((count-1)*strideB), g.C.Offset((count-1)*strideC)
	if err := last.defaults(); err != nil {
		return fmt.Errorf("%w (batch %d of %d)", err, count, count)
	}
	return nil
}

// pick is the row length of a stored matrix: cols when not transposed.
func pick(trans bool, rows, cols int) int {
	if trans {
		return rows
	}
	return cols
}

func op(t bool) int32 {
	if t {
		return opT
	}
	return opN
}

// Sgemm runs FP32 GEMM in cuBLAS. Row-major C = op(A)·op(B) is column-major
// Cᵀ = op(B)ᵀ·op(A)ᵀ, so B goes first.
func (d *Device) Sgemm(g GemmArgs) error {
	if err := g.defaults(); err != nil {
		return err
	}
	d.counts.GEMMs++
	return d.b.sgemm(op(g.TransB), op(g.TransA), int32(g.N), int32(g.M), int32(g.K),
		g.Alpha, g.B.Ptr, int32(g.LDB), g.A.Ptr, int32(g.LDA), g.Beta, g.C.Ptr, int32(g.LDC))
}

// Half is a 16-bit operand format for Gemm16.
type Half int

const (
	BF16 Half = iota
	FP16
)

func (h Half) String() string { return [...]string{"bf16", "fp16"}[h] }

// Convert writes src (FP32) into dst as 16-bit values; dst holds at least
// len(src)/2 float32 slots' worth of memory (use HalfBuffer).
func (d *Device) Convert(dst, src Buffer, h Half) error {
	kernel := "gp_to_bf16"
	if h == FP16 {
		kernel = "gp_to_f16"
	}
	return d.Launch(kernel, src.N, src, dst, src.N)
}

// HalfBuffer allocates room for n 16-bit values: a half buffer.
func (d *Device) HalfBuffer(n int) (Buffer, error) {
	b, err := d.Alloc((n + 1) / 2)
	b.N, b.Half = n, true
	return b, err
}

// Gemm16 runs GEMM on 16-bit operands already on the device (A and B
// converted with Convert, or half buffers) with FP32 accumulation into C:
// an FP32 C, or a BF16 one (a half buffer) that it reads and writes
// rounded to nearest even.
func (d *Device) Gemm16(g GemmArgs, h Half) error {
	a, b := g.A, g.B // 16-bit: N counts halves, so the size checks hold
	if err := g.defaults(); err != nil {
		return err
	}
	out, err := resultType(g.C, h)
	if err != nil {
		return err
	}
	d.counts.GEMMs++
	return d.b.gemmEx(halfType(h), out, compute32F, op(g.TransB), op(g.TransA), int32(g.N), int32(g.M), int32(g.K),
		g.Alpha, b.Ptr, int32(g.LDB), a.Ptr, int32(g.LDA), g.Beta, g.C.Ptr, int32(g.LDC))
}

// SgemmBatched runs count GEMMs whose operands sit at fixed strides
// (elements) from A, B and C: attention's per-head products.
func (d *Device) SgemmBatched(g GemmArgs, strideA, strideB, strideC, count int) error {
	if err := g.batch(strideA, strideB, strideC, count); err != nil {
		return err
	}
	d.counts.GEMMs++
	return d.b.sgemmBatched(op(g.TransB), op(g.TransA), int32(g.N), int32(g.M), int32(g.K),
		g.Alpha, g.B.Ptr, int32(g.LDB), int64(strideB), g.A.Ptr, int32(g.LDA), int64(strideA), g.Beta, g.C.Ptr, int32(g.LDC), int64(strideC), int32(count))
}

// Gemm16Batched is Gemm16 over count products whose operands sit at fixed
// strides from A, B (in 16-bit elements) and C (in FP32 elements).
func (d *Device) Gemm16Batched(g GemmArgs, h Half, strideA, strideB, strideC, count int) error {
	if err := g.batch(strideA, strideB, strideC, count); err != nil {
		return err
	}
	out, err := resultType(g.C, h)
	if err != nil {
		return err
	}
	d.counts.GEMMs++
	return d.b.gemmExBatched(halfType(h), out, compute32F, op(g.TransB), op(g.TransA), int32(g.N), int32(g.M), int32(g.K),
		g.Alpha, g.B.Ptr, int32(g.LDB), int64(strideB), g.A.Ptr, int32(g.LDA), int64(strideA), g.Beta, g.C.Ptr, int32(g.LDC), int64(strideC), int32(count))
}

// resultType is C's element type for a product on h operands: FP32, or
// BF16 for a half C of a BF16 product.
func resultType(c Buffer, h Half) (int32, error) {
	switch {
	case !c.Half:
		return dataR32F, nil
	case h == BF16:
		return dataR16BF, nil
	}
	return 0, fmt.Errorf("cuda: gemm: a 16-bit result of %s operands; only bf16 writes one", h)
}

func halfType(h Half) int32 {
	if h == FP16 {
		return dataR16F
	}
	return dataR16BF
}

// GemmTF32 runs g on the tensor cores in TF32, as PyTorch does with
// torch.backends.cuda.matmul.allow_tf32: FP32 operands, which the product
// reads rounded to TF32 (FP32's range, 10 mantissa bits), FP32
// accumulation into the FP32 C. cuBLAS GemmEx with FP32 matrices and the
// compute type CUBLAS_COMPUTE_32F_FAST_TF32; the emulator rounds each
// operand to TF32 to nearest, ties to even, and accumulates their
// products, so a test checks it against FP32 math on rounded inputs.
func (d *Device) GemmTF32(g GemmArgs) error {
	if err := g.defaults(); err != nil {
		return err
	}
	d.counts.GEMMs++
	return d.b.gemmEx(dataR32F, dataR32F, compute32FFastTF32, op(g.TransB), op(g.TransA), int32(g.N), int32(g.M), int32(g.K),
		g.Alpha, g.B.Ptr, int32(g.LDB), g.A.Ptr, int32(g.LDA), g.Beta, g.C.Ptr, int32(g.LDC))
}

// GemmTF32Batched is GemmTF32 over count products at fixed strides
// (elements) from A, B and C, as SgemmBatched (GemmStridedBatchedEx).
func (d *Device) GemmTF32Batched(g GemmArgs, strideA, strideB, strideC, count int) error {
	if err := g.batch(strideA, strideB, strideC, count); err != nil {
		return err
	}
	d.counts.GEMMs++
	return d.b.gemmExBatched(dataR32F, dataR32F, compute32FFastTF32, op(g.TransB), op(g.TransA), int32(g.N), int32(g.M), int32(g.K),
		g.Alpha, g.B.Ptr, int32(g.LDB), int64(strideB), g.A.Ptr, int32(g.LDA), int64(strideA), g.Beta, g.C.Ptr, int32(g.LDC), int64(strideC), int32(count))
}

// GemmRounded runs g on FP32 operands the way mixed precision (PyTorch's
// autocast) runs a matrix product: A and B rounded to h on the device (to
// nearest even), multiplied with FP32 accumulation into the FP32 C. The
// 16-bit copies cover exactly what the product reads and are freed before
// it returns.
func (d *Device) GemmRounded(g GemmArgs, h Half) error {
	return d.GemmRoundedBatched(g, h, 0, 0, 0, 1)
}

// GemmRoundedBatched is GemmRounded over count products at fixed strides
// (elements) from A, B and C, as SgemmBatched.
func (d *Device) GemmRoundedBatched(g GemmArgs, h Half, strideA, strideB, strideC, count int) error {
	return d.GemmRoundedWith(g, h, Buffer{}, Buffer{}, strideA, strideB, strideC, count)
}

// GemmRoundedWith is GemmRoundedBatched given A's or B's 16-bit copy (ah,
// bh: made by Round from the buffer g.A or g.B starts at; a zero Buffer
// for an operand rounded here, per call): a weight rounded once a step
// and read by every product of the step. An operand that is a half buffer
// (a bf16 run's activation or gradient) is read as it is, and a half C is
// written in BF16 (Gemm16).
func (d *Device) GemmRoundedWith(g GemmArgs, h Half, ah, bh Buffer, strideA, strideB, strideC, count int) error {
	if err := g.batch(strideA, strideB, strideC, count); err != nil {
		return err
	}
	na := (count-1)*strideA + extent(pick(g.TransA, g.K, g.M), pick(g.TransA, g.M, g.K), g.LDA)
	nb := (count-1)*strideB + extent(pick(g.TransB, g.N, g.K), pick(g.TransB, g.K, g.N), g.LDB)
	if na > g.A.N || nb > g.B.N {
		return fmt.Errorf("cuda: gemm: A holds %d elements and B %d, the products read %d and %d", g.A.N, g.B.N, na, nb)
	}
	if ah.Ptr != 0 && ah.N < na || bh.Ptr != 0 && bh.N < nb {
		return fmt.Errorf("cuda: gemm: the 16-bit copies hold %d and %d elements, the products read %d and %d", ah.N, bh.N, na, nb)
	}
	var err error
	switch {
	case ah.Ptr != 0:
	case g.A.Half: // already 16-bit: a half buffer is read as it is
		ah = g.A
	default:
		if ah, err = d.half(g.A, na, h); err != nil {
			return err
		}
		defer d.Free(ah)
	}
	switch {
	case bh.Ptr != 0:
	case g.B.Half:
		bh = g.B
	default:
		if bh, err = d.half(g.B, nb, h); err != nil {
			return err
		}
		defer d.Free(bh)
	}
	g.A, g.B = ah, bh
	if count == 1 {
		return d.Gemm16(g, h)
	}
	return d.Gemm16Batched(g, h, strideA, strideB, strideC, count)
}

// Round is a new 16-bit copy of every element of x, rounded to nearest
// even (GemmRoundedWith's ah or bh); RoundInto rounds x again into it.
func (d *Device) Round(x Buffer, h Half) (Buffer, error) { return d.half(x, x.N, h) }

// RoundInto rounds x into dst, a 16-bit copy Round made of a buffer of
// x's size.
func (d *Device) RoundInto(dst, x Buffer, h Half) error {
	if dst.N < x.N {
		return fmt.Errorf("cuda: rounding %d elements into a 16-bit copy of %d", x.N, dst.N)
	}
	if x.N == 0 {
		return nil
	}
	return d.Convert(dst, x, h)
}

// extent is how many elements a rows × cols matrix at row stride ld spans.
func extent(rows, cols, ld int) int {
	if rows == 0 || cols == 0 {
		return 0
	}
	return (rows-1)*ld + cols
}

// half is a 16-bit copy of x's first n elements.
func (d *Device) half(x Buffer, n int, h Half) (Buffer, error) {
	b, err := d.HalfBuffer(n)
	if err != nil {
		return b, err
	}
	if n > 0 {
		if err := d.Convert(b, Buffer{Ptr: x.Ptr, N: n, Half: x.Half}, h); err != nil {
			d.Free(b)
			return b, err
		}
	}
	return b, nil
}
