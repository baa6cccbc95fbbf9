#!/bin/sh
# The GPU checks, run on a machine with an NVIDIA GPU (CUDA 13) from the
# repository root after `make gpu-build` built build/gpu here (no Go needed
# there). Writes what it measured under ${OUT:-build/gpu/out}. Meant to
# take about 5 minutes on an H100 or H200 (143.5 s on an H200 before
# the ResNet-50 comparison was added, which is cut off at 180 s; the
# same-host links' section adds four short MMT runs). QUICK=1
# runs only the op and GEMM tests, the step contract, the comparisons with
# PyTorch eager (MMT, ResNet-50) and the device-call budgets of MMT's steps.
set -eu
B=build/gpu
OUT=${OUT:-$B/out}
QUICK=${QUICK:-0}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$OUT/gpu.txt" || true
# where cuDNN is on this machine, and which libcudnn graphpipe opened
# unaided (the op tests below say so); the ResNet-50 comparison then
# names the one found here in GRAPHPIPE_LIBCUDNN, with the other NVIDIA
# wheels' lib directories beside it on the loader's path (cuDNN's engines
# need cuBLASLt and NVRTC), so that it runs through cuDNN where any is here
dnn=${GRAPHPIPE_LIBCUDNN:-$(find /usr/local/cuda/lib64 /usr/lib/x86_64-linux-gnu /opt /usr/local/lib /usr/lib/python3 \
	-name 'libcudnn.so.9' 2>/dev/null | head -n 1)}
