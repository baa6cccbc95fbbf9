package cuda

import (
	"fmt"
	"math"
	"unsafe"
)

// BNShape is batch_norm over x [N, C, S] (S values per sample and
// channel: H·W for an image), statistics per channel over the N·S values
// of each, as PyTorch's BatchNorm computes them in training, through
// cuDNN's spatial batch norm (cudnnBatchNormalizationForwardTraining and
// Backward, the calls PyTorch's eager BatchNorm2d makes on FP32 NCHW
// data). A BNShape is a map key: the device keeps each one's descriptors
// for its life.
type BNShape struct{ N, C, S int }

// dnnBNSpatial is CUDNN_BATCHNORM_SPATIAL: one mean and variance per
// channel, over the batch and every spatial position.
const dnnBNSpatial = 1

// bnPlan is a BNShape's descriptors: x (and y, dx, dy) [N, C, S, 1] and
// the per-channel tensors (scale, bias, means, variances) [1, C, 1, 1].
type bnPlan struct {
	x, p uintptr
	err  error // why cuDNN cannot run the shape (kept: not asked again)
}

func (p *bnPlan) free(l *dnnLib) {
	for _, t := range []uintptr{p.x, p.p} {
		if t != 0 {
			l.destroyTensor(t)
		}
	}
}

// BNUnsupportedError is a batch norm cuDNN's descriptors cannot hold: it
// runs on graphpipe's own kernels instead.
type BNUnsupportedError struct {
	Shape BNShape
	Why   string
}

func (e *BNUnsupportedError) Error() string {
	return fmt.Sprintf("cuda: batch norm %+v: %s", e.Shape, e.Why)
}

// BNReady makes b's descriptors unless the device has them, and says
// whether cuDNN runs b: nil, ErrNoDNN, or a *BNUnsupportedError. As with
// ConvReady, a cuDNN call that fails in making the descriptors drops
// cuDNN from the device (ErrNoDNN).
func (d *Device) BNReady(b BNShape) error {
	_, err := d.bnPlan(b)
	return err
}

func (d *Device) bnPlan(b BNShape) (*bnPlan, error) {
	if !d.dnnReady() {
		return nil, ErrNoDNN
	}
	if p, ok := d.dnn.bns[b]; ok {
		return p, p.err
	}
	if b.N < 1 || b.C < 1 || b.S < 1 || b.N*b.S < 2 {
		return nil, &BNUnsupportedError{b, "sizes must be positive, with more than one value per channel"}
	}
	if b.N*b.C*b.S > math.MaxInt32 {
		return nil, &BNUnsupportedError{b, "a tensor of 2³¹ elements or more"}
	}
	p := &bnPlan{}
	p.err = d.dnn.prepareBN(p, b)
	d.dnn.bns[b] = p
	if p.err != nil {
		d.dropDNN(fmt.Errorf("preparing the batch norm %+v: %w", b, p.err))
		return nil, ErrNoDNN
	}
	return p, nil
}

func (n *dnn) prepareBN(p *bnPlan, b BNShape) error {
	l := n.lib
	if err := n.check("cudnnCreateTensorDescriptor", l.createTensor(&p.x)); err != nil {
		return err
	}
	if err := n.check("cudnnCreateTensorDescriptor", l.createTensor(&p.p)); err != nil {
		return err
	}
	if err := n.check("cudnnSetTensor4dDescriptor x", l.setTensor4d(p.x, dnnNCHW, dnnFloat, int32(b.N), int32(b.C), int32(b.S), 1)); err != nil {
		return err
	}
	return n.check("cudnnSetTensor4dDescriptor scale", l.setTensor4d(p.p, dnnNCHW, dnnFloat, 1, int32(b.C), 1, 1))
}

// bnCheck is b's plan for a call, its buffers checked against b's sizes
// (x-sized ones hold N·C·S elements, the others C).
func (d *Device) bnCheck(b BNShape, call string, big, small []sized) (*bnPlan, error) {
	p, err := d.bnPlan(b)
	if err != nil {
		return nil, err
	}
	for i, s := range append(append([]sized(nil), big...), small...) {
		n := b.C
		if i < len(big) {
			n = b.N * b.C * b.S
		}
		if s.buf.N < n || s.buf.Ptr == 0 {
			return nil, fmt.Errorf("cuda: %s: %s holds %d elements, the batch norm %+v needs %d", call, s.what, s.buf.N, b, n)
		}
	}
	return p, nil
}

// BNRunning are batch_norm's running statistics for BNForwardTraining to
// move by a micro-batch's: mean = (1 − Momentum)·mean + Momentum·batch
// mean, and the same of the variance with the batch's unbiased variance
// (PyTorch's rule). Zero buffers leave them alone (a recomputation).
type BNRunning struct {
	Mean, Var Buffer
	Momentum  float64
}

