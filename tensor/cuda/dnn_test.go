package cuda

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
)

// TestDNNSearchDirs: the wheel directories are found under $PYTHONPATH,
// $VIRTUAL_ENV, $CONDA_PREFIX, ~/.local, the system's python3*
// package directories and /opt's virtual environments, by globbing; only those that exist become
// candidates, after the sonames and the toolkit's directories.
func TestDNNSearchDirs(t *testing.T) {
	root := t.TempDir()
	mk := func(parts ...string) string {
		d := filepath.Join(append([]string{root}, parts...)...)
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		return d
	}
	sys := mk("usr", "local", "lib", "python3.12", "dist-packages", "nvidia", "cudnn", "lib")
	sys2 := mk("usr", "lib", "python3", "dist-packages", "nvidia", "cudnn", "lib")
	user := mk("home", "u", ".local", "lib", "python3.11", "site-packages", "nvidia", "cudnn", "lib")
	venv := mk("venv", "lib", "python3.10", "site-packages", "nvidia", "cudnn", "lib")
	conda := mk("conda", "lib")
	pp := mk("pp", "nvidia", "cudnn", "lib")
	opt := mk("opt", "torch", ".venv", "lib", "python3.12", "site-packages", "nvidia", "cudnn", "lib")
	mk("usr", "local", "lib", "python3.12", "site-packages") // no nvidia/cudnn in it

	dirs := dnnDirsFrom(filepath.Join(root, "pp")+string(filepath.ListSeparator)+filepath.Join(root, "missing"),
		filepath.Join(root, "venv"), filepath.Join(root, "conda"), filepath.Join(root, "home", "u"), root)
	for _, want := range []string{sys, sys2, user, venv, conda, pp, opt} {
		if !slices.Contains(dirs, want) {
			t.Errorf("%s not searched; searched %v", want, dirs)
		}
	}
	if i, j := slices.Index(dirs, pp), slices.Index(dirs, sys); i > j {
		t.Errorf("$PYTHONPATH's %s searched after the system's %s", pp, sys)
	}

	t.Setenv("GRAPHPIPE_LIBCUDNN", "")
	t.Setenv("CUDA_HOME", "")
	t.Setenv("CUDA_PATH", "")
	l := libCUDNN
	l.more = func() []string { return dirs }
	got := l.candidates()
	if got[0] != "libcudnn.so.9" || got[1] != "libcudnn.so.8" {
		t.Errorf("candidates start %v, want the sonames, newest first", got[:2])
	}
	if !slices.Contains(got, filepath.Join(sys, "libcudnn.so.9")) || !slices.Contains(got, filepath.Join(pp, "libcudnn.so.8")) {
		t.Errorf("the wheel directories' files are not candidates: %v", got)
	}
	for _, c := range got {
		if strings.Contains(c, filepath.Join(root, "missing")) || strings.HasPrefix(c, filepath.Join(root, "usr", "local", "lib", "python3.12", "site-packages")) {
			t.Errorf("%s is a candidate though its directory does not exist", c)
		}
	}
	if i, j := slices.Index(got, "/usr/local/cuda/lib64/libcudnn.so.9"), slices.Index(got, filepath.Join(sys, "libcudnn.so.9")); i < 0 || i > j {
		t.Errorf("the toolkit's directory is not searched before the wheels': %v", got)
	}

	t.Setenv("GRAPHPIPE_LIBCUDNN", "/somewhere/libcudnn.so.9")
	if got := libCUDNN.candidates(); len(got) != 1 || got[0] != "/somewhere/libcudnn.so.9" {
		t.Errorf("with GRAPHPIPE_LIBCUDNN set, candidates %v", got)
	}
}