echo "libcudnn found: ${dnn:-none}" | tee "$OUT/cudnn.txt"
# every op's forward and backward on the GPU against the CPU kernels (1e-3),
# and the model@2 checks: training, evaluation, recomputation, tf32 and bf16
# GEMMs, conv2d's chunks, dropout's mask, op timing; conv2d through cuDNN
# in fp32 and tf32 (TestConvDNNOnGPU: skipped, saying why, where no cuDNN
# loads), and ResNet-50's layer1 3x3 and 1x1 convolutions and batch norm
# timed through cuDNN and im2col (TestConvTimesOnGPU)
(cd stage/internal/kernel && ../../../$B/kernel.test -test.run 'OnGPU' -test.v) 2>&1 | tee "$OUT/ops.txt"
(cd stage && ../$B/stage.test -test.run 'OnGPU' -test.v) 2>&1 | tee -a "$OUT/ops.txt"
# the step's contract on the GPU: EndStep and ApplyStep against the host's
# primitives (the device's norms, finite check, clip and optimizer), the
# report before clipping, a skip undone, failures named
(cd stage && ../$B/stage.test -test.run '^TestBackendStepContract$/^cuda$' -test.v) 2>&1 | tee "$OUT/step.txt"
# GEMMs (FP32, batched, TF32, BF16/FP16) and cuDNN's convolutions (FP32,
# TF32) against the naive oracle
$B/cuda.test -test.run 'GPU' -test.v 2>&1 | tee "$OUT/gemm.txt"
# graphpipe train against PyTorch eager: MMT at batch 16, Adam at lr 1e-3,
# 20 steps from the same weights and batches, in fp32, tf32 and bf16: both
# losses per step and the ratio of iteration times
GP=$B/graphpipe OUT="$OUT" sh bench/gpu/train_vs_torch.sh 2>&1 | tee "$OUT/train-vs-torch.log"
# what a steady-state step of MMT at batch 16 asked of the GPU (the fp32
# run's last step, train --json's device_calls), held to the budgets the
# emulator holds in CI: at most 2 waits, no allocation, no pageable copy
tr -d ' \n' <"$OUT/train-fp32.json" | grep -o '"device_calls":{[^}]*}' | tee "$OUT/device-calls.txt"
tr ',{}' '\n\n\n' <"$OUT/device-calls.txt" | awk -F: '
	{ gsub(/"/, "", $1); v[$1] = $2 }
	END {
		bad = v["syncs"] > 2 || v["allocs"] > 0 || v["host_allocs"] > 0 || v["pageable_copies"] > 0
		printf "MMT batch 16, a step: %d waits, %d bytes up, %d down, %d pageable copies, %d allocations: %s\n",
			v["syncs"], v["h2d_bytes"], v["d2h_bytes"], v["pageable_copies"], v["allocs"] + v["host_allocs"], bad ? "OVER BUDGET" : "within budget"
	}' | tee -a "$OUT/device-calls.txt"
# the imported ResNet-50 (bench/gpu/resnet50.json: torchvision's, imported
# from ONNX) at batch 64 against PyTorch eager, Adam at lr 1e-3, 10 steps
# from the same weights and batches, fp32 and tf32 (resnet50-*.json and
# resnet50-train-vs-torch.txt); cut off after 180 s, so that the script stays near 5 minutes
if [ -n "$dnn" ] && [ -z "${GRAPHPIPE_LIBCUDNN:-}" ]; then
	wheels=$(dirname "$(dirname "$(dirname "$dnn")")")
	for d in "$wheels"/*/lib "$wheels"/cu13/lib; do
		[ -d "$d" ] && LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$d"
	done
	export GRAPHPIPE_LIBCUDNN="$dnn" LD_LIBRARY_PATH
	echo "GRAPHPIPE_LIBCUDNN=$dnn LD_LIBRARY_PATH=$LD_LIBRARY_PATH" | tee -a "$OUT/cudnn.txt"
fi
timeout 180 env GP=$B/graphpipe OUT="$OUT" MODEL=bench/gpu/resnet50.json BATCH=64 STEPS=10 PRECISIONS="fp32 tf32" \
	sh bench/gpu/train_vs_torch.sh 2>&1 | tee "$OUT/resnet50-train-vs-torch.log" || true
# how graphpipe's convolutions ran there (cuDNN, or im2col + GEMM and why)
grep -h 'conv2d' "$OUT"/resnet50-train-*.log 2>/dev/null | sort | uniq -c | tee "$OUT/resnet50-conv.txt" || true
if [ "$QUICK" = 1 ]; then
	exit 0
fi
# a 2-stage run with GPU workers against the CPU run (1e-4), and the imported
# two-tower (model@2 ops: batch_norm, ...) trained on the GPU, in one process
# and as a 3-stage run, against the CPU (1e-4); from the package's directory,
# where its testdata paths hold
# the device-call budgets of mmt-small's and the two-tower's steps on the
# GPU (as on the emulator: at most 2 waits, no allocation, no pageable copy,
# the bytes of a wider model's step)
(cd cmd/graphpipe && ../../$B/graphpipe.test -test.run 'TestRunOnGPU|TestImportedModelOnGPU|TestDeviceCallBudgetsOnGPU' -test.v) 2>&1 | tee "$OUT/run.txt"
# the measured profile, and a search that uses it
$B/graphpipe profile --device cuda --json > "$OUT/profile.json"
$B/graphpipe profile --device cuda -o "$OUT/gpu-profile.json" 2> "$OUT/profile.txt"
$B/graphpipe models export mmt > "$OUT/mmt.json"
$B/graphpipe search "$OUT/mmt.json" --devices 8 --device "$OUT/gpu-profile.json" | tee "$OUT/search.txt"
# the paper's MMT's own ops timed on the GPU (micro-batches 1 to 16), a
# search priced by them, and one GPU's training step against that price
$B/graphpipe profile --model "$OUT/mmt.json" --device cuda --batch 16 -o "$OUT/mmt.optimes.json" 2> "$OUT/optimes.txt"
$B/graphpipe search "$OUT/mmt.json" --devices 8 --device "$OUT/gpu-profile.json" --op-times "$OUT/mmt.optimes.json" | tee "$OUT/search-optimes.txt"
# (measured against predicted, and the prediction with the step's device
# calls priced, profile.EstimateIteration)
$B/graphpipe run "$OUT/mmt.json" --devices 1 --device "$OUT/gpu-profile.json" --op-times "$OUT/mmt.optimes.json" --batch 16 --backend cuda --steps 4 2>&1 | tail -1 | tee "$OUT/run-optimes.txt"
# and priced by the built-in h100 profile, the one the estimate's test uses
$B/graphpipe run "$OUT/mmt.json" --devices 1 --device h100 --batch 16 --backend cuda --steps 4 2>&1 | tail -1 | tee "$OUT/run-h100.txt"
# same-host links (not yet run on a GPU when written): the IPC copy's
# bandwidth between two processes on one GPU (TestIPCOnGPU: a 16.8 MB
# activation copied through its CUDA IPC handle), and MMT at batch 16 as a
# 2- and a 3-stage pipeline with every worker on GPU 0, priced by this
# GPU's measured profile and op times: run --json's edges say ipc on each
# edge, and the measured iteration stands beside the predicted one; the
# same with --no-ipc (bytes over NATS) for the links' share
$B/cuda.test -test.run '^TestIPCOnGPU$' -test.v 2>&1 | tee "$OUT/ipc-copy.txt"
# (the workers time-slice the one GPU, and run prices them so: a pipeline
# on one GPU is no faster than its whole work; --memory-gb 7 and 5, which
# no single stage holding the whole model meets, make the planner cut MMT
# into 2 and 3 stages instead of replicating it)
for st in 2 3; do
	mem=7
	[ "$st" = 3 ] && mem=5
	for how in ipc nats; do
		flag=""
		[ "$how" = nats ] && flag="--no-ipc"
		$B/graphpipe run "$OUT/mmt.json" --devices "$st" --memory-gb "$mem" --device "$OUT/gpu-profile.json" --op-times "$OUT/mmt.optimes.json" --batch 16 \
			--backend cuda --gpus 0 --steps 6 $flag --json >"$OUT/ipc-mmt-$st-$how.json" 2>"$OUT/ipc-mmt-$st-$how.log" || true
		if command -v python3 >/dev/null; then
			python3 - "$OUT/ipc-mmt-$st-$how.json" "$st" "$how" <<'PY' | tee -a "$OUT/ipc-mmt.txt"
import json, sys
try:
    r = json.load(open(sys.argv[1]))
except Exception as e:
    print("MMT batch 16, %s stages on one GPU, %s: no result (%s)" % (sys.argv[2], sys.argv[3], e)); sys.exit()
m, p = r["measured_iteration_s"], r["predicted_iteration_s"]
edges = ", ".join("%d->%d %s %.3g MB %.3g ms" % (e["from"], e["to"], e["transport"], e["bytes"] / 1e6, 1e3 * e["measured_s"]) for e in r.get("edges", []))
print("MMT batch 16, %d stages (%s workers) on one GPU, %s: %.4g s measured, %.4g s predicted, measured / predicted %.3f; edges: %s" % (r["stages"], sys.argv[2], sys.argv[3], m, p, m / p, edges))
PY
		fi
	done
done
# GEMM throughput against torch.matmul, when PyTorch is there
if python3 -c 'import torch' 2>/dev/null; then
	python3 bench/gpu/compare.py "$OUT/profile.json" | tee "$OUT/compare.txt"
else
	echo "PyTorch is not installed: no torch.matmul comparison" | tee "$OUT/compare.txt"
fi
