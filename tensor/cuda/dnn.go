package cuda

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"unsafe"

	"github.com/ebitengine/purego"
)

// cuDNN, NVIDIA's library of deep-learning primitives, is loaded at run
// time as cuBLAS is, for the convolutions (conv.go). It is optional: where
// no libcudnn loads, a Device runs its convolutions as im2col + GEMM
// (package stage's path), says why once per process, and nothing fails.
// Only the legacy convolution API that cuDNN 8 and 9 both keep is used
// (cudnn_ops.h and cudnn_cnn.h: tensor, filter and convolution
// descriptors, the _v7 algorithm heuristics, the three convolutions, the
// bias's backward and a broadcast add) and spatial batch norm's training
// forward and backward (bn.go).

var libCUDNN = library{
	name:  "libcudnn",
	what:  "cuDNN: a system package's, the CUDA toolkit's, or the one a pip-installed PyTorch carries",
	env:   "GRAPHPIPE_LIBCUDNN",
	files: []string{"libcudnn.so.9", "libcudnn.so.8", "libcudnn.so"},
	more:  dnnDirs,
}

// dnnDirs are the directories searched for libcudnn after the loader's
// path and the toolkit's: a conda environment's lib, and nvidia/cudnn/lib
// (where NVIDIA's cuDNN wheel, which a pip-installed PyTorch depends on,
// puts it) under every Python package directory named by $PYTHONPATH,
// $VIRTUAL_ENV or $CONDA_PREFIX, or found by globbing the usual places:
// ~/.local/lib/python3*/site-packages, {/usr,/usr/local,/opt/conda}/lib
// (and lib64)/python3*/{site,dist}-packages, and the virtual environments
// a machine keeps under /opt (/opt/*/.venv and /opt/*/venv, as an image
// with PyTorch preinstalled does). Nothing runs Python.
func dnnDirs() []string {
	home, _ := os.UserHomeDir()
	return dnnDirsFrom(os.Getenv("PYTHONPATH"), os.Getenv("VIRTUAL_ENV"), os.Getenv("CONDA_PREFIX"), home, "/")
}

// dnnDirsFrom is dnnDirs given the environment's values and the file
// system's root (a test's temporary directory stands in for /).
func dnnDirsFrom(pythonPath, venv, conda, home, root string) []string {
	var sites []string
	for _, p := range filepath.SplitList(pythonPath) {
		if p != "" {
			sites = append(sites, p)
		}
	}
	glob := func(parts ...string) {
		m, _ := filepath.Glob(filepath.Join(parts...))
		sites = append(sites, m...)
	}
	if venv != "" {
		glob(venv, "lib", "python3*", "site-packages")
	}
	var dirs []string
	if conda != "" {
		dirs = append(dirs, filepath.Join(conda, "lib"))
		glob(conda, "lib", "python3*", "site-packages")
	}
	if home != "" {
		glob(home, ".local", "lib", "python3*", "site-packages")
	}
	for _, base := range []string{"usr/local/lib", "usr/local/lib64", "usr/lib", "usr/lib64", "opt/conda/lib"} {
		glob(root, base, "python3*", "dist-packages")
		glob(root, base, "python3*", "site-packages")
	}
	for _, env := range []string{".venv", "venv"} {
		glob(root, "opt", "*", env, "lib", "python3*", "site-packages")
	}
	seen := map[string]bool{}
	for _, s := range sites {
		d := filepath.Join(s, "nvidia", "cudnn", "lib")
		if !seen[d] {
			seen[d] = true
			dirs = append(dirs, d)
		}
	}
	return dirs
}

