package cuda

import (
	"fmt"
	"unsafe"
)

// Error is a CUDA, cuBLAS or NVRTC call that failed.
type Error struct {
	Call string // the function called
	Code int    // its status code
	Name string // the library's name for the code, when it has one
	Log  string // NVRTC's compile log
}

func (e *Error) Error() string {
	s := fmt.Sprintf("cuda: %s failed: %s (%d)", e.Call, e.Name, e.Code)
	if e.Log != "" {
		s += "\n" + e.Log
	}
	return s
}

// The driver API (cuda.h). CUresult is an int; handles are pointers;
// CUdeviceptr is a 64-bit integer; CUdevice an int.
var (
	cuInit                    func(flags uint32) int32
	cuGetErrorName            func(r int32, s **byte) int32
	cuDeviceGetCount          func(n *int32) int32
	cuDeviceGet               func(d *int32, ordinal int32) int32
	cuDeviceGetName           func(name *byte, n int32, d int32) int32
	cuDeviceTotalMem          func(bytes *uint64, d int32) int32
	cuDeviceGetAttribute      func(v *int32, attr int32, d int32) int32
	cuDevicePrimaryCtxRetain  func(ctx *uintptr, d int32) int32
	cuDevicePrimaryCtxRelease func(d int32) int32
	cuCtxSetCurrent           func(ctx uintptr) int32
	cuMemAlloc                func(p *uint64, bytes uint64) int32
	cuMemFree                 func(p uint64) int32
	cuMemHostAlloc            func(p *unsafe.Pointer, bytes uint64, flags uint32) int32
	cuMemFreeHost             func(p unsafe.Pointer) int32
	cuMemcpyHtoDAsync         func(dst uint64, src unsafe.Pointer, bytes uint64, s uintptr) int32
	cuMemcpyDtoHAsync         func(dst unsafe.Pointer, src uint64, bytes uint64, s uintptr) int32
	cuMemcpyDtoDAsync         func(dst, src uint64, bytes uint64, s uintptr) int32
	cuMemsetD32Async          func(dst uint64, v uint32, n uint64, s uintptr) int32
	cuStreamCreate            func(s *uintptr, flags uint32) int32
	cuStreamSynchronize       func(s uintptr) int32
	cuStreamDestroy           func(s uintptr) int32
	cuEventCreate             func(e *uintptr, flags uint32) int32
	cuEventRecord             func(e uintptr, s uintptr) int32
	cuEventSynchronize        func(e uintptr) int32
	cuEventDestroy            func(e uintptr) int32
	cuModuleLoadData          func(m *uintptr, image unsafe.Pointer) int32
	cuModuleGetFunction       func(f *uintptr, m uintptr, name string) int32
	cuLaunchKernel            func(f uintptr, gx, gy, gz, bx, by, bz, shared uint32, s uintptr, params unsafe.Pointer, extra unsafe.Pointer) int32
	cuStreamWaitEvent         func(s uintptr, e uintptr, flags uint32) int32
	cuMemGetAddressRange      func(base *uint64, size *uint64, p uint64) int32
	cuIpcGetMemHandle         func(h *ipcMemHandle, p uint64) int32
	cuIpcOpenMemHandle        func(p *uint64, h ipcMemHandle, flags uint32) int32
	cuIpcCloseMemHandle       func(p uint64) int32
	cuDeviceGetUuid           func(uuid *[16]byte, d int32) int32
	cuDeviceCanAccessPeer     func(can *int32, d, peer int32) int32
)

// ipcMemHandle is CUipcMemHandle, passed by value to cuIpcOpenMemHandle
// (purego passes structs by value on linux amd64 and arm64).
type ipcMemHandle struct{ Reserved [64]byte }

const (
	attrComputeMajor  = 75 // CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR
	attrComputeMinor  = 76 // CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR
	attrSMCount       = 16 // CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT
	hostAllocPortable = 1  // CU_MEMHOSTALLOC_PORTABLE
	streamNonBlocking = 1  // CU_STREAM_NON_BLOCKING
	eventNoTiming     = 2  // CU_EVENT_DISABLE_TIMING
	ipcLazyPeerAccess = 1  // CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS
)

func driverBindings() []binding {
	return []binding{
		bind(&cuInit, "cuInit"),
		bind(&cuGetErrorName, "cuGetErrorName"),
		bind(&cuDeviceGetCount, "cuDeviceGetCount"),
		bind(&cuDeviceGet, "cuDeviceGet"),
		bind(&cuDeviceGetName, "cuDeviceGetName"),
		bind(&cuDeviceTotalMem, "cuDeviceTotalMem_v2"),
		bind(&cuDeviceGetAttribute, "cuDeviceGetAttribute"),
		bind(&cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain"),
		bind(&cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2", "cuDevicePrimaryCtxRelease"),
		bind(&cuCtxSetCurrent, "cuCtxSetCurrent"),
		bind(&cuMemAlloc, "cuMemAlloc_v2"),
		bind(&cuMemFree, "cuMemFree_v2"),
		bind(&cuMemHostAlloc, "cuMemHostAlloc"),
		bind(&cuMemFreeHost, "cuMemFreeHost"),
		bind(&cuMemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2"),
		bind(&cuMemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2"),
		bind(&cuMemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2"),
		bind(&cuMemsetD32Async, "cuMemsetD32Async"),
		bind(&cuStreamCreate, "cuStreamCreate"),
		bind(&cuStreamSynchronize, "cuStreamSynchronize"),
		bind(&cuStreamDestroy, "cuStreamDestroy_v2", "cuStreamDestroy"),
		bind(&cuEventCreate, "cuEventCreate"),
		bind(&cuEventRecord, "cuEventRecord"),
		bind(&cuEventSynchronize, "cuEventSynchronize"),
		bind(&cuEventDestroy, "cuEventDestroy_v2", "cuEventDestroy"),
		bind(&cuModuleLoadData, "cuModuleLoadData"),
		bind(&cuModuleGetFunction, "cuModuleGetFunction"),
		bind(&cuLaunchKernel, "cuLaunchKernel"),
		bind(&cuStreamWaitEvent, "cuStreamWaitEvent"),
		bind(&cuMemGetAddressRange, "cuMemGetAddressRange_v2"),
		bind(&cuIpcGetMemHandle, "cuIpcGetMemHandle"),
		bind(&cuIpcOpenMemHandle, "cuIpcOpenMemHandle_v2", "cuIpcOpenMemHandle"),
		bind(&cuIpcCloseMemHandle, "cuIpcCloseMemHandle"),
		bind(&cuDeviceGetUuid, "cuDeviceGetUuid_v2", "cuDeviceGetUuid"),
		bind(&cuDeviceCanAccessPeer, "cuDeviceCanAccessPeer"),
	}
}

// errName is the driver's name for a CUresult.
func errName(r int32) string {
	if cuGetErrorName == nil {
		return "CUDA_ERROR"
	}
	var p *byte
	if cuGetErrorName(r, &p) != 0 || p == nil {
		return "CUDA_ERROR_UNKNOWN"
	}
	return cString(p)
}

// check turns a CUresult into an *Error.
func check(call string, r int32) error {
	if r == 0 {
		return nil
	}
	return &Error{Call: call, Code: int(r), Name: errName(r)}
}

// cString copies a NUL-terminated C string.
func cString(p *byte) string {
	if p == nil {
		return ""
	}
	var b []byte
	for i := 0; i < 1<<16; i++ {
		c := *(*byte)(unsafe.Add(unsafe.Pointer(p), i))
		if c == 0 {
			break
		}
		b = append(b, c)
	}
	return string(b)
}
