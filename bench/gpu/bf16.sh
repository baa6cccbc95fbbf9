#!/bin/sh
# The bf16 side by side (issue 47), one call on a machine with an NVIDIA GPU
# (CUDA 13, PyTorch) from the repository root after `make gpu-build` built
# build/gpu here: graphpipe train --precision bf16 against PyTorch eager
# under torch.autocast(bfloat16), same weights, batches and optimizer
# (bench/gpu/train_vs_torch.sh), on
#   - MMT at batch 16,
#   - the imported ResNet-50 at batch 64,
#   - a GPT-style transformer (12 layers, hidden 1024, sequence 1024) at the
#     largest batch graphpipe's planner fits on one of these GPUs in bf16;
# then a 1-stage bf16 run of the transformer (graphpipe run --json: measured
# against predicted iteration time), and each model's model FLOPs
# utilisation: its forward and backward FLOPs per sample (graphpipe
# inspect) × samples/s over the GPU's dense bf16 peak (989 TFLOP/s on an
# H100 or H200). Writes under ${OUT:-build/gpu/out/bf16}; bench/gpu/
# results/ keeps what a run printed. Meant to take under 8 minutes: each
# part is cut off (timeout) so that the rest runs.
#
# To try it without a GPU (the emulator, PyTorch on the CPU, tiny sizes):
# GP=bin/graphpipe BACKEND=cuda-emulator TORCH_DEVICE=cpu SMALL=1 PYTHON=/usr/bin/python3 sh bench/gpu/bf16.sh
set -eu
B=build/gpu
GP=${GP:-$B/graphpipe}
OUT=${OUT:-$B/out/bf16}
PY=${PYTHON:-python3}
BACKEND=${BACKEND:-cuda}
TORCH_DEVICE=${TORCH_DEVICE:-cuda}
PEAK=${PEAK:-989e12}
SMALL=${SMALL:-0}
export GP OUT PYTHON="$PY" BACKEND TORCH_DEVICE
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv >"$OUT/gpu.txt" 2>&1 || echo "no nvidia-smi" >"$OUT/gpu.txt"
cat "$OUT/gpu.txt"

steps=20 mmt_batch=16 resnet_batch=64 layers=12 hidden=1024 seq=1024 heads=16 preset=""
if [ "$SMALL" = 1 ]; then
	steps=3 mmt_batch=4 resnet_batch=2 layers=2 hidden=64 seq=32 heads=4 preset=small
fi

# mfu NAME MODEL RESULT: model FLOPs utilisation of graphpipe's and
# PyTorch's bf16 runs, from the model's FLOPs per sample and each run's
# iteration time (RESULT: train_vs_torch.sh's train-bf16.json, torch-bf16.json)
mfu() {
	"$GP" inspect "$2" --json >"$OUT/$1-inspect.json"
	"$PY" - "$1" "$OUT/$1-inspect.json" "$OUT/$1-train-bf16.json" "$OUT/$1-torch-bf16.json" "$PEAK" <<'EOF' | tee -a "$OUT/mfu.txt"
import json, statistics, sys
name, inspect, gp, pt, peak = sys.argv[1], json.load(open(sys.argv[2])), sys.argv[3], sys.argv[4], float(sys.argv[5])
flops = inspect["fwd_flops_per_sample"] + inspect["bwd_flops_per_sample"]
def seconds(path, key):
    try:
        d = json.load(open(path))
    except (OSError, ValueError):
        return None, None
    per = d.get(key)
    if isinstance(per, list) and per:
        return statistics.median(per[2:] or per), d.get("batch_size")
    return None, None
for who, path, key in (("graphpipe", gp, "iteration_s"), ("PyTorch", pt, "iteration_s")):
    s, batch = seconds(path, key)
    if s is None or not batch:
        print("%s %s bf16: no result in %s" % (name, who, path))
        continue
    print("%s %s bf16: batch %d, %.4g s an iteration, %.4g samples/s, model FLOPs utilisation %.3f (%.4g FLOPs a sample, peak %.4g)"
          % (name, who, batch, s, batch / s, flops * batch / s / peak, flops, peak))
EOF
}