// dnnLib is one opened libcudnn: its symbols, resolved into this value's
// fields (not package variables, so that a test's fake cuDNN on the
// emulator and a GPU's real one can live in one process).
type dnnLib struct {
	path    string // the file opened
	version int    // cudnnGetVersion's number: 90102 for 9.1.2, 8907 for 8.9.7

	getVersion     func() uintptr
	getErrorString func(st int32) *byte
	create         func(h *uintptr) int32
	destroy        func(h uintptr) int32
	setStream      func(h, stream uintptr) int32

	createTensor  func(d *uintptr) int32
	setTensor4d   func(d uintptr, format, dtype int32, n, c, h, w int32) int32
	destroyTensor func(d uintptr) int32
	createFilter  func(d *uintptr) int32
	setFilter4d   func(d uintptr, dtype, format int32, k, c, h, w int32) int32
	destroyFilter func(d uintptr) int32
	createConv    func(d *uintptr) int32
	setConv2d     func(d uintptr, padH, padW, u, v, dilH, dilW int32, mode, compute int32) int32
	setGroupCount func(d uintptr, groups int32) int32
	setMathType   func(d uintptr, math int32) int32
	destroyConv   func(d uintptr) int32
	outputDim     func(conv, x, w uintptr, n, c, h, wd *int32) int32

	// the heuristics (_v7): perf is an array of requested 48-byte
	// cudnnConvolution*AlgoPerf_t (dnnPerf)
	fwdAlgos       func(h, x, w, conv, y uintptr, requested int32, returned *int32, perf unsafe.Pointer) int32
	bwdDataAlgos   func(h, w, dy, conv, dx uintptr, requested int32, returned *int32, perf unsafe.Pointer) int32
	bwdFilterAlgos func(h, x, dy, conv, dw uintptr, requested int32, returned *int32, perf unsafe.Pointer) int32
	// the measured search (Find...Ex): each algorithm run once on the
	// buffers given, perf sorted by time
	fwdFind        func(h, xd uintptr, x uint64, wd uintptr, w uint64, conv, yd uintptr, y uint64, requested int32, returned *int32, perf unsafe.Pointer, ws, wsBytes uint64) int32
	bwdDataFind    func(h, wd uintptr, w uint64, dyd uintptr, dy uint64, conv, dxd uintptr, dx uint64, requested int32, returned *int32, perf unsafe.Pointer, ws, wsBytes uint64) int32
	bwdFilterFind  func(h, xd uintptr, x uint64, dyd uintptr, dy uint64, conv, dwd uintptr, dw uint64, requested int32, returned *int32, perf unsafe.Pointer, ws, wsBytes uint64) int32
	fwdSpace       func(h, x, w, conv, y uintptr, algo int32, bytes *uint64) int32
	bwdDataSpace   func(h, w, dy, conv, dx uintptr, algo int32, bytes *uint64) int32
	bwdFilterSpace func(h, x, dy, conv, dw uintptr, algo int32, bytes *uint64) int32

	// the work, queued on the handle's stream; alpha and beta point at
	// float32s (the data is FP32), device memory is a 64-bit address
	forward        func(h uintptr, alpha unsafe.Pointer, xd uintptr, x uint64, wd uintptr, w uint64, conv uintptr, algo int32, ws, wsBytes uint64, beta unsafe.Pointer, yd uintptr, y uint64) int32
	backwardData   func(h uintptr, alpha unsafe.Pointer, wd uintptr, w uint64, dyd uintptr, dy uint64, conv uintptr, algo int32, ws, wsBytes uint64, beta unsafe.Pointer, dxd uintptr, dx uint64) int32
	backwardFilter func(h uintptr, alpha unsafe.Pointer, xd uintptr, x uint64, dyd uintptr, dy uint64, conv uintptr, algo int32, ws, wsBytes uint64, beta unsafe.Pointer, dwd uintptr, dw uint64) int32
	backwardBias   func(h uintptr, alpha unsafe.Pointer, dyd uintptr, dy uint64, beta unsafe.Pointer, dbd uintptr, db uint64) int32
	addTensor      func(h uintptr, alpha unsafe.Pointer, ad uintptr, a uint64, beta unsafe.Pointer, cd uintptr, c uint64) int32

	// batch norm (bn.go): spatial mode, FP32 data, the per-channel
	// tensors described by pd; factor is the running statistics' momentum
	bnForwardTraining func(h uintptr, mode int32, alpha, beta unsafe.Pointer, xd uintptr, x uint64, yd uintptr, y uint64,
		pd uintptr, scale, bias uint64, factor float64, runMean, runVar uint64, eps float64, saveMean, saveInvVar uint64) int32
	bnBackward func(h uintptr, mode int32, alphaData, betaData, alphaParam, betaParam unsafe.Pointer,
		xd uintptr, x uint64, dyd uintptr, dy uint64, dxd uintptr, dx uint64,
		pd uintptr, scale, dScale, dBias uint64, eps float64, saveMean, saveInvVar uint64) int32
}