// BNForwardTraining normalises x [N, C, S] by its own channel statistics:
// y = (x − mean)·invStd·w + bias, invStd = 1/√(var + eps) with the biased
// variance; it writes the batch's mean and invStd into saveMean and
// saveInvStd [C] for BNBackward, and moves run's statistics unless they
// are zero buffers.
func (d *Device) BNForwardTraining(b BNShape, eps float64, x, w, bias, y, saveMean, saveInvStd Buffer, run BNRunning) error {
	small := []sized{{"w", w, 0}, {"bias", bias, 0}, {"saveMean", saveMean, 0}, {"saveInvStd", saveInvStd, 0}}
	if run.Mean.Ptr != 0 || run.Var.Ptr != 0 {
		small = append(small, sized{"running mean", run.Mean, 0}, sized{"running var", run.Var, 0})
	}
	p, err := d.bnCheck(b, "BNForwardTraining", []sized{{"x", x, 0}, {"y", y, 0}}, small)
	if err != nil {
		return err
	}
	one, zero := float32(1), float32(0)
	d.counts.DNN++
	return d.dnn.check("cudnnBatchNormalizationForwardTraining", d.dnn.lib.bnForwardTraining(d.dnn.h, dnnBNSpatial,
		unsafe.Pointer(&one), unsafe.Pointer(&zero), p.x, x.Ptr, p.x, y.Ptr, p.p, w.Ptr, bias.Ptr,
		run.Momentum, run.Mean.Ptr, run.Var.Ptr, eps, saveMean.Ptr, saveInvStd.Ptr))
}

// BNBackward adds batch_norm's gradients, from the forward's x, w and
// saved statistics, into gx [N, C, S], gw and gb [C]: gb += Σ gy, gw +=
// Σ gy·x̂, gx += w·invStd/m·(m·gy − Σ gy − x̂·Σ gy·x̂) with m = N·S and x̂ =
// (x − mean)·invStd; addX false writes gx instead (its old contents are
// not read). A zero gx, gw or gb is a gradient not wanted: cuDNN writes it
// to scratch then.
func (d *Device) BNBackward(b BNShape, eps float64, x, gy, w, saveMean, saveInvStd, gx, gw, gb Buffer, addX bool) error {
	p, err := d.bnCheck(b, "BNBackward", []sized{{"x", x, 0}, {"gy", gy, 0}},
		[]sized{{"w", w, 0}, {"saveMean", saveMean, 0}, {"saveInvStd", saveInvStd, 0}})
	if err != nil {
		return err
	}
	one, zero := float32(1), float32(0)
	var scratch []Buffer
	defer func() {
		for _, s := range scratch {
			_ = d.Free(s)
		}
	}()
	// stand gives a gradient not wanted a scratch buffer of n elements,
	// saying whether it did: zeroed, as cuDNN may add into it (beta 1)
	stand := func(buf *Buffer, n int) (bool, error) {
		if buf.Ptr != 0 {
			return false, nil
		}
		s, err := d.Zeros(n)
		if err != nil {
			return false, err
		}
		scratch = append(scratch, s)
		*buf = s
		return true, nil
	}
	betaX, betaP := &one, &one
	if !addX {
		betaX = &zero
	}
	noParams := gw.Ptr == 0 && gb.Ptr == 0
	for _, g := range []struct {
		buf  *Buffer
		n    int
		beta **float32
	}{{&gx, b.N * b.C * b.S, &betaX}, {&gw, b.C, &betaP}, {&gb, b.C, &betaP}} {
		stood, err := stand(g.buf, g.n)
		if err != nil {
			return err
		}
		if stood && (g.beta == &betaX || noParams) {
			*g.beta = &zero // all of it scratch: nothing to add to
		}
		// where one of gw and gb is wanted, the other's scratch is added
		// to, and dropped
	}
	if gx.N < b.N*b.C*b.S || gw.N < b.C || gb.N < b.C {
		return fmt.Errorf("cuda: BNBackward: a gradient buffer is smaller than the batch norm %+v", b)
	}
	d.counts.DNN++
	return d.dnn.check("cudnnBatchNormalizationBackward", d.dnn.lib.bnBackward(d.dnn.h, dnnBNSpatial,
		unsafe.Pointer(&one), unsafe.Pointer(betaX), unsafe.Pointer(&one), unsafe.Pointer(betaP),
		p.x, x.Ptr, p.x, gy.Ptr, p.x, gx.Ptr, p.p, w.Ptr, gw.Ptr, gb.Ptr, eps, saveMean.Ptr, saveInvStd.Ptr))
}
