package kernel

import (
	"math"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/graphpipe/graphpipe/dag"
)

// window is a 2-D convolution's or pool's geometry, per sample: input
// [c, h, w], output [·, oh, ow], kernel, stride, padding (top, left) and
// dilation.
type window struct {
	c, h, w, oh, ow     int
	kh, kw, sh, sw      int
	pt, pl, dh, dw      int
	padBottom, padRight int
}

func newWindow(in, out dag.Shape, a dag.Attrs, dil dag.Shape) window {
	return window{c: int(in[0]), h: int(in[1]), w: int(in[2]), oh: int(out[1]), ow: int(out[2]),
		kh: int(a.Kernel[0]), kw: int(a.Kernel[1]), sh: int(a.Stride[0]), sw: int(a.Stride[1]),
		pt: int(a.Padding[0]), pl: int(a.Padding[1]), padBottom: int(a.Padding[2]), padRight: int(a.Padding[3]),
		dh: int(dil[0]), dw: int(dil[1])}
}

// conv2d: x [n, c, h, w] → y [n, out, oh, ow], per group g of c/groups
// input and out/groups output channels: y_g = W_g · col_g + b, col_g
// [c/groups·kh·kw, oh·ow] the im2col of the group's input. W [out,
// c/groups, kh, kw], b [out].
type conv2d[T Num] struct {
	window
	groups, out int
	bias        bool
}

func conv2DKernel[T Num](o *opArgs) *conv2d[T] {
	a := &o.op.Attrs
	w := newWindow(o.in[0].Shape, o.out.Shape, *a, a.Dilation)
	return &conv2d[T]{window: w, groups: int(a.Groups), out: int(a.Out), bias: a.Bias}
}

func (k *conv2d[T]) dims() (cg, og, ckk, hw int) {
	cg, og = k.c/k.groups, k.out/k.groups
	return cg, og, cg * k.kh * k.kw, k.oh * k.ow
}

// im2col fills col [cg·kh·kw, oh·ow] from x [cg, h, w] (zeros in the padding).
func (k *conv2d[T]) im2col(x, col []T, cg int) {
	hw := k.oh * k.ow
	for c := 0; c < cg; c++ {
		for i := 0; i < k.kh; i++ {
			for j := 0; j < k.kw; j++ {
				row := col[((c*k.kh+i)*k.kw+j)*hw:]
				for oy := 0; oy < k.oh; oy++ {
					iy := oy*k.sh - k.pt + i*k.dh
					dst := row[oy*k.ow : (oy+1)*k.ow]
					if iy < 0 || iy >= k.h {
						clear(dst)
						continue
					}
					src := x[(c*k.h+iy)*k.w:]
					for ox := range dst {
						ix := ox*k.sw - k.pl + j*k.dw
						if ix < 0 || ix >= k.w {
							dst[ox] = 0
						} else {
							dst[ox] = src[ix]
						}
					}
				}
			}
		}
	}
}

// col2im adds col [cg·kh·kw, oh·ow] back into gx [cg, h, w].
func (k *conv2d[T]) col2im(col, gx []T, cg int) {
	hw := k.oh * k.ow
	for c := 0; c < cg; c++ {
		for i := 0; i < k.kh; i++ {
			for j := 0; j < k.kw; j++ {
				row := col[((c*k.kh+i)*k.kw+j)*hw:]
				for oy := 0; oy < k.oh; oy++ {
					iy := oy*k.sh - k.pt + i*k.dh
					if iy < 0 || iy >= k.h {
						continue
					}
					dst := gx[(c*k.h+iy)*k.w:]
					for ox := 0; ox < k.ow; ox++ {
						if ix := ox*k.sw - k.pl + j*k.dw; ix >= 0 && ix < k.w {
							dst[ix] += row[oy*k.ow+ox]
						}
					}
				}
			}
		}
	}
}

// pointwise1x1 reports whether im2col is the identity (a 1×1 kernel,
// stride 1, no padding): the input is its own col.
func (k *conv2d[T]) pointwise1x1() bool {
	return k.kh == 1 && k.kw == 1 && k.sh == 1 && k.sw == 1 && k.pt == 0 && k.pl == 0 && k.padBottom == 0 && k.padRight == 0
}

// parallel runs f(s) for s in [0, n) over the cores, each worker with its
// own scratch of size scratch.
func parallel[T Num](n, scratch int, f func(s int, buf []T)) {
	workers := min(runtime.GOMAXPROCS(0), n)
	var wg sync.WaitGroup
	var next atomic.Int64
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]T, scratch)
			for s := int(next.Add(1)) - 1; s < n; s = int(next.Add(1)) - 1 {
				f(s, buf)
			}
		}()
	}
	wg.Wait()
}

