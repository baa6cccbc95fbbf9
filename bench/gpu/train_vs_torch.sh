#!/bin/sh
# graphpipe train against PyTorch eager on the same model file, initial
# weights, batches and optimizer, in fp32, tf32 (where this graphpipe takes
# --precision tf32) and bf16: graphpipe's fp32 run dumps its initial
# parameters and batches (--dump), bench/gpu/torch_step.py trains the same
# model (stage/testdata/torch/gptorch.py) from them in each precision, and
# bench/gpu/compare_train.py prints both losses per step and the ratio of
# iteration times. Run from the repository root; bench/gpu/run.sh runs it on
# a GPU. Writes train-*.json, torch-*.json and train-vs-torch.txt under $OUT.
#
# The defaults are the issue's: MMT at batch 16, Adam at lr 1e-3, 20 steps,
# on the GPU. To try it without one: GP=bin/graphpipe BACKEND=cuda-emulator
# TORCH_DEVICE=cpu PRESET=small PYTHON=/usr/bin/python3 sh bench/gpu/train_vs_torch.sh
set -eu
GP=${GP:-build/gpu/graphpipe}
OUT=${OUT:-build/gpu/out}
BACKEND=${BACKEND:-cuda}
TORCH_DEVICE=${TORCH_DEVICE:-cuda}
PY=${PYTHON:-python3}
MODEL=${MODEL:-mmt}
BATCH=${BATCH:-16}
STEPS=${STEPS:-20}
DUMP=${DUMP:-${TMPDIR:-/tmp}/graphpipe-train-vs-torch}
OPT="--optimizer adam --lr 0.001"
mkdir -p "$OUT"
M="$OUT/$MODEL-train.json"
if [ -n "${PRESET:-}" ]; then
	"$GP" models export "$MODEL" --preset "$PRESET" -o "$M" 2>/dev/null
else
	"$GP" models export "$MODEL" -o "$M" 2>/dev/null
fi
precisions="fp32 bf16"
if "$GP" train --help 2>&1 | grep -q tf32; then
	precisions="fp32 tf32 bf16"
else
	echo "this graphpipe has no --precision tf32: graphpipe's tf32 run left out"
fi
rm -rf "$DUMP"
gp=""
for p in $precisions; do
	dump=""
	if [ "$p" = fp32 ]; then
		dump="--dump $DUMP"
	fi
	# shellcheck disable=SC2086 # $OPT and $dump are lists of flags
	"$GP" train "$M" --batch "$BATCH" --steps "$STEPS" $OPT --backend "$BACKEND" --precision "$p" --json $dump >"$OUT/train-$p.json" 2>"$OUT/train-$p.log"
	gp="$gp --graphpipe $p=$OUT/train-$p.json"
done
pt=""
if "$PY" -c 'import torch' 2>/dev/null; then
	for p in fp32 tf32 bf16; do
		# shellcheck disable=SC2086
		"$PY" bench/gpu/torch_step.py "$M" "$DUMP" $OPT --precision "$p" --device "$TORCH_DEVICE" --json "$OUT/torch-$p.json" >"$OUT/torch-$p.txt"
		pt="$pt --torch $p=$OUT/torch-$p.json"
	done
else
	echo "PyTorch is not installed for $PY: graphpipe's losses and times alone"
fi
rm -rf "$DUMP" # its initial and final parameters: 3.5 GB for MMT
# shellcheck disable=SC2086
"$PY" bench/gpu/compare_train.py $gp $pt | tee "$OUT/train-vs-torch.txt"