# MMT and ResNet-50: bf16 beside PyTorch's autocast (fp32 runs first: it
# makes the dump both sides start from)
timeout 150 env MODEL=mmt BATCH="$mmt_batch" STEPS="$steps" PRECISIONS=bf16 TAG=mmt- PRESET="$preset" \
	sh bench/gpu/train_vs_torch.sh >"$OUT/mmt.log" 2>&1 || echo "mmt: cut off or failed (see $OUT/mmt.log)"
tail -n 8 "$OUT/mmt.log"
mfu mmt "$OUT/mmt-train.json" || true
if [ -f bench/gpu/resnet50.json ]; then
	timeout 150 env MODEL=bench/gpu/resnet50.json BATCH="$resnet_batch" STEPS="$steps" PRECISIONS=bf16 TAG=resnet50- \
		sh bench/gpu/train_vs_torch.sh >"$OUT/resnet50.log" 2>&1 || echo "resnet50: cut off or failed (see $OUT/resnet50.log)"
	tail -n 8 "$OUT/resnet50.log"
	mfu resnet50 bench/gpu/resnet50.json || true
fi

# the GPT-style transformer: the largest batch (a power of two, from 64
# down) whose bf16 plan on one GPU holds the whole batch in one stage
gpt="$OUT/gpt.json"
batch=0
for b in 64 32 16 8 4 2 1; do
	"$GP" models export transformer --layers "$layers" --hidden "$hidden" --ffn $((4 * hidden)) --seq "$seq" --heads "$heads" \
		--vocab 32000 --batch "$b" -o "$gpt" >/dev/null 2>&1
	if "$GP" search "$gpt" --devices 1 --device h100 --precision bf16 --json >"$OUT/gpt-search.json" 2>/dev/null; then
		batch=$b
		break
	fi
done
echo "GPT-style transformer ($layers layers, hidden $hidden, sequence $seq): largest batch planned on one GPU in bf16: $batch" | tee "$OUT/gpt.txt"
if [ "$batch" -gt 0 ]; then
	timeout 200 env MODEL="$gpt" BATCH="$batch" STEPS="$steps" PRECISIONS=bf16 TAG=gpt- \
		sh bench/gpu/train_vs_torch.sh >"$OUT/gpt.log" 2>&1 || echo "gpt: cut off or failed (see $OUT/gpt.log)"
	tail -n 8 "$OUT/gpt.log"
	mfu gpt "$gpt" || true
	# the same with attention fused (its scores never stored, on the CUDA cores)
	timeout 150 env MODEL="$gpt" BATCH="$batch" STEPS="$steps" PRECISIONS=bf16 TAG=gpt-fused- GP_FLAGS="--attention fused" \
		sh bench/gpu/train_vs_torch.sh >"$OUT/gpt-fused.log" 2>&1 || echo "gpt, fused attention: cut off or failed (see $OUT/gpt-fused.log)"
	tail -n 4 "$OUT/gpt-fused.log"
	mfu gpt-fused "$gpt" || true
	# a 1-stage bf16 run: measured against the plan's prediction
	timeout 120 "$GP" run "$gpt" --devices 1 --device h100 --backend "$BACKEND" --precision bf16 --steps "$steps" --json \
		>"$OUT/gpt-run.json" 2>"$OUT/gpt-run.log" || echo "gpt run: cut off or failed (see $OUT/gpt-run.log)"
	"$PY" - "$OUT/gpt-run.json" <<'EOF' | tee -a "$OUT/gpt.txt"
import json, sys
try:
    r = json.load(open(sys.argv[1]))
except (OSError, ValueError) as e:
    sys.exit("GPT 1-stage bf16 run: no result (%s)" % e)
m, p = r.get("measured_iteration_s") or 0, r.get("predicted_iteration_s") or 0
print("GPT 1-stage bf16 run: %.4g s measured, %.4g s predicted, measured / predicted %.3f" % (m, p, m / p if p else float("nan")))
EOF
fi