func (k *conv2d[T]) Forward(x, p []*Value[T]) (*Value[T], any, error) {
	n := x[0].Shape[0]
	cg, og, ckk, hw := k.dims()
	y := NewValue[T](n, k.out, k.oh, k.ow)
	in, per := k.c*k.h*k.w, k.out*hw
	w := p[0].Data
	parallel[T](n, ckk*hw, func(s int, col []T) {
		for g := 0; g < k.groups; g++ {
			xs := x[0].Data[s*in+g*cg*k.h*k.w:]
			c := col
			if k.pointwise1x1() {
				c = xs[:ckk*hw]
			} else {
				k.im2col(xs, col, cg)
			}
			dst := y.Data[s*per+g*og*hw : s*per+(g+1)*og*hw]
			gemm(false, false, og, hw, ckk, w[g*og*ckk:], ckk, c, hw, 0, dst, hw) // y_g[og,hw] = W_g[og,ckk]·col[ckk,hw]
		}
		if k.bias {
			for o := 0; o < k.out; o++ {
				row := y.Data[s*per+o*hw : s*per+(o+1)*hw]
				for i := range row {
					row[i] += p[1].Data[o]
				}
			}
		}
	})
	return y, nil, nil
}

func (k *conv2d[T]) Backward(gy *Value[T], x, p []*Value[T], _ *Value[T], _ any, gx, gp []*Value[T]) {
	n := gy.Shape[0]
	cg, og, ckk, hw := k.dims()
	in, per := k.c*k.h*k.w, k.out*hw
	w := p[0].Data
	if gx[0] != nil {
		parallel[T](n, ckk*hw, func(s int, col []T) {
			for g := 0; g < k.groups; g++ {
				gys := gy.Data[s*per+g*og*hw:]
				gxs := gx[0].Data[s*in+g*cg*k.h*k.w : s*in+(g+1)*cg*k.h*k.w]
				if k.pointwise1x1() { // gx_g[ckk,hw] += W_gᵀ[ckk,og]·gy_g[og,hw]
					gemm(true, false, ckk, hw, og, w[g*og*ckk:], ckk, gys, hw, 1, gxs, hw)
					continue
				}
				gemm(true, false, ckk, hw, og, w[g*og*ckk:], ckk, gys, hw, 0, col, hw) // gcol = W_gᵀ·gy_g
				k.col2im(col, gxs, cg)
			}
		})
	}
	if gp == nil {
		return
	}
	if gp[0] != nil {
		k.weightGrad(gy, x[0], gp[0].Data, n)
	}
	if k.bias && gp[1] != nil {
		for s := 0; s < n; s++ {
			for o := 0; o < k.out; o++ {
				var sum T
				for _, v := range gy.Data[s*per+o*hw : s*per+(o+1)*hw] {
					sum += v
				}
				gp[1].Data[o] += sum
			}
		}
	}
}

// weightGrad adds gW_g[og,ckk] += gy_g[og,hw]·col_gᵀ[hw,ckk], sample after
// sample in order (the product itself runs over the cores), straight into
// the gradient: the same numbers every run, and no copy of it per worker.
func (k *conv2d[T]) weightGrad(gy, x *Value[T], gw []T, n int) {
	cg, og, ckk, hw := k.dims()
	in, per := k.c*k.h*k.w, k.out*hw
	var col []T
	if !k.pointwise1x1() {
		col = make([]T, ckk*hw)
	}
	for s := 0; s < n; s++ {
		for g := 0; g < k.groups; g++ {
			xs := x.Data[s*in+g*cg*k.h*k.w:]
			c := col
			if k.pointwise1x1() {
				c = xs[:ckk*hw]
			} else {
				k.im2col(xs, col, cg)
			}
			gemm(false, true, og, ckk, hw, gy.Data[s*per+g*og*hw:], hw, c, hw, 1, gw[g*og*ckk:], ckk)
		}
	}
}

// maxPool: the largest value of each window (padding never wins); the
// stash is each output's input position, where backward sends its gradient.
type maxPool[T Num] struct{ window }

func maxPoolKernel[T Num](o *opArgs) *maxPool[T] {
	return &maxPool[T]{window: newWindow(o.in[0].Shape, o.out.Shape, o.op.Attrs, o.op.Attrs.Dilation)}
}

func (k *maxPool[T]) Forward(x, _ []*Value[T]) (*Value[T], any, error) {
	n := x[0].Shape[0]
	y := NewValue[T](n, k.c, k.oh, k.ow)
	arg := make([]int32, len(y.Data))
	for nc := 0; nc < n*k.c; nc++ {
		src := x[0].Data[nc*k.h*k.w:]
		for oy := 0; oy < k.oh; oy++ {
			for ox := 0; ox < k.ow; ox++ {
				best, at := T(math.Inf(-1)), int32(-1)
				for i := 0; i < k.kh; i++ {
					iy := oy*k.sh - k.pt + i*k.dh
					if iy < 0 || iy >= k.h {
						continue
					}
					for j := 0; j < k.kw; j++ {
						ix := ox*k.sw - k.pl + j*k.dw
						if ix < 0 || ix >= k.w {
							continue
						}
						if v := src[iy*k.w+ix]; v > best || at < 0 || v != v {
							best, at = v, int32(iy*k.w+ix)
							if v != v { // NaN wins, as in PyTorch
								break
							}
						}
					}
				}
				o := (nc*k.oh+oy)*k.ow + ox
				y.Data[o], arg[o] = best, at
			}
		}
	}
	return y, arg, nil
}

