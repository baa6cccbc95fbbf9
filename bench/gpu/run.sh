#!/bin/sh
# The GPU checks, run on a machine with an NVIDIA GPU (CUDA 13) from the
# repository root after `make gpu-build` built build/gpu here (no Go needed
# there). Writes what it measured under ${OUT:-build/gpu/out}. Meant to
# take under 6 minutes on an H100 or H200 (not yet timed there in this
# form: graphpipe's MMT steps, at 1.4-1.7 s each on the H100, are most of
# it). QUICK=1 runs only the op and GEMM tests and the comparison with
# PyTorch eager.
set -eu
B=build/gpu
OUT=${OUT:-$B/out}
QUICK=${QUICK:-0}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$OUT/gpu.txt" || true
# every op's forward and backward on the GPU against the CPU kernels (1e-3),
# and the model@2 checks: training, evaluation, recomputation, tf32 and bf16
# GEMMs, conv2d's chunks, dropout's mask, op timing
(cd stage && ../$B/stage.test -test.run 'OnGPU' -test.v) 2>&1 | tee "$OUT/ops.txt"
# GEMMs (FP32, batched, TF32, BF16/FP16) against the naive oracle
$B/cuda.test -test.run 'GPU' -test.v 2>&1 | tee "$OUT/gemm.txt"
# graphpipe train against PyTorch eager: MMT at batch 16, Adam at lr 1e-3,
# 20 steps from the same weights and batches, in fp32, tf32 and bf16: both
# losses per step and the ratio of iteration times
GP=$B/graphpipe OUT="$OUT" sh bench/gpu/train_vs_torch.sh 2>&1 | tee "$OUT/train-vs-torch.log"
if [ "$QUICK" = 1 ]; then
	exit 0
fi
# a 2-stage run with GPU workers against the CPU run (1e-4), and the imported
# two-tower (model@2 ops: batch_norm, ...) trained on the GPU, in one process
# and as a 3-stage run, against the CPU (1e-4); from the package's directory,
# where its testdata paths hold
(cd cmd/graphpipe && ../../$B/graphpipe.test -test.run 'TestRunOnGPU|TestImportedModelOnGPU' -test.v) 2>&1 | tee "$OUT/run.txt"
# the measured profile, and a search that uses it
$B/graphpipe profile --device cuda --json > "$OUT/profile.json"
$B/graphpipe profile --device cuda -o "$OUT/gpu-profile.json" 2> "$OUT/profile.txt"
$B/graphpipe models export mmt > "$OUT/mmt.json"
$B/graphpipe search "$OUT/mmt.json" --devices 8 --device "$OUT/gpu-profile.json" | tee "$OUT/search.txt"
# the paper's MMT's own ops timed on the GPU (micro-batches 1 to 16), a
# search priced by them, and one GPU's training step against that price
$B/graphpipe profile --model "$OUT/mmt.json" --device cuda --batch 16 -o "$OUT/mmt.optimes.json" 2> "$OUT/optimes.txt"
$B/graphpipe search "$OUT/mmt.json" --devices 8 --device "$OUT/gpu-profile.json" --op-times "$OUT/mmt.optimes.json" | tee "$OUT/search-optimes.txt"
$B/graphpipe run "$OUT/mmt.json" --devices 1 --device "$OUT/gpu-profile.json" --op-times "$OUT/mmt.optimes.json" --batch 16 --backend cuda --steps 4 2>&1 | tail -1 | tee "$OUT/run-optimes.txt"
# GEMM throughput against torch.matmul, when PyTorch is there
if python3 -c 'import torch' 2>/dev/null; then
	python3 bench/gpu/compare.py "$OUT/profile.json" | tee "$OUT/compare.txt"
else
	echo "PyTorch is not installed: no torch.matmul comparison" | tee "$OUT/compare.txt"
fi
