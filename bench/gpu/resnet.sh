#!/bin/sh
# ResNet-50 at batch 64 on the GPU, graphpipe against PyTorch eager, with
# the checks of the ops it spends its time in: run from the repository root
# on a GPU machine after `make gpu-build` (build/gpu here; no Go needed
# there). Writes under ${OUT:-build/gpu/out}:
#   tests.txt        conv2d and batch_norm through cuDNN against the CPU
#                    kernels, and ResNet's layer1 ops timed on both paths
#   resnet50-train-vs-torch.txt   graphpipe's defaults (cuDNN's measured
#                    search picks the algorithms) against PyTorch's (its
#                    heuristics), fp32 and tf32, 10 steps
#   heuristics-resnet50-train-vs-torch.txt   graphpipe with
#                    GRAPHPIPE_CONV_ALGO=heuristics against PyTorch with
#                    cudnn.benchmark on: each side's other way of choosing
#   breakdown-*.txt  where the step goes, by op kind (breakdown.sh), for
#                    each precision in $BREAKDOWN (default fp32)
# About 3 minutes on an H200 (158 s); HEURISTICS=0 leaves the second
# comparison out.
set -eu
B=${B:-build/gpu}
OUT=${OUT:-$B/out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$OUT/gpu.txt" || true
(cd stage/internal/kernel && ../../../$B/kernel.test -test.run 'TestBatchNormDNNOnGPU|TestConvDNNOnGPU|TestConvPathsAgreeOnGPU' -test.v) >"$OUT/tests.txt" 2>&1 || true
(cd stage && ../$B/stage.test -test.run 'TestConvTimesOnGPU' -test.v) >>"$OUT/tests.txt" 2>&1 || true
$B/cuda.test -test.run 'TestConvsOnGPU' -test.v >>"$OUT/tests.txt" 2>&1 || true
grep -E '^(--- |ok|FAIL|PASS)|largest|forward .* ms' "$OUT/tests.txt" | grep -v '^    --- PASS' || true
timeout 200 env GP=$B/graphpipe OUT="$OUT" MODEL=bench/gpu/resnet50.json BATCH=64 STEPS=10 PRECISIONS="fp32 tf32" \
	sh bench/gpu/train_vs_torch.sh >"$OUT/resnet50.log" 2>&1 || true
tail -n 4 "$OUT/resnet50-train-vs-torch.txt" || true
[ "${HEURISTICS:-1}" = 1 ] && timeout 200 env GP=$B/graphpipe OUT="$OUT" TAG=heuristics-resnet50- GRAPHPIPE_CONV_ALGO=heuristics TORCH_FLAGS=--cudnn-benchmark \
	MODEL=bench/gpu/resnet50.json BATCH=64 STEPS=10 PRECISIONS="fp32 tf32" \
	sh bench/gpu/train_vs_torch.sh >"$OUT/heuristics.log" 2>&1 || true
[ "${HEURISTICS:-1}" = 1 ] && tail -n 4 "$OUT/heuristics-resnet50-train-vs-torch.txt" || true
for p in ${BREAKDOWN:-fp32}; do
	timeout 120 env B=$B OUT="$OUT" MODEL=bench/gpu/resnet50.json BATCH=64 PREC=$p sh bench/gpu/breakdown.sh >"$OUT/breakdown-$p.log" 2>&1 || true
	head -n 14 "$OUT/breakdown-resnet50-$p-graphpipe.txt" || true
done
