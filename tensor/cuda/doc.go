// Package cuda is the GPU backend beside package tensor's CPU one: the CUDA
// driver API, cuBLAS, NVRTC and (optional) cuDNN, loaded at run time with
// purego, so the default build stays CGO_ENABLED=0 and builds on machines
// with no CUDA at all.
//
// The contract:
//
//  1. Load finds and opens libcuda (the driver), libcublas and libnvrtc and
//     resolves every symbol this package calls. Where one is missing it
//     returns a *LoadError naming the library and the file names tried;
//     nothing in this package panics on a machine without a GPU.
//     GRAPHPIPE_LIBCUDA, GRAPHPIPE_LIBCUBLAS and GRAPHPIPE_LIBNVRTC name a
//     library file to use instead of searching; the search tries the
//     loader's path, then $CUDA_HOME/lib64, $CUDA_PATH/lib64 and
//     /usr/local/cuda/lib64.
//  2. Open(ordinal) makes a Device: the device's primary context, one
//     stream, a cuBLAS handle bound to that stream, a caching memory pool
//     and a pool of pinned host buffers for staging copies. A Device is
//     used by one goroutine at a time (a stage worker's). Everything is
//     queued on the one stream, in order: a copy through pinned staging
//     (UploadAsync, CopyIn, UploadStaged, DownloadStaged) returns without
//     waiting, and events (Record, then Wait) let the host wait for the
//     work queued before one and not for what came after; an upload's
//     staging buffer goes back to the pool once an event recorded after it
//     has passed, or at Sync. Pageable copies (Upload, Download, Write)
//     wait; they are for loading state, not for a step.
//  3. Every call into CUDA is checked; a failure is an *Error carrying the
//     call and CUDA's own name for the code.
//  4. Matrices are row-major, as in package tensor. Sgemm is cuBLAS SGEMM;
//     Gemm16 runs BF16 or FP16 operands with FP32 accumulation (cuBLAS
//     GemmEx, compute type 32F), converting FP32 inputs on the device;
//     Gemm16Batched the same over strided batches (GemmStridedBatchedEx);
//     GemmRounded and GemmRoundedBatched take FP32 operands, round what
//     the products read to BF16 or FP16 and run those: mixed precision's
//     matrix product, checked on the emulator against FP32 math on rounded
//     inputs. GemmTF32 and GemmTF32Batched run FP32 operands on the tensor
//     cores in TF32 (GemmEx, compute type 32F_FAST_TF32: PyTorch's
//     allow_tf32); the emulator rounds their operands to TF32.
//  5. The other kernels are CUDA C in kernels.cu, compiled by NVRTC for the
//     device's architecture at first use and cached: in memory per process
//     and as a CUBIN under the user cache directory, keyed by the source,
//     the architecture and the NVRTC version.
//  6. Backward kernels accumulate (+=) into their gradients, as the CPU
//     kernels do.
//  7. The Device counts what it asks of the driver (Counts: waits, events,
//     copies by direction and by pageable or pinned memory, launches,
//     cuBLAS calls, memsets, allocations, frees), above the backend, so the
//     emulator counts what a GPU would be asked and tests hold budgets on
//     it; OpenDry makes a Device that counts and computes nothing, to count
//     a step of a model too large for the emulator. Alloc's memory is
//     undefined (NaN on the emulator); Zeros pays a memset, for what is
//     added into. The emulator's library is built once per source into the
//     user cache directory with a sidecar of its SHA-256 and size
//     (emucache.go), and verified against it before each load: a truncated
//     or damaged one is rebuilt, never mapped.
//  8. The training step's kernels (the optimizers, the squared norms, the
//     clip, a loss's mean) compute the host's numbers of package stage
//     operation for operation: every float operation rounded on its own
//     (CUDA's _rn intrinsics; the emulator is compiled with
//     -ffp-contract=off), never fused into an FMA.
//  9. Convolutions (ConvShape: NCHW float32, PyTorch's conv2d) run
//     through cuDNN where a libcudnn (9 or 8) loads, at a device's first
//     convolution (or ConvPath): GRAPHPIPE_LIBCUDNN names the file, else
//     the loader's path, the toolkit's directories, a conda environment's
//     lib and the nvidia/cudnn/lib of a pip-installed PyTorch's wheel under
//     any Python package directory are searched (dnn.go). Where none
//     loads, or GRAPHPIPE_CONV=im2col, that is said once per process and
//     the Device has none (ConvPath "im2col": package stage runs im2col +
//     GEMM). Only cuDNN's legacy convolution API is called. Each shape's
//     plan (descriptors; per direction the first of cuDNN's _v7
//     heuristics' algorithms whose math the precision allows and whose
//     workspace fits a 32nd of the device's memory, at most 2 GiB) is made
//     once; a cuDNN call failing there drops cuDNN for the device (said
//     once, im2col then); workspaces come from the pool. FP32 runs in
//     CUDNN_FMA_MATH (no TF32), TF32 in the default math, as PyTorch's
//     cudnn.allow_tf32. The gradients are added (beta 1). Each call that
//     queues work counts in Counts.DNN. The emulator has no cuDNN, except
//     in tests, which give it a fake one (BuildFakeDNN, UseDNN) that
//     computes naively on the CPU.
//  10. Same-host transfers (ipc.go): Export is the CUDA IPC handle of the
//     allocation holding a buffer (cuIpcGetMemHandle, made once per
//     allocation) and the buffer's offset in it; CopyFromPeer opens a
//     peer's handle once (cuIpcOpenMemHandle, lazy peer access; at most 256
//     kept, the oldest closed) and copies device to device on the device's
//     copy stream, behind an event of its stream, and waits for the copy.
//     Identity and PeerIdentities (cuDeviceGetUuid, cuDeviceCanAccessPeer)
//     say which devices of a host reach each other. The emulator's device
//     memory is one shared memory file per device (memfd, mapped shared,
//     filled as written: emuarena.go), which another process of the host
//     maps through /proc/PID/fd, so the same calls work between emulated
//     processes. The exporter keeps the buffer unchanged until the
//     importer's copy is done. WaitFree waits for an event from a
//     goroutine other than the device's user, holding the device only for
//     the bookkeeping after.
//
// What is verified where: the loading, the error paths, the pool and the
// staging buffers are tested on every machine; everything that needs a GPU
// (gpu_test.go) skips with a message naming what is missing.
package cuda
