package cuda

import (
	"fmt"
	"os"
	"unsafe"
)

// AlgoEnv says how a convolution's algorithms are chosen:
// GRAPHPIPE_CONV_ALGO=find (the default) runs cuDNN's measured search
// (cudnnFindConvolution*AlgorithmEx: every algorithm once on scratch
// buffers of the shape, fastest first) when a shape is first planned, as
// PyTorch does with torch.backends.cudnn.benchmark; =heuristics takes the
// first fit of cuDNN's _v7 heuristics alone, without running anything.
// Both keep to the precision's math and the workspace limit; the search
// costs a few milliseconds per shape, once per device.
const AlgoEnv = "GRAPHPIPE_CONV_ALGO"

// algoSearch reads AlgoEnv: whether the measured search runs, or an error
// naming a value it does not know.
func algoSearch() (bool, error) {
	switch v := os.Getenv(AlgoEnv); v {
	case "", "find":
		return true, nil
	case "heuristics":
		return false, nil
	default:
		return false, fmt.Errorf("cuda: %s=%q: want find or heuristics", AlgoEnv, v)
	}
}

// measure replaces p's heuristic choices by cuDNN's measured search's
// where it runs: on zeroed scratch buffers of p's shape (never the
// caller's: the search overwrites its outputs) with the limit's workspace,
// given straight back afterwards. Where the scratch cannot be had (the
// device's memory is taken), the search fails, or it offers nothing that
// fits, the heuristics' choice stays, and ok says so; only a failure to
// set that choice's math type back is an error.
func (d *Device) measure(p *convPlan) (ok bool, err error) {
	n := d.dnn
	nx, nw, ny := p.shape.Sizes()
	var bufs []Buffer
	defer func() {
		for _, b := range bufs {
			_ = d.Free(b)
		}
	}()
	var x, w, y Buffer
	for _, b := range []struct {
		buf  *Buffer
		size int
	}{{&x, nx}, {&w, nw}, {&y, ny}} {
		if *b.buf, err = d.Zeros(b.size); err != nil {
			return false, nil
		}
		bufs = append(bufs, *b.buf)
	}
	ws, err := d.mem.Get(n.limit)
	if err != nil {
		return false, nil
	}
	defer func() { _ = d.mem.Discard(ws) }()
	l := n.lib
	ok = true
	for dir, conv := range p.conv {
		if err := n.check("cudnnSetConvolutionMathType", l.setMathType(conv, baseMath(p.shape.TF32))); err != nil {
			return false, err
		}
		raw := make([]byte, maxAlgos*perfBytes)
		var got, st int32
		var call string
		switch dir {
		case dirForward:
			call, st = "cudnnFindConvolutionForwardAlgorithmEx", l.fwdFind(n.h, p.x, x.Ptr, p.w, w.Ptr, conv, p.y, y.Ptr, maxAlgos, &got, unsafe.Pointer(&raw[0]), ws, n.limit)
		case dirBackwardData:
			call, st = "cudnnFindConvolutionBackwardDataAlgorithmEx", l.bwdDataFind(n.h, p.w, w.Ptr, p.y, y.Ptr, conv, p.x, x.Ptr, maxAlgos, &got, unsafe.Pointer(&raw[0]), ws, n.limit)
		default:
			call, st = "cudnnFindConvolutionBackwardFilterAlgorithmEx", l.bwdFilterFind(n.h, p.x, x.Ptr, p.y, y.Ptr, conv, p.w, w.Ptr, maxAlgos, &got, unsafe.Pointer(&raw[0]), ws, n.limit)
		}
		// (not counted in Counts.DNN: planning, as the heuristics are, once
		// per shape); a search that fails leaves the heuristics' choice,
		// which cuDNN has already accepted
		keep := *p
		err := n.check(call, st)
		if err == nil {
			err = n.pick(p, dir, decodePerfs(raw, int(min(got, maxAlgos))), "measured search")
		}
		if err != nil {
			// the search failed, or nothing it measured fits: the
			// heuristics' choice, in its math
			p.algo[dir], p.math[dir], p.space[dir] = keep.algo[dir], keep.math[dir], keep.space[dir]
			if err := n.check("cudnnSetConvolutionMathType", l.setMathType(conv, p.math[dir])); err != nil {
				return false, err
			}
			ok = false
		}
	}
	return ok, nil
}

// ConvAlgorithmChoice says how the device's cuDNN picks convolution
// algorithms: "measured search" or "heuristics" (AlgoEnv), or what is
// wrong with AlgoEnv's value; "" without cuDNN.
func (d *Device) ConvAlgorithmChoice() string {
	switch {
	case !d.dnnReady():
		return ""
	case d.dnn.searchErr != nil:
		return d.dnn.searchErr.Error()
	case d.dnn.search:
		return "measured search"
	}
	return "heuristics"
}
