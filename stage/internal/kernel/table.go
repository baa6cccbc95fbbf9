package kernel

import (
	"fmt"
	"math/rand/v2"

	"github.com/graphpipe/graphpipe/dag"
	"github.com/graphpipe/graphpipe/tensor/cuda"
)

// The GPU kernels compute every op kind with package cuda: cuBLAS for the
// products, kernels.cu for the rest, behind the CPU kernels' interface:
// forward makes the output, backward adds into the gradients it is given
// and skips those given as nil. Where values live is the scope's residency's
// business (residency.go): on the device for an executor's micro-batches,
// or copied in and out per call (Copies) for a kernel used alone, as the op
// tests use one.

type (
	fwdFn = func(s *Scope, x, p []*Value[float32]) (*Value[float32], any, error)
	bwdFn = func(s *Scope, gy *Value[float32], x, p []*Value[float32], y *Value[float32], st any, gx, gp []*Value[float32])
)

// opArgs is what a kernel constructor reads: op i of g, its inputs and
// output, and its executor's context (the kernels that draw random numbers
// read it).
type opArgs struct {
	g   *dag.Graph
	i   int
	op  *dag.Op
	in  []*dag.Tensor
	out *dag.Tensor
	ctx *Pass
}

func newOpArgs(g *dag.Graph, i int, ctx *Pass) *opArgs {
	return &opArgs{g: g, i: i, op: g.Op(i), in: g.OpInputs(i), out: g.Out(i), ctx: ctx}
}

// Labeler writes sample s's target from the teacher's outputs z: how the
// synthetic data (stage's Dataset) labels a loss's target.
type Labeler func(z []float64, tgt *Value[float32], s int)

// Label is how the synthetic data labels the target of a loss of kind;
// nil for a kind that is no loss.
func Label(kind dag.Kind) Labeler { return kernels[kind].label }

// kernelSpec is one op kind's row of the table: its CPU kernel, its GPU
// kernel and how its parameters start.
type kernelSpec struct {
	cpu cpuKernels
	// gpu builds the kernel's device halves (*_gpu.go); nil: the kind has no
	// CUDA kernel.
	gpu func(o *opArgs) (fwdFn, bwdFn)
	// init fills parameter or buffer p (v, its elements) from r, its own
	// generator, as PyTorch's module does by default; nil: zeros.
	init func(o *opArgs, p dag.Param, r *rand.Rand, v []float32)
	// label is how the synthetic data labels a loss's target (Label).
	// Losses only.
	label Labeler
	// perSample is each sample's loss (SampleLosses), for selective
	// backprop. Losses only.
	perSample SampleLosser
}

// cpuKernels is a row's CPU kernel constructor, instantiated for float32
// (what runs) and float64 (what the gradient checks run).
type cpuKernels struct {
	f32 func(o *opArgs) (Kernel[float32], error)
	f64 func(o *opArgs) (Kernel[float64], error)
}

// cpu is the CPU column of a constructor that cannot fail, given in both
// instantiations.
func cpu[K32 Kernel[float32], K64 Kernel[float64]](f32 func(*opArgs) K32, f64 func(*opArgs) K64) cpuKernels {
	return cpuKernels{
		f32: func(o *opArgs) (Kernel[float32], error) { return f32(o), nil },
		f64: func(o *opArgs) (Kernel[float64], error) { return f64(o), nil },
	}
}

// on is the GPU column of a kernel computed from its CPU kernel's settings.
func on[K any](mk func(*opArgs) K, gpu func(K) (fwdFn, bwdFn)) func(*opArgs) (fwdFn, bwdFn) {
	return func(o *opArgs) (fwdFn, bwdFn) { return gpu(mk(o)) }
}

// plain is the GPU column of a kernel that needs no settings.
func plain(gpu func() (fwdFn, bwdFn)) func(*opArgs) (fwdFn, bwdFn) {
	return func(*opArgs) (fwdFn, bwdFn) { return gpu() }
}

