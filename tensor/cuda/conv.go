package cuda

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"unsafe"
)

// ConvShape is one 2-D convolution for cuDNN, as PyTorch's conv2d computes
// it (a cross-correlation) on row-major NCHW float32 tensors:
//
//	x [N, C, H, W] ⊛ w [K, C/Groups, KH, KW] → y [N, K, OH, OW]
//
// with PadH rows of zeros above and below x, PadW columns left and right,
// the window moved by StrideH, StrideW and its taps DilationH, DilationW
// apart; the channels in Groups groups (group g's K/Groups outputs read
// its C/Groups inputs). TF32 lets the products run on the tensor cores in
// TF32, as PyTorch's torch.backends.cudnn.allow_tf32; without it they run
// in FP32 FMA arithmetic only. A ConvShape is a map key: the device keeps
// each one's descriptors and algorithms (a plan) for its life.
type ConvShape struct {
	N, C, H, W           int
	K, KH, KW            int
	PadH, PadW           int
	StrideH, StrideW     int
	DilationH, DilationW int
	Groups               int
	TF32                 bool
}

// Out is the output's height and width.
func (c ConvShape) Out() (oh, ow int) {
	oh = (c.H+2*c.PadH-c.DilationH*(c.KH-1)-1)/c.StrideH + 1
	ow = (c.W+2*c.PadW-c.DilationW*(c.KW-1)-1)/c.StrideW + 1
	return oh, ow
}

// Sizes are the element counts of x, w and y.
func (c ConvShape) Sizes() (x, w, y int) {
	oh, ow := c.Out()
	return c.N * c.C * c.H * c.W, c.K * (c.C / max(c.Groups, 1)) * c.KH * c.KW, c.N * c.K * oh * ow
}

// check refuses a shape cuDNN's 4-d descriptors cannot hold or that has
// no output.
func (c ConvShape) check() error {
	bad := func(what string) error { return fmt.Errorf("cuda: convolution %+v: %s", c, what) }
	for _, v := range []int{c.N, c.C, c.H, c.W, c.K, c.KH, c.KW, c.StrideH, c.StrideW, c.DilationH, c.DilationW, c.Groups} {
		if v < 1 {
			return bad("sizes, strides, dilations and groups must be positive")
		}
	}
	if c.PadH < 0 || c.PadW < 0 {
		return bad("negative padding")
	}
	if c.C%c.Groups != 0 || c.K%c.Groups != 0 {
		return bad("the groups divide neither the input nor the output channels")
	}
	if c.H+2*c.PadH < c.DilationH*(c.KH-1)+1 || c.W+2*c.PadW < c.DilationW*(c.KW-1)+1 {
		return bad("the window is larger than the padded input")
	}
	x, w, y := c.Sizes()
	if x > math.MaxInt32 || w > math.MaxInt32 || y > math.MaxInt32 {
		return bad("a tensor of 2³¹ elements or more")
	}
	return nil
}

// ErrNoDNN is ConvReady's error on a device without cuDNN (see ConvPath).
var ErrNoDNN = errors.New("cuda: no cuDNN on this device")

// ConvUnsupportedError is a convolution cuDNN offers no algorithm for
// within the workspace limit and the precision (or whose output it sizes
// otherwise than ConvShape.Out): it runs as im2col + GEMM instead.
type ConvUnsupportedError struct {
	Shape ConvShape
	Why   string
}

func (e *ConvUnsupportedError) Error() string {
	return fmt.Sprintf("cuda: cuDNN cannot run the convolution %+v: %s", e.Shape, e.Why)
}

// The enums of cudnn_graph.h and cudnn_ops.h that the calls take.
const (
	dnnFloat            = 0 // CUDNN_DATA_FLOAT
	dnnNCHW             = 0 // CUDNN_TENSOR_NCHW
	dnnCrossCorrelation = 1 // CUDNN_CROSS_CORRELATION: PyTorch's conv2d, the window not flipped

	mathDefault         = 0 // CUDNN_DEFAULT_MATH: on Ampere and later, TF32 tensor cores allowed for FP32 data
	mathTensorOp        = 1 // CUDNN_TENSOR_OP_MATH
	mathAllowConversion = 2 // CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION: FP32 data may be converted to FP16 for the tensor cores
	mathFMA             = 3 // CUDNN_FMA_MATH: FMA instructions only (FP32 exact as SGEMM)
)

// The three convolutions a plan runs.
const (
	dirForward = iota
	dirBackwardData
	dirBackwardFilter
)

var dirNames = [3]string{"forward", "backward data", "backward filter"}