func (l *dnnLib) bindings() []binding {
	return []binding{
		bind(&l.getVersion, "cudnnGetVersion"),
		bind(&l.getErrorString, "cudnnGetErrorString"),
		bind(&l.create, "cudnnCreate"),
		bind(&l.destroy, "cudnnDestroy"),
		bind(&l.setStream, "cudnnSetStream"),
		bind(&l.createTensor, "cudnnCreateTensorDescriptor"),
		bind(&l.setTensor4d, "cudnnSetTensor4dDescriptor"),
		bind(&l.destroyTensor, "cudnnDestroyTensorDescriptor"),
		bind(&l.createFilter, "cudnnCreateFilterDescriptor"),
		bind(&l.setFilter4d, "cudnnSetFilter4dDescriptor"),
		bind(&l.destroyFilter, "cudnnDestroyFilterDescriptor"),
		bind(&l.createConv, "cudnnCreateConvolutionDescriptor"),
		bind(&l.setConv2d, "cudnnSetConvolution2dDescriptor"),
		bind(&l.setGroupCount, "cudnnSetConvolutionGroupCount"),
		bind(&l.setMathType, "cudnnSetConvolutionMathType"),
		bind(&l.destroyConv, "cudnnDestroyConvolutionDescriptor"),
		bind(&l.outputDim, "cudnnGetConvolution2dForwardOutputDim"),
		bind(&l.fwdAlgos, "cudnnGetConvolutionForwardAlgorithm_v7"),
		bind(&l.bwdDataAlgos, "cudnnGetConvolutionBackwardDataAlgorithm_v7"),
		bind(&l.bwdFilterAlgos, "cudnnGetConvolutionBackwardFilterAlgorithm_v7"),
		bind(&l.fwdFind, "cudnnFindConvolutionForwardAlgorithmEx"),
		bind(&l.bwdDataFind, "cudnnFindConvolutionBackwardDataAlgorithmEx"),
		bind(&l.bwdFilterFind, "cudnnFindConvolutionBackwardFilterAlgorithmEx"),
		bind(&l.fwdSpace, "cudnnGetConvolutionForwardWorkspaceSize"),
		bind(&l.bwdDataSpace, "cudnnGetConvolutionBackwardDataWorkspaceSize"),
		bind(&l.bwdFilterSpace, "cudnnGetConvolutionBackwardFilterWorkspaceSize"),
		bind(&l.forward, "cudnnConvolutionForward"),
		bind(&l.backwardData, "cudnnConvolutionBackwardData"),
		bind(&l.backwardFilter, "cudnnConvolutionBackwardFilter"),
		bind(&l.backwardBias, "cudnnConvolutionBackwardBias"),
		bind(&l.addTensor, "cudnnAddTensor"),
		bind(&l.bnForwardTraining, "cudnnBatchNormalizationForwardTraining"),
		bind(&l.bnBackward, "cudnnBatchNormalizationBackward"),
	}
}

// minDNN is the oldest cuDNN whose legacy API this package calls: 8.0.
const minDNN = 8000

// openDNN opens the libcudnn l finds and resolves its symbols. A library
// found in a directory (not on the loader's path) is cuDNN 9's dispatcher:
// its sub-libraries (libcudnn_graph, libcudnn_engines_*, libcudnn_ops,
// libcudnn_cnn, ...) beside it are opened first, globally, so that its own
// loading of them by soname finds these and not another cuDNN's.
func openDNN(l library) (*dnnLib, error) {
	h, path, err := l.openPath()
	if err != nil {
		return nil, err
	}
	if filepath.IsAbs(path) {
		for _, sub := range dnnSubLibraries(path) {
			_, _ = purego.Dlopen(sub, purego.RTLD_NOW|purego.RTLD_GLOBAL) // best effort: cuDNN says what it misses
		}
	}
	dl := &dnnLib{path: path}
	if err := l.bind(h, dl.bindings()); err != nil {
		var le *LoadError
		if errors.As(err, &le) {
			le.Tried = []string{path}
		}
		return nil, err
	}
	dl.version = int(dl.getVersion())
	if dl.version < minDNN {
		return nil, &LoadError{Lib: l.name, What: l.what, Tried: []string{path},
			Err: fmt.Errorf("cuDNN %s is older than 8.0, whose convolution API this build calls", dnnVersion(dl.version))}
	}
	return dl, nil
}