// kernels is the table from op kind to kernels, one row per kind of
// dag.Kinds. The kernels live by family, a family's CPU kernels in one file
// (dense.go, conv.go, ...) and its GPU kernels beside them (dense_gpu.go,
// conv_gpu.go, ...); docs/adding-an-op.md says how to add one.
var kernels = map[dag.Kind]kernelSpec{
	dag.Linear: {cpu: cpu(linearKernel[float32], linearKernel[float64]), gpu: on(linearKernel[float32], gpuLinear),
		init: initLinear},
	dag.ReLU:    {cpu: cpu(pointwiseKernel[float32], pointwiseKernel[float64]), gpu: on(pointwiseKernel[float32], gpuAct)},
	dag.GELU:    {cpu: cpu(pointwiseKernel[float32], pointwiseKernel[float64]), gpu: on(pointwiseKernel[float32], gpuAct)},
	dag.Tanh:    {cpu: cpu(pointwiseKernel[float32], pointwiseKernel[float64]), gpu: on(pointwiseKernel[float32], gpuAct)},
	dag.Sigmoid: {cpu: cpu(pointwiseKernel[float32], pointwiseKernel[float64]), gpu: on(pointwiseKernel[float32], gpuAct)},
	dag.LayerNorm: {cpu: cpu(layerNormKernel[float32], layerNormKernel[float64]),
		gpu: on(layerNormKernel[float32], gpuLayerNorm), init: initOnes("weight")},
	dag.Add:     {cpu: cpu(addKernel[float32], addKernel[float64]), gpu: gpuAddOrBroadcast},
	dag.Mul:     {cpu: cpu(mulKernel[float32], mulKernel[float64]), gpu: gpuMulOrBroadcast},
	dag.Concat:  {cpu: cpu(concatKernel[float32], concatKernel[float64]), gpu: on(concatKernel[float32], gpuConcat)},
	dag.Mean:    {cpu: cpu(meanKernel[float32], meanKernel[float64]), gpu: on(meanKernel[float32], gpuMean)},
	dag.Flatten: {cpu: cpu(flattenKernel[float32], flattenKernel[float64]), gpu: plain(gpuFlatten)},
	dag.Embedding: {cpu: cpu(embeddingKernel[float32], embeddingKernel[float64]),
		gpu: on(embeddingKernel[float32], gpuEmbedding), init: initNormal},
	dag.EmbeddingBag: {cpu: cpu(embeddingBagKernel[float32], embeddingBagKernel[float64]),
		gpu: on(embeddingBagKernel[float32], gpuEmbeddingBag), init: initNormal},
	dag.Attention: {cpu: cpu(attentionKernel[float32], attentionKernel[float64]),
		gpu: on(attentionKernel[float32], gpuAttention), init: initAttention},
	dag.DotInteraction: {cpu: cpu(dotKernel[float32], dotKernel[float64]), gpu: plain(gpuDot)},
	dag.SoftmaxCrossEntropy: {cpu: cpu(crossEntropyKernel[float32], crossEntropyKernel[float64]),
		gpu: on(crossEntropyKernel[float32], gpuCrossEntropy), label: labelClass, perSample: sampleCrossEntropy},
	dag.MSE: {cpu: cpu(mseKernel[float32], mseKernel[float64]), gpu: plain(gpuMSE), label: labelValues,
		perSample: sampleElements(squaredError)},
	dag.BCEWithLogits: {cpu: cpu(bceKernel[float32], bceKernel[float64]), gpu: plain(gpuBCE), label: labelBits,
		perSample: sampleElements(logisticLoss)},
	dag.Opaque: {cpu: cpuKernels{f32: opaqueKernel[float32], f64: opaqueKernel[float64]}},

	dag.Conv2D: {cpu: cpu(conv2DKernel[float32], conv2DKernel[float64]), gpu: on(conv2DKernel[float32], gpuConv2D),
		init: initConv2D},
	dag.BatchNorm: {cpu: cpu(batchNormKernel[float32], batchNormKernel[float64]),
		gpu: on(batchNormKernel[float32], gpuBatchNorm), init: initOnes("weight", "running_var")},
	dag.MaxPool2D: {cpu: cpu(maxPoolKernel[float32], maxPoolKernel[float64]), gpu: on(maxPoolKernel[float32], gpuMaxPool)},
	dag.AvgPool2D: {cpu: cpu(avgPoolKernel[float32], avgPoolKernel[float64]), gpu: on(avgPoolKernel[float32], gpuAvgPool)},
	dag.GlobalAvgPool: {cpu: cpu(globalAvgPoolKernel[float32], globalAvgPoolKernel[float64]),
		gpu: plain(gpuGlobalAvgPool)},
	dag.MatMul:    {cpu: cpu(matmulKernel[float32], matmulKernel[float64]), gpu: on(matmulKernel[float32], gpuMatMul)},
	dag.Reshape:   {cpu: cpu(reshapeKernel[float32], reshapeKernel[float64]), gpu: on(reshapeKernel[float32], gpuReshape)},
	dag.Transpose: {cpu: cpu(transposeKernel[float32], transposeKernel[float64]), gpu: on(transposeKernel[float32], gpuTranspose)},
	dag.Softmax:   {cpu: cpu(softmaxKernel[float32], softmaxKernel[float64]), gpu: on(softmaxKernel[float32], gpuSoftmax)},
	dag.Slice:     {cpu: cpu(sliceKernel[float32], sliceKernel[float64]), gpu: on(sliceKernel[float32], gpuSlice)},
	dag.Pad:       {cpu: cpu(padKernel[float32], padKernel[float64]), gpu: on(padKernel[float32], gpuPad)},
	dag.Sub:       {cpu: cpu(arithKernel[float32], arithKernel[float64]), gpu: gpuArith},
	dag.Div:       {cpu: cpu(arithKernel[float32], arithKernel[float64]), gpu: gpuArith},
	dag.Pow:       {cpu: cpu(powKernel[float32], powKernel[float64]), gpu: on(powKernel[float32], gpuUnary)},
	dag.Exp:       {cpu: cpu(unaryKernel[float32], unaryKernel[float64]), gpu: on(unaryKernel[float32], gpuUnary)},
	dag.Log:       {cpu: cpu(unaryKernel[float32], unaryKernel[float64]), gpu: on(unaryKernel[float32], gpuUnary)},
	dag.Sqrt:      {cpu: cpu(unaryKernel[float32], unaryKernel[float64]), gpu: on(unaryKernel[float32], gpuUnary)},
	dag.Neg:       {cpu: cpu(unaryKernel[float32], unaryKernel[float64]), gpu: on(unaryKernel[float32], gpuUnary)},
	dag.Erf:       {cpu: cpu(unaryKernel[float32], unaryKernel[float64]), gpu: on(unaryKernel[float32], gpuUnary)},
	dag.HardSwish: {cpu: cpu(unaryKernel[float32], unaryKernel[float64]), gpu: on(unaryKernel[float32], gpuUnary)},
	dag.HardSigmoid: {cpu: cpu(hardSigmoidKernel[float32], hardSigmoidKernel[float64]),
		gpu: on(hardSigmoidKernel[float32], gpuUnary)},
	dag.ReduceMean: {cpu: cpu(reduceMeanKernel[float32], reduceMeanKernel[float64]),
		gpu: on(reduceMeanKernel[float32], gpuReduce)},
	dag.ReduceSum: {cpu: cpu(reduceSumKernel[float32], reduceSumKernel[float64]),
		gpu: on(reduceSumKernel[float32], gpuReduce)},
	dag.Dropout:   {cpu: cpu(dropoutKernel[float32], dropoutKernel[float64]), gpu: on(dropoutKernel[float32], gpuDropout)},
	dag.Parameter: {cpu: cpu(parameterKernel[float32], parameterKernel[float64]), gpu: on(parameterKernel[float32], gpuParameter)},
	dag.Constant:  {cpu: cpu(constantKernel[float32], constantKernel[float64]), gpu: on(constantKernel[float32], gpuConstant)},
}