// dnnPerf is one entry of cuDNN's heuristics
// (cudnnConvolution{Fwd,BwdData,BwdFilter}AlgoPerf_t: algo, status, time,
// memory, determinism, mathType, reserved[3]; 48 bytes on 64-bit Linux).
type dnnPerf struct {
	algo, status int32
	memory       uint64 // workspace bytes
	math         int32
}

const perfBytes = 48

// decodePerfs reads n perf structs from raw, as the C struct lays them
// out: int32 algo at 0, status at 4, float time at 8, size_t memory at 16,
// determinism at 24, mathType at 28.
func decodePerfs(raw []byte, n int) []dnnPerf {
	out := make([]dnnPerf, 0, n)
	for i := 0; i < n && (i+1)*perfBytes <= len(raw); i++ {
		e := raw[i*perfBytes:]
		out = append(out, dnnPerf{
			algo:   int32(binary.LittleEndian.Uint32(e[0:])),
			status: int32(binary.LittleEndian.Uint32(e[4:])),
			memory: binary.LittleEndian.Uint64(e[16:]),
			math:   int32(binary.LittleEndian.Uint32(e[28:])),
		})
	}
	return out
}

// mathAllowed says whether an algorithm computing in math may run in the
// precision: FP32 (tf32 false) takes FMA arithmetic alone (default math
// would allow TF32 on Ampere and later); TF32 anything but a conversion
// of the operands to FP16.
func mathAllowed(math int32, tf32 bool) bool {
	if !tf32 {
		return math == mathFMA
	}
	return math == mathDefault || math == mathTensorOp || math == mathFMA
}

// candidates are the entries of perfs, fastest first as cuDNN's
// heuristics sort them, that ran (status 0), need at most limit bytes of
// workspace and compute in a math the precision allows.
func candidates(perfs []dnnPerf, tf32 bool, limit uint64) []dnnPerf {
	var out []dnnPerf
	for _, p := range perfs {
		if p.status == 0 && p.memory <= limit && mathAllowed(p.math, tf32) {
			out = append(out, p)
		}
	}
	return out
}

// baseMath is the math type a precision's descriptors start in, as
// PyTorch sets it: FMA for FP32, the default (TF32 allowed) for TF32.
func baseMath(tf32 bool) int32 {
	if tf32 {
		return mathDefault
	}
	return mathFMA
}

// convPlan is one ConvShape's descriptors and, per direction, the
// algorithm chosen, the math type it runs in (set on that direction's
// convolution descriptor) and its workspace.
type convPlan struct {
	shape      ConvShape
	x, y, bias uintptr // tensor descriptors: x, y, the bias [1, K, 1, 1]
	w          uintptr // filter descriptor
	conv       [3]uintptr
	algo       [3]int32
	math       [3]int32
	space      [3]uint64 // workspace bytes
	err        error     // why the plan cannot run (kept: not asked again)
	searched   bool      // the measured search chose all three (AlgoEnv)
}

// free destroys p's descriptors.
func (p *convPlan) free(l *dnnLib) {
	for _, t := range []uintptr{p.x, p.y, p.bias} {
		if t != 0 {
			l.destroyTensor(t)
		}
	}
	if p.w != 0 {
		l.destroyFilter(p.w)
	}
	for _, c := range p.conv {
		if c != 0 {
			l.destroyConv(c)
		}
	}
}

// ConvReady makes c's plan (its descriptors, and an algorithm for each
// direction from cuDNN's heuristics: the first that fits the precision and
// the workspace limit) unless the device has it, and says whether cuDNN
// runs c: nil, or ErrNoDNN, or a *ConvUnsupportedError (run it as im2col
// then). A shape cuDNN's descriptors cannot hold is unsupported too. Where
// a cuDNN call fails in making a plan, the device drops cuDNN for good,
// saying why once (ConvPathReason), and ErrNoDNN is returned: a cuDNN
// that cannot describe a convolution is not one to run the others on.
func (d *Device) ConvReady(c ConvShape) error {
	_, err := d.plan(c)
	return err
}