// dnnSubLibraries are the cuDNN sub-libraries in the directory of the
// dispatcher at path (libcudnn.so.9: libcudnn_*.so.9), libcudnn_graph
// first (the others link to it), then in name order; none for a file
// without a version suffix.
func dnnSubLibraries(path string) []string {
	base := filepath.Base(path)
	i := strings.Index(base, ".so.")
	if i < 0 {
		return nil
	}
	suffix := base[i:] // .so.9
	if j := strings.Index(suffix[len(".so."):], "."); j >= 0 {
		suffix = suffix[:len(".so.")+j] // .so.9.1.0 → .so.9
	}
	subs, _ := filepath.Glob(filepath.Join(filepath.Dir(path), "libcudnn_*"+suffix))
	sort.SliceStable(subs, func(a, b int) bool {
		ga, gb := strings.Contains(filepath.Base(subs[a]), "_graph"), strings.Contains(filepath.Base(subs[b]), "_graph")
		if ga != gb {
			return ga
		}
		return subs[a] < subs[b]
	})
	return subs
}

// dnnVersion writes cudnnGetVersion's number as major.minor.patch: cuDNN
// 9 numbers its versions major·10000 + minor·100 + patch, cuDNN 8 (and
// before) major·1000 + minor·100 + patch.
func dnnVersion(v int) string {
	if v >= 90000 {
		return fmt.Sprintf("%d.%d.%d", v/10000, v%10000/100, v%100)
	}
	return fmt.Sprintf("%d.%d.%d", v/1000, v%1000/100, v%100)
}

var (
	dnnOnce   sync.Once
	dnnLoaded *dnnLib
	dnnErr    error
)

// loadDNN opens the system's cuDNN once per process; later calls return
// the first call's result.
func loadDNN() (*dnnLib, error) {
	dnnOnce.Do(func() { dnnLoaded, dnnErr = openDNN(libCUDNN) })
	return dnnLoaded, dnnErr
}

// ConvEnv is the variable that turns cuDNN off: GRAPHPIPE_CONV=im2col
// runs every convolution as im2col + GEMM even where cuDNN loads.
const ConvEnv = "GRAPHPIPE_CONV"

// ErrDNNOff is ConvPathReason where ConvEnv turns cuDNN off.
var ErrDNNOff = errors.New(ConvEnv + "=im2col: cuDNN is not used")

// dnnNotice says once per process why convolutions run without cuDNN.
var dnnNotice notice

// notice writes a message once.
type notice struct{ once sync.Once }

func (n *notice) say(w io.Writer, format string, a ...any) {
	n.once.Do(func() { fmt.Fprintf(w, format, a...) })
}

// dnn is a Device's cuDNN: the library, a handle whose work is queued on
// the device's stream (made at first use: cudnnCreate takes a while, and
// most devices opened run no convolution), and the convolutions it has
// been asked for, each with its descriptors and algorithms (conv.go).
type dnn struct {
	lib       *dnnLib
	stream    uintptr
	h         uintptr
	plans     map[ConvShape]*convPlan
	bns       map[BNShape]*bnPlan
	search    bool   // AlgoEnv: cuDNN's measured search picks the algorithms
	searchErr error  // AlgoEnv's value is not one it takes
	limit     uint64 // the most workspace (bytes) an algorithm may ask for
}

// check turns a cudnnStatus_t into an *Error carrying cuDNN's name for it.
func (n *dnn) check(call string, st int32) error {
	if st == 0 {
		return nil
	}
	return &Error{Call: call, Code: int(st), Name: cString(n.lib.getErrorString(st))}
}

func newDNN(lib *dnnLib, stream uintptr, memory uint64) *dnn {
	search, err := algoSearch()
	return &dnn{search: search, searchErr: err, lib: lib, stream: stream, plans: map[ConvShape]*convPlan{}, bns: map[BNShape]*bnPlan{}, limit: workspaceLimit(memory)}
}