// New builds the CPU kernel of op i of g; ctx is its executor's.
func New[T Num](g *dag.Graph, i int, ctx *Pass) (Kernel[T], error) {
	o := newOpArgs(g, i, ctx)
	row, ok := kernels[o.op.Kind]
	if !ok {
		return nil, &OpError{o.op.Name, fmt.Sprintf("no kernel for %s", o.op.Kind)}
	}
	var k any
	var err error
	if _, single := any(T(0)).(float32); single {
		k, err = row.cpu.f32(o)
	} else {
		k, err = row.cpu.f64(o)
	}
	if err != nil {
		return nil, err
	}
	return k.(Kernel[T]), nil
}

// NewGPU builds the GPU kernel of op i of g, its values where res keeps
// them (nil: Copies); errp collects device errors from backward passes. A
// kind without a CUDA kernel fails as its CPU kernel does (opaque, an
// unknown kind), or for want of one.
func NewGPU(g *dag.Graph, i int, d *cuda.Device, res Residency, errp *error, ctx *Pass) (Kernel[float32], error) {
	o := newOpArgs(g, i, ctx)
	row := kernels[o.op.Kind]
	if row.gpu == nil {
		if _, err := New[float32](g, i, ctx); err != nil {
			return nil, err
		}
		return nil, &OpError{o.op.Name, fmt.Sprintf("%s has no CUDA kernel", o.op.Kind)}
	}
	fwd, bwd := row.gpu(o)
	return &gpuKernel{d: d, res: res, errp: errp, fwd: fwd, bwd: bwd}, nil
}

// opaqueKernel is opaque's: it has none.
func opaqueKernel[T Num](o *opArgs) (Kernel[T], error) {
	return nil, &OpError{o.op.Name, "is opaque: it has a cost but no computation, so it can be searched and simulated but not run"}
}
