package cuda

import "unsafe"

// cuBLAS (cublas_api.h, the _v2 entry points). Status 0 is success.
var (
	cublasCreate              func(h *uintptr) int32
	cublasDestroy             func(h uintptr) int32
	cublasSetStream           func(h uintptr, s uintptr) int32
	cublasGetStatusName       func(st int32) *byte
	cublasSgemm               func(h uintptr, ta, tb int32, m, n, k int32, alpha *float32, a uint64, lda int32, b uint64, ldb int32, beta *float32, c uint64, ldc int32) int32
	cublasSgemmStridedBatched func(h uintptr, ta, tb int32, m, n, k int32, alpha *float32, a uint64, lda int32, sa int64, b uint64, ldb int32, sb int64, beta *float32, c uint64, ldc int32, sc int64, count int32) int32
	cublasGemmEx              func(h uintptr, ta, tb int32, m, n, k int32, alpha unsafe.Pointer, a uint64, at int32, lda int32, b uint64, bt int32, ldb int32, beta unsafe.Pointer, c uint64, ct int32, ldc int32, compute int32, algo int32) int32

	cublasGemmStridedBatchedEx func(h uintptr, ta, tb int32, m, n, k int32, alpha unsafe.Pointer, a uint64, at int32, lda int32, sa int64, b uint64, bt int32, ldb int32, sb int64, beta unsafe.Pointer, c uint64, ct int32, ldc int32, sc int64, count int32, compute int32, algo int32) int32
)

const (
	opN = 0 // CUBLAS_OP_N
	opT = 1 // CUBLAS_OP_T

	dataR32F  = 0  // CUDA_R_32F
	dataR16F  = 2  // CUDA_R_16F
	dataR16BF = 14 // CUDA_R_16BF

	compute32F         = 68 // CUBLAS_COMPUTE_32F
	compute32FFastTF32 = 77 // CUBLAS_COMPUTE_32F_FAST_TF32: FP32 operands read as TF32 on the tensor cores
	gemmDefault        = -1 // CUBLAS_GEMM_DEFAULT
)

func cublasBindings() []binding {
	return []binding{
		bind(&cublasCreate, "cublasCreate_v2"),
		bind(&cublasDestroy, "cublasDestroy_v2"),
		bind(&cublasSetStream, "cublasSetStream_v2"),
		bind(&cublasGetStatusName, "cublasGetStatusName"),
		bind(&cublasSgemm, "cublasSgemm_v2"),
		bind(&cublasSgemmStridedBatched, "cublasSgemmStridedBatched"),
		bind(&cublasGemmEx, "cublasGemmEx"),
		bind(&cublasGemmStridedBatchedEx, "cublasGemmStridedBatchedEx"),
	}
}

func checkBLAS(call string, st int32) error {
	if st == 0 {
		return nil
	}
	return &Error{Call: call, Code: int(st), Name: cString(cublasGetStatusName(st))}
}
