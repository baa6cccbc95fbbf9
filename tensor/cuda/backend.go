package cuda

import (
	"runtime"
	"unsafe"
)

// backend is what a Device runs on: a GPU through the driver and cuBLAS, or
// the emulator (emulator.go), which runs the same kernels.cu compiled for
// the CPU so that everything above this interface is tested on machines
// without a GPU. GEMMs take cuBLAS's column-major arguments.
type backend interface {
	alloc(n uint64) (uint64, error)
	free(p uint64) error
	hostAlloc(n uint64) (unsafe.Pointer, error)
	hostFree(p unsafe.Pointer) error
	htod(dst uint64, src unsafe.Pointer, n uint64) error
	dtoh(dst unsafe.Pointer, src uint64, n uint64) error
	dtod(dst, src uint64, n uint64) error
	zero(p uint64, words uint64) error
	launch(name string, grid, block int, params []unsafe.Pointer) error
	sgemm(ta, tb int32, m, n, k int32, alpha float32, a uint64, lda int32, b uint64, ldb int32, beta float32, c uint64, ldc int32) error
	sgemmBatched(ta, tb int32, m, n, k int32, alpha float32, a uint64, lda int32, sa int64, b uint64, ldb int32, sb int64, beta float32, c uint64, ldc int32, sc int64, count int32) error
	// gemmEx's A and B hold elements of type in (CUDA_R_32F, _16F, _16BF),
	// C FP32; compute is the cuBLAS compute type (32F, 32F_FAST_TF32).
	gemmEx(in, out, compute int32, ta, tb int32, m, n, k int32, alpha float32, a uint64, lda int32, b uint64, ldb int32, beta float32, c uint64, ldc int32) error
	gemmExBatched(in, out, compute int32, ta, tb int32, m, n, k int32, alpha float32, a uint64, lda int32, sa int64, b uint64, ldb int32, sb int64, beta float32, c uint64, ldc int32, sc int64, count int32) error
	sync() error
	// events mark a point of the stream: made once (newEvent), recorded
	// after the work queued so far, waited for by the host
	newEvent() (uintptr, error)
	record(e uintptr) error
	waitEvent(e uintptr) error
	freeEvent(e uintptr) error
	close() error
}

// gpu is the real backend: one device's primary context, a stream, a
// cuBLAS handle on it and the compiled kernels.
type gpu struct {
	dev    int32
	ctx    uintptr
	stream uintptr
	copy   uintptr // the copy stream: peers' memory copied in (ipc_gpu.go)
	copyEv uintptr // marks the stream's work for the copy stream to wait for
	// exported is each allocation's IPC handle, made at its first export
	exported map[uint64]IPCHandle
	blas     uintptr
	arch     string
	module   uintptr
	funcs    map[string]uintptr
}

func (g *gpu) alloc(n uint64) (uint64, error) {
	var p uint64
	return p, check("cuMemAlloc", cuMemAlloc(&p, n))
}

func (g *gpu) free(p uint64) error {
	delete(g.exported, p) // a later allocation at p is another one
	return check("cuMemFree", cuMemFree(p))
}

func (g *gpu) hostAlloc(n uint64) (unsafe.Pointer, error) {
	var p unsafe.Pointer
	return p, check("cuMemHostAlloc", cuMemHostAlloc(&p, n, hostAllocPortable))
}

func (g *gpu) hostFree(p unsafe.Pointer) error { return check("cuMemFreeHost", cuMemFreeHost(p)) }

func (g *gpu) htod(dst uint64, src unsafe.Pointer, n uint64) error {
	return check("cuMemcpyHtoDAsync", cuMemcpyHtoDAsync(dst, src, n, g.stream))
}

func (g *gpu) dtoh(dst unsafe.Pointer, src uint64, n uint64) error {
	return check("cuMemcpyDtoHAsync", cuMemcpyDtoHAsync(dst, src, n, g.stream))
}

func (g *gpu) dtod(dst, src uint64, n uint64) error {
	return check("cuMemcpyDtoDAsync", cuMemcpyDtoDAsync(dst, src, n, g.stream))
}

func (g *gpu) zero(p uint64, words uint64) error {
	return check("cuMemsetD32Async", cuMemsetD32Async(p, 0, words, g.stream))
}

func (g *gpu) launch(name string, grid, block int, params []unsafe.Pointer) error {
	if err := g.loadKernels(); err != nil {
		return err
	}
	f, ok := g.funcs[name]
	if !ok {
		if err := check("cuModuleGetFunction "+name, cuModuleGetFunction(&f, g.module, name)); err != nil {
			return err
		}
		g.funcs[name] = f
	}
	var pp unsafe.Pointer
	if len(params) > 0 {
		pp = unsafe.Pointer(&params[0])
	}
	err := check("cuLaunchKernel "+name, cuLaunchKernel(f, uint32(grid), 1, 1, uint32(block), 1, 1, 0, g.stream, pp, nil))
	runtime.KeepAlive(params)
	return err
}