func (k *maxPool[T]) Backward(gy *Value[T], _, _ []*Value[T], _ *Value[T], st any, gx, _ []*Value[T]) {
	if gx[0] == nil {
		return
	}
	arg := st.([]int32)
	per := k.oh * k.ow
	for o, g := range gy.Data {
		if a := arg[o]; a >= 0 {
			gx[0].Data[(o/per)*k.h*k.w+int(a)] += g
		}
	}
}

// avgPool: the mean of each window; its divisor is the window clipped to
// the padded input (includePad) or to the input, as PyTorch's AvgPool2d.
type avgPool[T Num] struct {
	window
	includePad bool
}

func avgPoolKernel[T Num](o *opArgs) *avgPool[T] {
	w := newWindow(o.in[0].Shape, o.out.Shape, o.op.Attrs, dag.Shape{1, 1})
	return &avgPool[T]{window: w, includePad: o.op.Attrs.CountIncludePad}
}

// span is window (oy, ox)'s rows and columns inside the input, and its divisor.
func (k *avgPool[T]) span(oy, ox int) (y0, y1, x0, x1 int, div float64) {
	y0, x0 = oy*k.sh-k.pt, ox*k.sw-k.pl
	y1, x1 = min(y0+k.kh, k.h+k.padBottom), min(x0+k.kw, k.w+k.padRight)
	div = float64((y1 - y0) * (x1 - x0))
	y0, x0, y1, x1 = max(y0, 0), max(x0, 0), min(y1, k.h), min(x1, k.w)
	if !k.includePad {
		div = float64((y1 - y0) * (x1 - x0))
	}
	return
}

func (k *avgPool[T]) Forward(x, _ []*Value[T]) (*Value[T], any, error) {
	n := x[0].Shape[0]
	y := NewValue[T](n, k.c, k.oh, k.ow)
	for nc := 0; nc < n*k.c; nc++ {
		src := x[0].Data[nc*k.h*k.w:]
		for oy := 0; oy < k.oh; oy++ {
			for ox := 0; ox < k.ow; ox++ {
				y0, y1, x0, x1, div := k.span(oy, ox)
				var sum float64
				for iy := y0; iy < y1; iy++ {
					for ix := x0; ix < x1; ix++ {
						sum += float64(src[iy*k.w+ix])
					}
				}
				y.Data[(nc*k.oh+oy)*k.ow+ox] = T(sum / div)
			}
		}
	}
	return y, nil, nil
}

func (k *avgPool[T]) Backward(gy *Value[T], _, _ []*Value[T], _ *Value[T], _ any, gx, _ []*Value[T]) {
	if gx[0] == nil {
		return
	}
	for nc := 0; nc < gy.Shape[0]*k.c; nc++ {
		dst := gx[0].Data[nc*k.h*k.w:]
		for oy := 0; oy < k.oh; oy++ {
			for ox := 0; ox < k.ow; ox++ {
				y0, y1, x0, x1, div := k.span(oy, ox)
				g := gy.Data[(nc*k.oh+oy)*k.ow+ox] / T(div)
				for iy := y0; iy < y1; iy++ {
					for ix := x0; ix < x1; ix++ {
						dst[iy*k.w+ix] += g
					}
				}
			}
		}
	}
}

// globalAvgPool: [n, c, spatial...] → [n, c, 1, ...], the mean over the
// spatial axes.
type globalAvgPool[T Num] struct{}

func globalAvgPoolKernel[T Num](*opArgs) *globalAvgPool[T] { return &globalAvgPool[T]{} }

func (globalAvgPool[T]) Forward(x, _ []*Value[T]) (*Value[T], any, error) {
	n, c, s := bnGeometry(x[0].Shape)
	shape := append([]int(nil), x[0].Shape...)
	for i := 2; i < len(shape); i++ {
		shape[i] = 1
	}
	y := NewValue[T](shape...)
	for nc := 0; nc < n*c; nc++ {
		var sum float64
		for _, v := range x[0].Data[nc*s : (nc+1)*s] {
			sum += float64(v)
		}
		y.Data[nc] = T(sum / float64(s))
	}
	return y, nil, nil
}

func (globalAvgPool[T]) Backward(gy *Value[T], x, _ []*Value[T], _ *Value[T], _ any, gx, _ []*Value[T]) {
	if gx[0] == nil {
		return
	}
	n, c, s := bnGeometry(x[0].Shape)
	for nc := 0; nc < n*c; nc++ {
		g := gy.Data[nc] / T(s)
		for j := range gx[0].Data[nc*s : (nc+1)*s] {
			gx[0].Data[nc*s+j] += g
		}
	}
}
