// Package dataset reads a user's training and evaluation data: one tensor
// per model input (the loss's label included), named after the input, with
// the samples on the first axis.
//
// The contract:
//
//  1. Open takes a path: a safetensors file; a directory of safetensors
//     shards (every shard holds the same tensors, whose samples are
//     concatenated in the shards' name order); a directory of NumPy .npy
//     files (one tensor per file, named after the file); or a NumPy .npz
//     file written by np.savez (one tensor per member). float32, int32 and
//     int64 tensors are read; int64 values are converted to int32, each
//     checked to fit. Nothing but the headers is read at Open: files are
//     memory-mapped and read a batch at a time, and pages already copied
//     out are given back to the kernel once more than a budget of them has
//     been touched, so the process's resident memory stays bounded whatever
//     the dataset's size.
//  2. Check holds a Set against a model (package dag): every model input
//     present, with its per-sample shape and a dtype it can take; no tensor
//     that is not an input; every tensor with the same number of samples.
//     Each problem is one line naming the file and the tensor.
//  3. Order says which samples make each step's batch: step s of an epoch
//     of k = ⌊N/B⌋ steps reads positions [(s mod k)·B, (s mod k + 1)·B) of
//     epoch ⌊s/k⌋'s permutation of the N samples, a Fisher–Yates shuffle
//     driven by SplitMix64 from (seed, epoch) (the identity with shuffling
//     off). The last N mod B samples of an epoch are left out. A batch is a
//     function of (seed, step) and the dataset alone, never of a plan, a
//     worker count or a restart.
//  4. Read copies rows out and checks them as it goes: an int value outside
//     the input's range (an embedding's rows, a label's classes), or a
//     NaN or infinite float unless allowed, is an error naming the file, the
//     tensor and the row, returned before anything is trained on the batch.
//  5. Fingerprint hashes what identifies a Set's bytes without reading them
//     all (sizes, headers and a fixed sample of blocks of every file), so
//     that workers on other hosts can show they opened the same data.
//
// Errors a user can act on are *Error values: Path and Tensor say where,
// Row the sample (-1 when not about one).
package dataset