// TestDNNSubLibraries: beside a dispatcher found in a directory, cuDNN 9's
// sub-libraries of its major version, libcudnn_graph first.
func TestDNNSubLibraries(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"libcudnn.so.9", "libcudnn_ops.so.9", "libcudnn_cnn.so.9", "libcudnn_graph.so.9", "libcudnn_ops.so.8", "libcudnn_adv.so.9.1.0"} {
		if err := os.WriteFile(filepath.Join(dir, f), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want := []string{"libcudnn_graph.so.9", "libcudnn_cnn.so.9", "libcudnn_ops.so.9"}
	for _, main := range []string{"libcudnn.so.9", "libcudnn.so.9.1.0"} {
		var got []string
		for _, p := range dnnSubLibraries(filepath.Join(dir, main)) {
			got = append(got, filepath.Base(p))
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s: sub-libraries %v, want %v", main, got, want)
		}
	}
	if got := dnnSubLibraries(filepath.Join(dir, "libcudnn.so")); got != nil {
		t.Errorf("an unversioned dispatcher has sub-libraries %v", got)
	}
}

// TestDNNAbsent: without a libcudnn, loading it is a *LoadError naming the
// library and the files tried; the fallback's notice is said once however
// often it is asked; a device without cuDNN runs convolutions as im2col.
func TestDNNAbsent(t *testing.T) {
	t.Setenv("GRAPHPIPE_LIBCUDNN", "/nonexistent/libcudnn.so.9")
	_, err := openDNN(libCUDNN)
	var le *LoadError
	if !errors.As(err, &le) || le.Lib != "libcudnn" || !strings.Contains(err.Error(), "/nonexistent/libcudnn.so.9") || !strings.Contains(err.Error(), "cuDNN") {
		t.Fatalf("got %v, want a *LoadError for libcudnn naming the file tried", err)
	}
	var n notice
	var out bytes.Buffer
	for range 3 {
		n.say(&out, "graphpipe: %v: conv2d runs as im2col + GEMM\n", err)
	}
	if got := strings.Count(out.String(), "\n"); got != 1 || !strings.Contains(out.String(), "im2col") {
		t.Errorf("the notice, asked 3 times, said %q", out.String())
	}
	d := emulator(t)
	if d.ConvPath() != "im2col" {
		t.Errorf("the emulator's convolutions: %q, want im2col", d.ConvPath())
	}
	if err := d.ConvReady(resnet3x3(2, false)); !errors.Is(err, ErrNoDNN) {
		t.Errorf("ConvReady without cuDNN: %v, want ErrNoDNN", err)
	}
}

// TestDNNMissingSymbol: a library that loads but lacks a cuDNN call is a
// *LoadError naming the symbol and the file.
func TestDNNMissingSymbol(t *testing.T) {
	cxx := os.Getenv("CXX")
	if cxx == "" {
		cxx = "g++"
	}
	if _, err := exec.LookPath(cxx); err != nil {
		t.Skipf("no C++ compiler to build a fake library: %v", err)
	}
	dir := t.TempDir()
	src, lib := filepath.Join(dir, "partial.cc"), filepath.Join(dir, "libcudnn.so.9")
	code := `#include <stddef.h>
extern "C" size_t cudnnGetVersion(void) { return 90800; }
extern "C" const char* cudnnGetErrorString(int) { return "?"; }
`
	if err := os.WriteFile(src, []byte(code), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(cxx, "-shared", "-fPIC", "-o", lib, src).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", cxx, err, out)
	}
	t.Setenv("GRAPHPIPE_LIBCUDNN", lib)
	_, err := openDNN(libCUDNN)
	var le *LoadError
	if !errors.As(err, &le) || le.Lib != "libcudnn" || !strings.Contains(err.Error(), "cudnnCreate") || !strings.Contains(err.Error(), lib) {
		t.Fatalf("got %v, want a *LoadError naming cudnnCreate and %s", err, lib)
	}
}

// TestDNNVersion: cudnnGetVersion's numbers, cuDNN 9's and 8's.
func TestDNNVersion(t *testing.T) {
	for v, want := range map[int]string{90102: "9.1.2", 91001: "9.10.1", 90800: "9.8.0", 8907: "8.9.7", 8100: "8.1.0"} {
		if got := dnnVersion(v); got != want {
			t.Errorf("dnnVersion(%d) = %s, want %s", v, got, want)
		}
	}
}

// TestDecodePerfs: the heuristics' structs read at the C layout's offsets
// (algo, status, time, memory at 16, determinism, mathType at 28; 48
// bytes each).
func TestDecodePerfs(t *testing.T) {
	raw := make([]byte, 3*perfBytes)
	put := func(i int, algo, status int32, memory uint64, math int32) {
		e := raw[i*perfBytes:]
		binary.LittleEndian.PutUint32(e[0:], uint32(algo))
		binary.LittleEndian.PutUint32(e[4:], uint32(status))
		binary.LittleEndian.PutUint32(e[8:], 0x3f800000) // time 1.0
		binary.LittleEndian.PutUint64(e[16:], memory)
		binary.LittleEndian.PutUint32(e[24:], 1) // deterministic
		binary.LittleEndian.PutUint32(e[28:], uint32(math))
		binary.LittleEndian.PutUint32(e[32:], 0xdeadbeef) // reserved
	}
	put(0, 6, 0, 1<<33, mathFMA)
	put(1, 1, 9, 0, mathDefault)
	put(2, 7, 0, 4096, mathTensorOp)
	got := decodePerfs(raw, 3)
	want := []dnnPerf{{6, 0, 1 << 33, mathFMA}, {1, 9, 0, mathDefault}, {7, 0, 4096, mathTensorOp}}
	if !slices.Equal(got, want) {
		t.Errorf("decoded %+v, want %+v", got, want)
	}
	if got := decodePerfs(raw, 5); len(got) != 3 {
		t.Errorf("5 asked of 3 structs' bytes: %d decoded", len(got))
	}
}

// TestAlgorithmCandidates: FP32 takes FMA math alone, TF32 anything but a
// conversion to FP16; failed entries and those over the workspace limit
// are passed over; the heuristics' order is kept.
func TestAlgorithmCandidates(t *testing.T) {
	perfs := []dnnPerf{
		{algo: 0, status: 9, math: mathFMA},
		{algo: 1, memory: 1 << 40, math: mathFMA},
		{algo: 2, math: mathTensorOp},
		{algo: 3, math: mathAllowConversion},
		{algo: 4, math: mathDefault},
		{algo: 5, memory: 100, math: mathFMA},
		{algo: 6, math: mathFMA},
	}
	algos := func(ps []dnnPerf) []int32 {
		var out []int32
		for _, p := range ps {
			out = append(out, p.algo)
		}
		return out
	}
	if got := algos(candidates(perfs, false, 1<<30)); !slices.Equal(got, []int32{5, 6}) {
		t.Errorf("fp32 candidates %v, want [5 6]", got)
	}
	if got := algos(candidates(perfs, true, 1<<30)); !slices.Equal(got, []int32{2, 4, 5, 6}) {
		t.Errorf("tf32 candidates %v, want [2 4 5 6]", got)
	}
	if got := algos(candidates(perfs, false, 50)); !slices.Equal(got, []int32{6}) {
		t.Errorf("fp32 candidates within 50 bytes %v, want [6]", got)
	}
	if baseMath(false) != mathFMA || baseMath(true) != mathDefault {
		t.Error("fp32 must start in FMA math (no TF32), tf32 in the default math (PyTorch's allow_tf32)")
	}
	if workspaceLimit(0) != 256<<20 || workspaceLimit(48<<30) != 3<<29 || workspaceLimit(141<<30) != 2<<30 {
		t.Errorf("workspace limits %d, %d", workspaceLimit(0), workspaceLimit(141<<30))
	}
}

// TestConvShape: the output's size, the element counts, and the shapes
// refused before cuDNN is asked.
func TestConvShape(t *testing.T) {
	c := ConvShape{N: 2, C: 6, H: 7, W: 9, K: 4, KH: 3, KW: 2, PadH: 1, PadW: 2, StrideH: 2, StrideW: 3, DilationH: 2, DilationW: 1, Groups: 2}
	if oh, ow := c.Out(); oh != 3 || ow != 4 { // (7+2−4−1)/2+1, (9+4−1−1)/3+1
		t.Errorf("Out %d×%d, want 3×4", oh, ow)
	}
	if x, w, y := c.Sizes(); x != 2*6*7*9 || w != 4*3*3*2 || y != 2*4*3*4 {
		t.Errorf("Sizes %d, %d, %d", x, w, y)
	}
	if err := c.check(); err != nil {
		t.Error(err)
	}
	for name, bad := range map[string]func(*ConvShape){
		"groups not dividing C": func(c *ConvShape) { c.Groups = 4 },
		"zero stride":           func(c *ConvShape) { c.StrideH = 0 },
		"negative padding":      func(c *ConvShape) { c.PadW = -1 },
		"window too large":      func(c *ConvShape) { c.KH, c.PadH = 9, 0 },
		"2³¹ elements":          func(c *ConvShape) { c.N = 1 << 26 },
	} {
		b := c
		bad(&b)
		if b.check() == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// resnet3x3 is a ResNet-style 3×3 convolution at batch n, made small.
func resnet3x3(n int, tf32 bool) ConvShape {
	return ConvShape{N: n, C: 4, H: 6, W: 5, K: 6, KH: 3, KW: 3, PadH: 1, PadW: 1, StrideH: 1, StrideW: 1, DilationH: 1, DilationW: 1, Groups: 1, TF32: tf32}
}

// convShapes are the convolutions the cuDNN tests run: strides, padding,
// dilation, groups, depthwise, 1×1, a 7×7 stem.
func convShapes(tf32 bool) []ConvShape {
	s := func(n, c, h, w, k, kh, kw, ph, pw, sh, sw, dh, dw, g int) ConvShape {
		return ConvShape{N: n, C: c, H: h, W: w, K: k, KH: kh, KW: kw, PadH: ph, PadW: pw, StrideH: sh, StrideW: sw, DilationH: dh, DilationW: dw, Groups: g, TF32: tf32}
	}
	return []ConvShape{
		resnet3x3(3, tf32),
		s(2, 5, 9, 8, 3, 3, 2, 1, 0, 2, 1, 1, 1, 1),   // strides and padding, a rectangular window
		s(2, 3, 9, 9, 4, 2, 3, 0, 1, 1, 1, 2, 3, 1),   // dilation
		s(2, 6, 6, 6, 4, 3, 3, 1, 1, 1, 1, 1, 1, 2),   // groups
		s(3, 5, 7, 7, 5, 3, 3, 1, 1, 2, 2, 1, 1, 5),   // depthwise, stride 2
		s(2, 8, 5, 5, 16, 1, 1, 0, 0, 1, 1, 1, 1, 1),  // 1×1
		s(2, 8, 6, 6, 12, 1, 1, 0, 0, 2, 2, 1, 1, 1),  // 1×1 stride 2 (ResNet's downsample)
		s(1, 3, 16, 16, 4, 7, 7, 3, 3, 2, 2, 1, 1, 1), // 7×7 stem
	}
}

// naiveConv computes c's forward, input gradient and weight gradient on
// the host, in float64, on operands rounded by rd.
func naiveConv(c ConvShape, x, w, gy []float32, rd func([]float32) []float32) (y, gx, gw []float32) {
	nx, nw, ny := c.Sizes()
	oh, ow := c.Out()
	x, w, gy = rd(x), rd(w), rd(gy)
	y, gx, gw = make([]float32, ny), make([]float32, nx), make([]float32, nw)
	sy, sgx, sgw := make([]float64, ny), make([]float64, nx), make([]float64, nw)
	cg, kg := c.C/c.Groups, c.K/c.Groups
	for n := 0; n < c.N; n++ {
		for k := 0; k < c.K; k++ {
			g := k / kg
			for oy := 0; oy < oh; oy++ {
				for ox := 0; ox < ow; ox++ {
					yi := ((n*c.K+k)*oh+oy)*ow + ox
					for ci := 0; ci < cg; ci++ {
						for i := 0; i < c.KH; i++ {
							for j := 0; j < c.KW; j++ {
								iy, ix := oy*c.StrideH-c.PadH+i*c.DilationH, ox*c.StrideW-c.PadW+j*c.DilationW
								if iy < 0 || iy >= c.H || ix < 0 || ix >= c.W {
									continue
								}
								xi := ((n*c.C+g*cg+ci)*c.H+iy)*c.W + ix
								wi := ((k*cg+ci)*c.KH+i)*c.KW + j
								sy[yi] += float64(x[xi]) * float64(w[wi])
								sgx[xi] += float64(gy[yi]) * float64(w[wi])
								sgw[wi] += float64(gy[yi]) * float64(x[xi])
							}
						}
					}
				}
			}
		}
	}
	for i := range y {
		y[i] = float32(sy[i])
	}
	for i := range gx {
		gx[i] = float32(sgx[i])
	}
	for i := range gw {
		gw[i] = float32(sgw[i])
	}
	return y, gx, gw
}

// checkConvs runs every convShapes convolution through cuDNN on d in FP32
// and TF32 against naiveConv: forward; the input, weight and bias
// gradients added into buffers that start at 0.25; the bias added. FP32
// is compared with FP32 math within fp32Tol. TF32 on the emulator (whose
// fake cuDNN always rounds) is compared with FP32 math on TF32-rounded
// operands within tf32Tol(d), and must differ from FP32 math on the
// operands themselves somewhere. On a GPU, TF32 is allowed, not forced
// (as PyTorch's allow_tf32: cuDNN picks the algorithm, and for small
// convolutions often computes in FP32), so each value must lie within
// TF32's rounding of the exact result: 2^-9 of the sum of its products'
// magnitudes (each operand rounded to 10 mantissa bits, 2^-11, with
// room), plus fp32Tol. Every call is counted as a cuDNN call, and the
// plans' algorithms run in the precision's math.
func checkConvs(t *testing.T, d *Device, fp32Tol float64) {
	r := newRand()
	var worst [2]float64
	for _, tf32 := range []bool{false, true} {
		for _, c := range convShapes(tf32) {
			nx, nw, ny := c.Sizes()
			x, w, gy, b := randSlice(r, nx), randSlice(r, nw), randSlice(r, ny), randSlice(r, c.K)
			rd, tol := func(v []float32) []float32 { return v }, fp32Tol
			if tf32 {
				rd, tol = roundTF32, tf32Tol(d)
			}
			wy, wgx, wgw := naiveConv(c, x, w, gy, rd)
			ey, _, _ := naiveConv(c, x, w, gy, func(v []float32) []float32 { return v })
			wb := make([]float32, c.K)
			oh, ow := c.Out()
			for i := range wy {
				wy[i] += b[(i/(oh*ow))%c.K]
				ey[i] += b[(i/(oh*ow))%c.K]
				wb[i/(oh*ow)%c.K] += gy[i]
			}
			before := d.Counts()
			if err := d.ConvReady(c); err != nil {
				t.Fatalf("%+v: %v (%v)", c, err, d.ConvPathReason())
			}
			quarter := func(n int) Buffer {
				v := make([]float32, n)
				for i := range v {
					v[i] = 0.25
				}
				return put(t, d, v)
			}
			xb, wbuf, gyb, bb := put(t, d, x), put(t, d, w), put(t, d, gy), put(t, d, b)
			yb, gxb, gwb, gbb := put(t, d, make([]float32, ny)), quarter(nx), quarter(nw), quarter(c.K)
			for _, err := range []error{
				d.ConvForward(c, xb, wbuf, yb), d.ConvAddBias(c, bb, yb),
				d.ConvBackwardData(c, wbuf, gyb, gxb, true), d.ConvBackwardFilter(c, xb, gyb, gwb), d.ConvBackwardBias(c, gyb, gbb),
			} {
				if err != nil {
					t.Fatalf("%+v: %v", c, err)
				}
			}
			if got := d.Counts().Sub(before).DNN; got != 5 {
				t.Errorf("%+v: %d cuDNN calls counted, want 5", c, got)
			}
			plus := func(v []float32) []float32 {
				out := make([]float32, len(v))
				for i := range v {
					out[i] = v[i] + 0.25
				}
				return out
			}
			gotY, gotGX, gotGW := download(t, d, yb, ny), download(t, d, gxb, nx), download(t, d, gwb, nw)
			for _, o := range []struct {
				what      string
				got, want []float32
			}{
				{"y", gotY, wy}, {"gx", gotGX, plus(wgx)}, {"gw", gotGW, plus(wgw)}, {"gb", download(t, d, gbb, c.K), plus(wb)},
			} {
				if tf32 && !d.Emulated && o.what != "gb" {
					continue // checked against TF32's bound below
				}
				e := maxRel(o.got, o.want, 1)
				if e > tol {
					t.Errorf("tf32 %v, %+v: %s differs by %.3g (relative to 1 + |want|)", tf32, c, o.what, e)
				}
				worst[b2i(tf32)] = max(worst[b2i(tf32)], e)
			}
			if tf32 && !d.Emulated {
				_, egx, egw := naiveConv(c, x, w, gy, func(v []float32) []float32 { return v })
				ay, agx, agw := naiveConv(c, absOf(x), absOf(w), absOf(gy), func(v []float32) []float32 { return v })
				for _, o := range []struct {
					what             string
					got, exact, mags []float32
				}{{"y", gotY, ey, ay}, {"gx", gotGX, plus(egx), agx}, {"gw", gotGW, plus(egw), agw}} {
					for i := range o.exact {
						diff := math.Abs(float64(o.got[i]) - float64(o.exact[i]))
						bound := 0x1p-9*float64(o.mags[i]) + fp32Tol*(1+math.Abs(float64(o.exact[i])))
						if !(diff <= bound) {
							t.Errorf("tf32, %+v: %s[%d] = %g, exact %g: off by %.3g, over TF32's bound %.3g", c, o.what, i, o.got[i], o.exact[i], diff, bound)
							break
						}
					}
					worst[1] = max(worst[1], maxRel(o.got, o.exact, 1))
				}
			}
			if tf32 && d.Emulated && c.C/c.Groups*c.KH*c.KW > 1 {
				if e := maxRel(download(t, d, yb, ny), ey, 1); e < 2e-5 {
					t.Errorf("%+v: tf32's y is within %.3g of FP32 math on unrounded operands: were they rounded?", c, e)
				}
			}
			algo, mt, ok := d.ConvAlgorithms(c)
			if !ok {
				t.Fatalf("%+v: no plan after ConvReady", c)
			}
			for dir := range mt {
				if !mathAllowed(int32(mt[dir]), tf32) {
					t.Errorf("%+v: the %s algorithm %d runs in math type %d", c, dirNames[dir], algo[dir], mt[dir])
				}
			}
		}
	}
	t.Logf("largest relative differences: fp32 %.3g, tf32 %.3g (%s)", worst[0], worst[1], d.ConvPath())
}

// absOf is |v|.
func absOf(v []float32) []float32 {
	out := make([]float32, len(v))
	for i, x := range v {
		out[i] = float32(math.Abs(float64(x)))
	}
	return out
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

var (
	fakeOnce sync.Once
	fakeLib  string
	fakeErr  error
)

// fakeDNN is the emulator with the fake cuDNN (BuildFakeDNN), built once
// per test binary; it skips where there is no compiler.
func fakeDNN(t *testing.T) *Device {
	d := emulator(t)
	fakeOnce.Do(func() {
		dir, err := osMkdirTemp()
		if err != nil {
			fakeErr = err
			return
		}
		fakeLib, fakeErr = BuildFakeDNN(dir)
	})
	if errors.Is(fakeErr, ErrNoCompiler) {
		t.Skipf("the fake cuDNN needs a C++ compiler: %v", fakeErr)
	}
	if fakeErr != nil {
		t.Fatal(fakeErr)
	}
	if err := d.UseDNN(fakeLib); err != nil {
		t.Fatal(err)
	}
	return d
}

// TestConvsFakeDNNEmulated runs checkConvs on the emulator with the fake
// cuDNN: the descriptors, the choice among the heuristics' algorithms
// (the fake's first acceptable one, algorithm 1, with its workspace: it
// refuses any other), the math types, alpha and beta, the counts; and the
// plans are made once per shape.
func TestConvsFakeDNNEmulated(t *testing.T) {
	d := fakeDNN(t)
	if d.ConvPath() != "cudnn 9.8.0" {
		t.Errorf("ConvPath %q with the fake", d.ConvPath())
	}
	checkConvs(t, d, 1e-5)
	if got, want := len(d.dnn.plans), 2*len(convShapes(false)); got != want {
		t.Errorf("%d plans for %d shapes", got, want)
	}
	checkFakeAlgorithms(t, d, 2)
	if !d.dnn.plans[resnet3x3(3, false)].searched {
		t.Error("the measured search did not choose the plan's algorithms")
	}
	// the fake's search fails for 5 groups: the heuristics' algorithm 1
	// runs it, and cuDNN stays
	depthwise := convShapes(false)[4]
	if algo, _, ok := d.ConvAlgorithms(depthwise); !ok || algo != [3]int{1, 1, 1} || d.dnn.plans[depthwise].searched || d.ConvPathReason() != nil {
		t.Errorf("%+v, whose search fails: algorithms %v (planned %v), searched %v, cuDNN dropped: %v", depthwise, algo, ok, d.dnn.plans[depthwise].searched, d.ConvPathReason())
	}
	// a failed call names itself and cuDNN's status
	err := d.dnn.check("cudnnConvolutionForward", 3)
	var e *Error
	if !errors.As(err, &e) || e.Call != "cudnnConvolutionForward" || e.Name != "CUDNN_STATUS_BAD_PARAM" {
		t.Errorf("status 3: %v", err)
	}
	// a buffer too small for the shape is refused before cuDNN is called
	c := resnet3x3(2, false)
	nx, nw, _ := c.Sizes()
	if err := d.ConvForward(c, put(t, d, make([]float32, nx)), put(t, d, make([]float32, nw)), put(t, d, make([]float32, 3))); err == nil || !strings.Contains(err.Error(), "ConvForward") {
		t.Errorf("a y of 3 elements: %v", err)
	}
}

// checkFakeAlgorithms checks that d's plans of resnet3x3 run the fake's
// algorithm want (2, the measured search's choice; 1, the heuristics')
// in all three directions, in the precision's base math.
func checkFakeAlgorithms(t *testing.T, d *Device, want int) {
	t.Helper()
	for _, tf32 := range []bool{false, true} {
		algo, math, _ := d.ConvAlgorithms(resnet3x3(3, tf32))
		if algo != [3]int{want, want, want} || math != [3]int{int(baseMath(tf32)), int(baseMath(tf32)), int(baseMath(tf32))} {
			t.Errorf("tf32 %v: algorithms %v in math %v, want the fake's algorithm %d in math %d", tf32, algo, math, want, baseMath(tf32))
		}
	}
}

// TestConvsHeuristicsFakeDNNEmulated is TestConvsFakeDNNEmulated with
// GRAPHPIPE_CONV_ALGO=heuristics: the heuristics' choice (the fake's
// algorithm 1), nothing measured. A value the variable does not take
// fails the convolution, naming it.
func TestConvsHeuristicsFakeDNNEmulated(t *testing.T) {
	t.Setenv(AlgoEnv, "heuristics")
	d := fakeDNN(t)
	before := d.Counts()
	checkConvs(t, d, 1e-5)
	checkFakeAlgorithms(t, d, 1)
	if d.dnn.plans[resnet3x3(3, false)].searched {
		t.Error("a plan was searched with the search off")
	}
	if d.Counts().Sub(before).DNN == 0 {
		t.Error("no cuDNN call")
	}
	t.Setenv(AlgoEnv, "fastest")
	bad := fakeDNN(t)
	if err := bad.ConvReady(resnet3x3(2, false)); err == nil || !strings.Contains(err.Error(), AlgoEnv) {
		t.Errorf("%s=fastest: %v", AlgoEnv, err)
	}
}

// TestConvsOnGPU runs checkConvs on GPU 0 with the system's cuDNN
// (skipped, saying why, without a GPU or without cuDNN).
func TestConvsOnGPU(t *testing.T) {
	lockThread(t)
	d, err := Open(0)
	if err != nil {
		t.Skipf("no GPU to test on: %v", err)
	}
	defer d.Close()
	if err := d.Bind(); err != nil {
		t.Fatal(err)
	}
	if path := d.ConvPath(); d.ConvPathReason() != nil {
		t.Skipf("no cuDNN on this machine (convolutions run as %s + GEMM): %v", path, d.ConvPathReason())
	}
	t.Logf("GPU 0: %s, %s (%s)", d.Name, d.ConvPath(), d.dnn.lib.path)
	checkConvs(t, d, 1e-4)
	for _, tf32 := range []bool{false, true} {
		algo, math, _ := d.ConvAlgorithms(resnet3x3(3, tf32))
		t.Logf("tf32 %v, a 3×3 convolution: algorithms %v (forward, backward data, backward filter) in math types %v", tf32, algo, math)
	}
}

func newRand() *rand.Rand { return rand.New(rand.NewPCG(3, 4)) }

// lockThread keeps the test's goroutine on its OS thread, where a GPU's
// context is made current.
func lockThread(t *testing.T) {
	runtime.LockOSThread()
	t.Cleanup(runtime.UnlockOSThread)
}

// TestDNNDroppedOnFailureEmulated: a cuDNN call that fails while a plan is
// made (the fake refuses 7 groups) leaves the device without cuDNN, its
// reason naming the call and cuDNN's status; ConvReady says ErrNoDNN.
func TestDNNDroppedOnFailureEmulated(t *testing.T) {
	d := fakeDNN(t)
	c := ConvShape{N: 1, C: 7, H: 4, W: 4, K: 7, KH: 3, KW: 3, PadH: 1, PadW: 1, StrideH: 1, StrideW: 1, DilationH: 1, DilationW: 1, Groups: 7}
	if err := d.ConvReady(c); !errors.Is(err, ErrNoDNN) {
		t.Fatalf("ConvReady: %v, want ErrNoDNN", err)
	}
	reason := d.ConvPathReason()
	var e *Error
	if !errors.As(reason, &e) || e.Call != "cudnnSetConvolutionGroupCount" || e.Name != "CUDNN_STATUS_BAD_PARAM" {
		t.Errorf("reason %v, want cudnnSetConvolutionGroupCount's CUDNN_STATUS_BAD_PARAM", reason)
	}
	if d.ConvPath() != "im2col" || !errors.Is(d.ConvReady(resnet3x3(1, false)), ErrNoDNN) {
		t.Errorf("after the failure: %s, and a plain convolution still planned", d.ConvPath())
	}
}
