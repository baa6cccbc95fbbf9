package cuda

import (
	"runtime"
	"unsafe"
)

// NVRTC (nvrtc.h). Status 0 is success.
var (
	nvrtcVersion           func(major, minor *int32) int32
	nvrtcGetErrorString    func(st int32) *byte
	nvrtcCreateProgram     func(p *uintptr, src string, name string, nHeaders int32, headers, includes unsafe.Pointer) int32
	nvrtcCompileProgram    func(p uintptr, nOpts int32, opts unsafe.Pointer) int32
	nvrtcGetProgramLogSize func(p uintptr, n *uint64) int32
	nvrtcGetProgramLog     func(p uintptr, log *byte) int32
	nvrtcGetCUBINSize      func(p uintptr, n *uint64) int32
	nvrtcGetCUBIN          func(p uintptr, out *byte) int32
	nvrtcDestroyProgram    func(p *uintptr) int32
)

func nvrtcBindings() []binding {
	return []binding{
		bind(&nvrtcVersion, "nvrtcVersion"),
		bind(&nvrtcGetErrorString, "nvrtcGetErrorString"),
		bind(&nvrtcCreateProgram, "nvrtcCreateProgram"),
		bind(&nvrtcCompileProgram, "nvrtcCompileProgram"),
		bind(&nvrtcGetProgramLogSize, "nvrtcGetProgramLogSize"),
		bind(&nvrtcGetProgramLog, "nvrtcGetProgramLog"),
		bind(&nvrtcGetCUBINSize, "nvrtcGetCUBINSize"),
		bind(&nvrtcGetCUBIN, "nvrtcGetCUBIN"),
		bind(&nvrtcDestroyProgram, "nvrtcDestroyProgram"),
	}
}

func checkRTC(call string, st int32) error {
	if st == 0 {
		return nil
	}
	return &Error{Call: call, Code: int(st), Name: cString(nvrtcGetErrorString(st))}
}

// compile turns CUDA C into a CUBIN for arch (e.g. "sm_90").
func compile(src, name, arch string) ([]byte, error) {
	var prog uintptr
	if err := checkRTC("nvrtcCreateProgram", nvrtcCreateProgram(&prog, src, name, 0, nil, nil)); err != nil {
		return nil, err
	}
	defer nvrtcDestroyProgram(&prog)
	opts := cStrings("--gpu-architecture="+arch, "--std=c++17") // no fast math: the CPU kernels use IEEE expf, erff
	st := nvrtcCompileProgram(prog, int32(len(opts.ptrs)), unsafe.Pointer(&opts.ptrs[0]))
	runtime.KeepAlive(opts)
	if st != 0 {
		err := checkRTC("nvrtcCompileProgram", st).(*Error)
		var n uint64
		if nvrtcGetProgramLogSize(prog, &n) == 0 && n > 1 {
			log := make([]byte, n)
			if nvrtcGetProgramLog(prog, &log[0]) == 0 {
				err.Log = string(log[:n-1])
			}
		}
		return nil, err
	}
	var n uint64
	if err := checkRTC("nvrtcGetCUBINSize", nvrtcGetCUBINSize(prog, &n)); err != nil {
		return nil, err
	}
	out := make([]byte, n)
	if err := checkRTC("nvrtcGetCUBIN", nvrtcGetCUBIN(prog, &out[0])); err != nil {
		return nil, err
	}
	return out, nil
}

// cstrs is an array of NUL-terminated strings for a char** argument; the
// caller keeps it alive (runtime.KeepAlive) until the call has returned.
type cstrs struct {
	bufs [][]byte
	ptrs []*byte
}

func cStrings(ss ...string) *cstrs {
	c := &cstrs{}
	for _, s := range ss {
		b := append([]byte(s), 0)
		c.bufs = append(c.bufs, b)
		c.ptrs = append(c.ptrs, &b[0])
	}
	return c
}