func (g *gpu) sgemm(ta, tb int32, m, n, k int32, alpha float32, a uint64, lda int32, b uint64, ldb int32, beta float32, c uint64, ldc int32) error {
	return checkBLAS("cublasSgemm", cublasSgemm(g.blas, ta, tb, m, n, k, &alpha, a, lda, b, ldb, &beta, c, ldc))
}

func (g *gpu) sgemmBatched(ta, tb int32, m, n, k int32, alpha float32, a uint64, lda int32, sa int64, b uint64, ldb int32, sb int64, beta float32, c uint64, ldc int32, sc int64, count int32) error {
	return checkBLAS("cublasSgemmStridedBatched", cublasSgemmStridedBatched(g.blas, ta, tb, m, n, k, &alpha, a, lda, sa, b, ldb, sb, &beta, c, ldc, sc, count))
}

func (g *gpu) gemmEx(in, out, compute int32, ta, tb int32, m, n, k int32, alpha float32, a uint64, lda int32, b uint64, ldb int32, beta float32, c uint64, ldc int32) error {
	return checkBLAS("cublasGemmEx", cublasGemmEx(g.blas, ta, tb, m, n, k, unsafe.Pointer(&alpha), a, in, lda, b, in, ldb,
		unsafe.Pointer(&beta), c, out, ldc, compute, gemmDefault))
}

func (g *gpu) gemmExBatched(in, out, compute int32, ta, tb int32, m, n, k int32, alpha float32, a uint64, lda int32, sa int64, b uint64, ldb int32, sb int64, beta float32, c uint64, ldc int32, sc int64, count int32) error {
	return checkBLAS("cublasGemmStridedBatchedEx", cublasGemmStridedBatchedEx(g.blas, ta, tb, m, n, k, unsafe.Pointer(&alpha), a, in, lda, sa, b, in, ldb, sb,
		unsafe.Pointer(&beta), c, out, ldc, sc, count, compute, gemmDefault))
}

func (g *gpu) sync() error { return check("cuStreamSynchronize", cuStreamSynchronize(g.stream)) }

func (g *gpu) newEvent() (uintptr, error) {
	var e uintptr
	return e, check("cuEventCreate", cuEventCreate(&e, eventNoTiming))
}

func (g *gpu) record(e uintptr) error { return check("cuEventRecord", cuEventRecord(e, g.stream)) }

func (g *gpu) waitEvent(e uintptr) error { return check("cuEventSynchronize", cuEventSynchronize(e)) }

func (g *gpu) freeEvent(e uintptr) error { return check("cuEventDestroy", cuEventDestroy(e)) }

func (g *gpu) close() error {
	if g.stream != 0 {
		cuStreamSynchronize(g.stream)
	}
	if g.blas != 0 {
		cublasDestroy(g.blas)
	}
	if g.stream != 0 {
		cuStreamDestroy(g.stream)
	}
	if g.copy != 0 {
		cuStreamSynchronize(g.copy)
		cuStreamDestroy(g.copy)
	}
	if g.copyEv != 0 {
		cuEventDestroy(g.copyEv)
	}
	if g.ctx != 0 {
		cuDevicePrimaryCtxRelease(g.dev)
	}
	return nil
}

// bind makes the context current on the calling OS thread. CUDA contexts
// are per thread: a Device's user locks its goroutine to one thread.
func (g *gpu) bind() error { return check("cuCtxSetCurrent", cuCtxSetCurrent(g.ctx)) }

// loadKernels compiles kernels.cu (or reads the cached CUBIN) and loads it.
func (g *gpu) loadKernels() error {
	if g.module != 0 {
		return nil
	}
	image, err := cubin(g.arch)
	if err != nil {
		return err
	}
	err = check("cuModuleLoadData", cuModuleLoadData(&g.module, unsafe.Pointer(&image[0])))
	runtime.KeepAlive(image)
	return err
}

// allocators adapt a backend to the pools, counting the driver's calls.
type devAlloc struct {
	b backend
	c *Counts
}

func (a devAlloc) alloc(n uint64) (uint64, error) { a.c.Allocs++; return a.b.alloc(n) }
func (a devAlloc) free(p uint64) error            { a.c.Frees++; return a.b.free(p) }

type pinAlloc struct {
	b backend
	c *Counts
}

func (a pinAlloc) alloc(n uint64) (unsafe.Pointer, error) { a.c.HostAllocs++; return a.b.hostAlloc(n) }
func (a pinAlloc) free(p unsafe.Pointer) error            { return a.b.hostFree(p) }