// open makes the handle, on the calling thread, where the device's
// context must be current.
func (n *dnn) open() error {
	if err := n.check("cudnnCreate", n.lib.create(&n.h)); err != nil {
		n.h = 0
		return err
	}
	if err := n.check("cudnnSetStream", n.lib.setStream(n.h, n.stream)); err != nil {
		n.lib.destroy(n.h)
		n.h = 0
		return err
	}
	return nil
}

// workspaceLimit is the most workspace an algorithm may ask for on a
// device of memory bytes: a 32nd of it, at least 256 MiB and at most 2
// GiB (the pool keeps each size it hands out; PyTorch's ResNet-50 runs
// with far less).
func workspaceLimit(memory uint64) uint64 { return min(max(memory/32, 256<<20), 2<<30) }

// close destroys the plans' descriptors and the handle.
func (n *dnn) close() {
	for k, p := range n.plans {
		p.free(n.lib)
		delete(n.plans, k)
	}
	for k, p := range n.bns {
		p.free(n.lib)
		delete(n.bns, k)
	}
	if n.h != 0 {
		n.lib.destroy(n.h)
		n.h = 0
	}
}

// attachDNN marks a GPU's Device to take the system's cuDNN at first use
// (dnnReady), unless GRAPHPIPE_CONV=im2col: opening libcudnn and its
// sub-libraries and making a handle take a while, and most devices opened
// run no convolution.
func (d *Device) attachDNN() {
	if os.Getenv(ConvEnv) == "im2col" {
		d.dnnErr = ErrDNNOff
		return
	}
	d.dnnPending = true
}

// dropDNN leaves d without cuDNN, for reason err, said once per process.
func (d *Device) dropDNN(err error) {
	if d.dnn != nil {
		d.dnn.close()
	}
	d.dnn, d.dnnErr = nil, err
	dnnNotice.say(os.Stderr, "graphpipe: %v: conv2d runs as im2col + GEMM\n", err)
}

// dnnReady loads cuDNN (once per process) and makes d's handle unless it
// has one, on a thread where the device's context is current; where no
// libcudnn loads or cuDNN cannot make a handle (a sub-library missing or of
// another version), d drops cuDNN, saying why. It says whether d has
// cuDNN.
func (d *Device) dnnReady() bool {
	if d.dnnPending {
		d.dnnPending = false
		lib, err := loadDNN()
		if err != nil {
			d.dropDNN(err)
			return false
		}
		d.dnn = newDNN(lib, d.b.(*gpu).stream, d.Memory)
	}
	if d.dnn == nil {
		return false
	}
	if d.dnn.h != 0 {
		return true
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	err := d.Bind()
	if err == nil {
		err = d.dnn.open()
	}
	if err != nil {
		d.dropDNN(err)
		return false
	}
	return true
}

// UseDNN gives an emulated Device the cuDNN at path in place of the
// im2col path: for tests, with the fake BuildFakeDNN makes (its
// convolutions run on the CPU, on the emulator's memory). A GPU's Device
// takes the system's cuDNN at Open.
func (d *Device) UseDNN(path string) error {
	if _, emulated := d.b.(*emu); !emulated {
		return fmt.Errorf("cuda: UseDNN is for the emulator; %s takes the system's cuDNN at Open", d.Name)
	}
	l := libCUDNN
	l.env, l.files, l.more = "", []string{path}, nil
	lib, err := openDNN(l)
	if err != nil {
		return err
	}
	if d.dnn != nil {
		d.dnn.close()
	}
	d.dnn, d.dnnErr = newDNN(lib, 0, d.Memory), nil
	if err := d.dnn.open(); err != nil {
		d.dnn, d.dnnErr = nil, err
		return err
	}
	return nil
}

// ConvPath says how the device runs convolutions: "cudnn 9.1.2" where
// cuDNN is loaded and makes a handle (made here unless it was), else
// "im2col" (ConvPathReason says why).
func (d *Device) ConvPath() string {
	if !d.dnnReady() {
		return "im2col"
	}
	return "cudnn " + dnnVersion(d.dnn.lib.version)
}

// ConvPathReason is why the device has no cuDNN, once ConvPath or a
// convolution has asked for it: nil where it has one, and on the emulator
// and a dry device, which never load the system's.
func (d *Device) ConvPathReason() error { return d.dnnErr }