func (d *Device) plan(c ConvShape) (*convPlan, error) {
	if !d.dnnReady() {
		return nil, ErrNoDNN
	}
	if p, ok := d.dnn.plans[c]; ok {
		return p, p.err
	}
	if d.dnn.searchErr != nil {
		return nil, d.dnn.searchErr
	}
	if err := c.check(); err != nil {
		return nil, &ConvUnsupportedError{c, err.Error()}
	}
	p := &convPlan{shape: c}
	p.err = d.dnn.prepare(p)
	if p.err == nil && d.dnn.search {
		p.searched, p.err = d.measure(p)
	}
	d.dnn.plans[c] = p
	var unsupported *ConvUnsupportedError
	if p.err != nil && !errors.As(p.err, &unsupported) {
		// cuDNN failed where it should not (a descriptor, a heuristic):
		// the device goes on without it, saying why
		d.dropDNN(fmt.Errorf("preparing the convolution %+v: %w", c, p.err))
		return nil, ErrNoDNN
	}
	return p, p.err
}

// prepare sets p's descriptors and chooses its algorithms.
func (n *dnn) prepare(p *convPlan) error {
	l, c := n.lib, p.shape
	oh, ow := c.Out()
	type step struct {
		call string
		do   func() int32
	}
	steps := []step{
		{"cudnnCreateTensorDescriptor", func() int32 { return l.createTensor(&p.x) }},
		{"cudnnCreateTensorDescriptor", func() int32 { return l.createTensor(&p.y) }},
		{"cudnnCreateTensorDescriptor", func() int32 { return l.createTensor(&p.bias) }},
		{"cudnnCreateFilterDescriptor", func() int32 { return l.createFilter(&p.w) }},
		{"cudnnSetTensor4dDescriptor x", func() int32 {
			return l.setTensor4d(p.x, dnnNCHW, dnnFloat, int32(c.N), int32(c.C), int32(c.H), int32(c.W))
		}},
		{"cudnnSetTensor4dDescriptor y", func() int32 {
			return l.setTensor4d(p.y, dnnNCHW, dnnFloat, int32(c.N), int32(c.K), int32(oh), int32(ow))
		}},
		{"cudnnSetTensor4dDescriptor bias", func() int32 { return l.setTensor4d(p.bias, dnnNCHW, dnnFloat, 1, int32(c.K), 1, 1) }},
		{"cudnnSetFilter4dDescriptor", func() int32 {
			return l.setFilter4d(p.w, dnnFloat, dnnNCHW, int32(c.K), int32(c.C/c.Groups), int32(c.KH), int32(c.KW))
		}},
	}
	for dir := range p.conv {
		steps = append(steps,
			step{"cudnnCreateConvolutionDescriptor", func() int32 { return l.createConv(&p.conv[dir]) }},
			step{"cudnnSetConvolution2dDescriptor", func() int32 {
				return l.setConv2d(p.conv[dir], int32(c.PadH), int32(c.PadW), int32(c.StrideH), int32(c.StrideW),
					int32(c.DilationH), int32(c.DilationW), dnnCrossCorrelation, dnnFloat)
			}},
			step{"cudnnSetConvolutionGroupCount", func() int32 { return l.setGroupCount(p.conv[dir], int32(c.Groups)) }},
			step{"cudnnSetConvolutionMathType", func() int32 { return l.setMathType(p.conv[dir], baseMath(c.TF32)) }})
	}
	for _, s := range steps {
		if err := n.check(s.call, s.do()); err != nil {
			return err
		}
	}
	var gn, gk, gh, gw int32
	if err := n.check("cudnnGetConvolution2dForwardOutputDim", l.outputDim(p.conv[dirForward], p.x, p.w, &gn, &gk, &gh, &gw)); err != nil {
		return err
	}
	if int(gn) != c.N || int(gk) != c.K || int(gh) != oh || int(gw) != ow {
		return &ConvUnsupportedError{c, fmt.Sprintf("cuDNN's output is [%d, %d, %d, %d], not [%d, %d, %d, %d]", gn, gk, gh, gw, c.N, c.K, oh, ow)}
	}
	for dir := range p.conv {
		if err := n.choose(p, dir); err != nil {
			return err
		}
	}
	return nil
}

// maxAlgos is how many of the heuristics' algorithms are asked for: more
// than cuDNN 8 and 9 have for any direction.
const maxAlgos = 16

// choose takes direction dir's algorithm: the heuristics' first candidate
// whose workspace, asked of cuDNN for that algorithm in its math type, is
// within the limit.
func (n *dnn) choose(p *convPlan, dir int) error {
	l, conv := n.lib, p.conv[dir]
	raw := make([]byte, maxAlgos*perfBytes)
	var got int32
	var st int32
	var call string
	switch dir {
	case dirForward:
		call, st = "cudnnGetConvolutionForwardAlgorithm_v7", l.fwdAlgos(n.h, p.x, p.w, conv, p.y, maxAlgos, &got, unsafe.Pointer(&raw[0]))
	case dirBackwardData:
		call, st = "cudnnGetConvolutionBackwardDataAlgorithm_v7", l.bwdDataAlgos(n.h, p.w, p.y, conv, p.x, maxAlgos, &got, unsafe.Pointer(&raw[0]))
	default:
		call, st = "cudnnGetConvolutionBackwardFilterAlgorithm_v7", l.bwdFilterAlgos(n.h, p.x, p.y, conv, p.w, maxAlgos, &got, unsafe.Pointer(&raw[0]))
	}
	if err := n.check(call, st); err != nil {
		return err
	}
	return n.pick(p, dir, decodePerfs(raw, int(min(got, maxAlgos))), "heuristics")
}

