package cuda

import (
	"fmt"
	"strings"
	"sync"
)

// kernelParams is each kernel of kernels.cu by name: its parameters' C
// types, read from the source once.
var kernelParams = sync.OnceValue(func() map[string][]string {
	out := map[string][]string{}
	for _, m := range kernelSig.FindAllStringSubmatch(kernelSource, -1) {
		var types []string
		for _, p := range strings.Split(m[2], ",") {
			p = strings.TrimSpace(p)
			if cut := strings.LastIndexAny(p, " *"); cut >= 0 {
				p = strings.TrimSpace(p[:cut+1])
			}
			types = append(types, p)
		}
		out[m[1]] = types
	}
	return out
})

// HasKernel says whether kernels.cu has a kernel of that name.
func HasKernel(name string) bool {
	_, ok := kernelParams()[name]
	return ok
}

// checkArgs refuses a launch of a kernel of kernels.cu with another
// number of arguments than it has parameters, or a buffer whose elements are not what the kernel's
// parameter points to: a half buffer for a float*, a float32 one for a
// gp_h* (a bf16 activation) or unsigned short* (16-bit values). A null
// buffer passes (a kernel that skips a null pointer).
func checkArgs(name string, args []any) error {
	types, ok := kernelParams()[name]
	if !ok {
		return nil // the backend says so (the dry device launches anything)
	}
	if len(args) != len(types) {
		return fmt.Errorf("cuda: launch %s: %d arguments for %d parameters", name, len(args), len(types))
	}
	for i, a := range args {
		b, ok := a.(Buffer)
		if !ok || b.Ptr == 0 {
			continue
		}
		t := types[i]
		sixteen := strings.Contains(t, "gp_h") || strings.Contains(t, "unsigned short")
		switch {
		case sixteen && !b.Half:
			return fmt.Errorf("cuda: launch %s: argument %d (%s) is a buffer of float32s", name, i, t)
		case strings.Contains(t, "float") && !strings.Contains(t, "f4") && b.Half:
			return fmt.Errorf("cuda: launch %s: argument %d (%s) is a buffer of 16-bit values", name, i, t)
		}
	}
	return nil
}
