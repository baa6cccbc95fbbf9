// What NVRTC provides built in and clang's CUDA mode takes from the CUDA
// headers, for compiling kernels.cu with clang where there is no CUDA
// toolkit (kernels_clang_test.go). Not used by NVRTC.
#define CUDA_VERSION 12000
#define __host__ __attribute__((host))
#define __device__ __attribute__((device))
#define __global__ __attribute__((global))
#define __shared__ __attribute__((shared))
#define __constant__ __attribute__((constant))
#define __forceinline__ __inline__ __attribute__((always_inline))
#include <stddef.h>
#include <limits.h>
#define HUGE_VAL __builtin_huge_val()
#define HUGE_VALF __builtin_huge_valf()
#define INFINITY __builtin_inff()
#define NAN __builtin_nanf("")
#include <__clang_cuda_builtin_vars.h>
#include <__clang_cuda_libdevice_declares.h>
#include <__clang_cuda_device_functions.h>
#include <__clang_cuda_math.h>
__device__ inline float atomicAdd(float* p, float v) { return __fAtomicAdd(p, v); }