// pick takes direction dir's algorithm from perfs (the heuristics' or the
// measured search's, fastest first): the first candidate whose workspace,
// asked of cuDNN for that algorithm in its math type, is within the
// limit. It leaves the descriptor in that algorithm's math type.
func (n *dnn) pick(p *convPlan, dir int, perfs []dnnPerf, from string) error {
	l, conv := n.lib, p.conv[dir]
	var st int32
	for _, a := range candidates(perfs, p.shape.TF32, n.limit) {
		if err := n.check("cudnnSetConvolutionMathType", l.setMathType(conv, a.math)); err != nil {
			return err
		}
		var space uint64
		switch dir {
		case dirForward:
			st = l.fwdSpace(n.h, p.x, p.w, conv, p.y, a.algo, &space)
		case dirBackwardData:
			st = l.bwdDataSpace(n.h, p.w, p.y, conv, p.x, a.algo, &space)
		default:
			st = l.bwdFilterSpace(n.h, p.x, p.y, conv, p.w, a.algo, &space)
		}
		if st != 0 || max(space, a.memory) > n.limit { // this algorithm cannot run here: the next one
			continue
		}
		p.algo[dir], p.math[dir], p.space[dir] = a.algo, a.math, max(space, a.memory)
		return nil
	}
	return &ConvUnsupportedError{p.shape, fmt.Sprintf("no %s algorithm among the %d of cuDNN's %s for %s within %s of workspace",
		dirNames[dir], len(perfs), from, map[bool]string{false: "FP32 (FMA)", true: "TF32"}[p.shape.TF32], bytesText(n.limit))}
}

// ConvAlgorithms are the algorithms (cuDNN's enum values) and math types
// the plan of c runs, forward, backward data and backward filter, once
// ConvReady has made it: for tests and reports.
func (d *Device) ConvAlgorithms(c ConvShape) (algo, math [3]int, ok bool) {
	if d.dnn == nil {
		return algo, math, false
	}
	p, found := d.dnn.plans[c]
	if !found || p.err != nil {
		return algo, math, false
	}
	for i := range algo {
		algo[i], math[i] = int(p.algo[i]), int(p.math[i])
	}
	return algo, math, true
}

// ready is c's plan for a call, and its buffers checked against c's sizes.
func (d *Device) ready(c ConvShape, call string, bufs ...sized) (*convPlan, error) {
	p, err := d.plan(c)
	if err != nil {
		return nil, err
	}
	for _, b := range bufs {
		if b.buf.N < b.n || b.buf.Ptr == 0 && b.n > 0 {
			return nil, fmt.Errorf("cuda: %s: %s holds %d elements, the convolution %+v needs %d", call, b.what, b.buf.N, c, b.n)
		}
	}
	return p, nil
}

type sized struct {
	what string
	buf  Buffer
	n    int
}

// workspace is n bytes of device memory from the pool (none for 0): the
// work queued on it is ordered before what later reuses it, so it goes
// back to the pool once the call is queued.
func (d *Device) workspace(n uint64) (Buffer, error) {
	if n == 0 {
		return Buffer{}, nil
	}
	return d.Alloc(int((n + 3) / 4))
}

// dnnRun runs a cuDNN call that queues work with the workspace of plan
// direction dir (none for -1), counting it.
func (d *Device) dnnRun(p *convPlan, dir int, call string, f func(ws Buffer, bytes uint64) int32) error {
	var ws Buffer
	var bytes uint64
	if dir >= 0 {
		bytes = p.space[dir]
		var err error
		if ws, err = d.workspace(bytes); err != nil {
			return err
		}
		defer func() {
			if ws.Ptr != 0 {
				_ = d.Free(ws)
			}
		}()
	}
	d.counts.DNN++
	return d.dnn.check(call, f(ws, bytes))
}

// ConvForward writes y = x ⊛ w, the convolution c (cudnnConvolutionForward
// with beta 0: y's old contents are not read).
func (d *Device) ConvForward(c ConvShape, x, w, y Buffer) error {
	nx, nw, ny := c.Sizes()
	p, err := d.ready(c, "ConvForward", sized{"x", x, nx}, sized{"w", w, nw}, sized{"y", y, ny})
	if err != nil {
		return err
	}
	one, zero := float32(1), float32(0)
	return d.dnnRun(p, dirForward, "cudnnConvolutionForward", func(ws Buffer, bytes uint64) int32 {
		return d.dnn.lib.forward(d.dnn.h, unsafe.Pointer(&one), p.x, x.Ptr, p.w, w.Ptr, p.conv[dirForward], p.algo[dirForward],
			ws.Ptr, bytes, unsafe.Pointer(&zero), p.y, y.Ptr)
	})
}

// ConvBackwardData adds the input's gradient into gx: gx += gy ⊛ᵀ w
// (cudnnConvolutionBackwardData with beta 1), or, add false, writes it:
// gx = gy ⊛ᵀ w (beta 0: gx's old contents are not read).
func (d *Device) ConvBackwardData(c ConvShape, w, gy, gx Buffer, add bool) error {
	nx, nw, ny := c.Sizes()
	p, err := d.ready(c, "ConvBackwardData", sized{"w", w, nw}, sized{"gy", gy, ny}, sized{"gx", gx, nx})
	if err != nil {
		return err
	}
	one, beta := float32(1), float32(0)
	if add {
		beta = 1
	}
	return d.dnnRun(p, dirBackwardData, "cudnnConvolutionBackwardData", func(ws Buffer, bytes uint64) int32 {
		return d.dnn.lib.backwardData(d.dnn.h, unsafe.Pointer(&one), p.w, w.Ptr, p.y, gy.Ptr, p.conv[dirBackwardData], p.algo[dirBackwardData],
			ws.Ptr, bytes, unsafe.Pointer(&beta), p.x, gx.Ptr)
	})
}

// ConvBackwardFilter adds the weight's gradient into gw: gw += Σ_n gy ⊛ x
// (cudnnConvolutionBackwardFilter with beta 1).
func (d *Device) ConvBackwardFilter(c ConvShape, x, gy, gw Buffer) error {
	nx, nw, ny := c.Sizes()
	p, err := d.ready(c, "ConvBackwardFilter", sized{"x", x, nx}, sized{"gy", gy, ny}, sized{"gw", gw, nw})
	if err != nil {
		return err
	}
	one := float32(1)
	return d.dnnRun(p, dirBackwardFilter, "cudnnConvolutionBackwardFilter", func(ws Buffer, bytes uint64) int32 {
		return d.dnn.lib.backwardFilter(d.dnn.h, unsafe.Pointer(&one), p.x, x.Ptr, p.y, gy.Ptr, p.conv[dirBackwardFilter], p.algo[dirBackwardFilter],
			ws.Ptr, bytes, unsafe.Pointer(&one), p.w, gw.Ptr)
	})
}

// ConvAddBias adds bias [K] to every output of channel k: y += b
// (cudnnAddTensor with beta 1).
func (d *Device) ConvAddBias(c ConvShape, bias, y Buffer) error {
	_, _, ny := c.Sizes()
	p, err := d.ready(c, "ConvAddBias", sized{"bias", bias, c.K}, sized{"y", y, ny})
	if err != nil {
		return err
	}
	one := float32(1)
	return d.dnnRun(p, -1, "cudnnAddTensor", func(Buffer, uint64) int32 {
		return d.dnn.lib.addTensor(d.dnn.h, unsafe.Pointer(&one), p.bias, bias.Ptr, unsafe.Pointer(&one), p.y, y.Ptr)
	})
}

// ConvBackwardBias adds the bias's gradient into gb: gb[k] += Σ gy[·, k,
// ·, ·] (cudnnConvolutionBackwardBias with beta 1).
func (d *Device) ConvBackwardBias(c ConvShape, gy, gb Buffer) error {
	_, _, ny := c.Sizes()
	p, err := d.ready(c, "ConvBackwardBias", sized{"gy", gy, ny}, sized{"gb", gb, c.K})
	if err != nil {
		return err
	}
	one := float32(1)
	return d.dnnRun(p, -1, "cudnnConvolutionBackwardBias", func(Buffer, uint64) int32 {
		return d.dnn.lib.backwardBias(d.dnn.h, unsafe.Pointer(&one), p.y, gy.Ptr, unsafe.Pointer(&one), p.bias, gb.Ptr)
	})
}
