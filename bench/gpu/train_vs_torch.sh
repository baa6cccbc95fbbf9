#!/bin/sh
# graphpipe train against PyTorch eager on the same model file, initial
# weights, batches and optimizer, in fp32, tf32 (where this graphpipe takes
# --precision tf32) and bf16: graphpipe's fp32 run dumps its initial
# parameters and batches (--dump), bench/gpu/torch_step.py trains the same
# model (stage/testdata/torch/gptorch.py) from them in each precision, and
# bench/gpu/compare_train.py prints both losses per step and the ratio of
# iteration times. Run from the repository root; bench/gpu/run.sh runs it on
# a GPU. Writes train-*.json, torch-*.json and train-vs-torch.txt under $OUT
# (each name prefixed with TAG: for a MODEL file, its name and a dash).
#
# The defaults are the issue's: MMT at batch 16, Adam at lr 1e-3, 20 steps,
# on the GPU. MODEL is a zoo model's name (exported, at PRESET if set) or a
# model file (bench/gpu/resnet50.json: the imported ResNet-50, BATCH=64);
# PRECISIONS picks the precisions; GP_FLAGS adds flags to graphpipe train
# (--attention fused); TORCH_FLAGS adds flags to torch_step.py
# (--cudnn-benchmark: PyTorch's convolutions chosen by cuDNN's measured
# search, as graphpipe's are by default). To try it without a GPU:
# GP=bin/graphpipe BACKEND=cuda-emulator TORCH_DEVICE=cpu PRESET=small PYTHON=/usr/bin/python3 sh bench/gpu/train_vs_torch.sh
# GP=bin/graphpipe BACKEND=cpu TORCH_DEVICE=cpu MODEL=bench/gpu/resnet50.json BATCH=4 STEPS=3 PRECISIONS=fp32 PYTHON=/usr/bin/python3 sh bench/gpu/train_vs_torch.sh
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
OPT=${OPT:---optimizer adam --lr 0.001}
PRECISIONS=${PRECISIONS:-fp32 tf32 bf16}
mkdir -p "$OUT"
if [ -f "$MODEL" ]; then
	M=$MODEL
	TAG=${TAG-$(basename "$MODEL" .json)-}
else
	TAG=${TAG-}
	M="$OUT/$MODEL-train.json"
	if [ -n "${PRESET:-}" ]; then
		"$GP" models export "$MODEL" --preset "$PRESET" -o "$M" 2>/dev/null
	else
		"$GP" models export "$MODEL" -o "$M" 2>/dev/null
	fi
fi
precisions=""
for p in $PRECISIONS; do
	if [ "$p" = tf32 ] && ! "$GP" train --help 2>&1 | grep -q tf32; then
		echo "this graphpipe has no --precision tf32: graphpipe's tf32 run left out"
		continue
	fi
	precisions="$precisions $p"
done
case " $precisions " in
*" fp32 "*) ;;
*) precisions="fp32 $precisions" ;; # the fp32 run makes the dump PyTorch starts from
esac
rm -rf "$DUMP"
gp=""
for p in $precisions; do
	dump=""
	if [ "$p" = fp32 ]; then
		dump="--dump $DUMP"
	fi
	# shellcheck disable=SC2086 # $OPT and $dump are lists of flags
	"$GP" train "$M" --batch "$BATCH" --steps "$STEPS" $OPT ${GP_FLAGS:-} --backend "$BACKEND" --precision "$p" --json $dump >"$OUT/${TAG}train-$p.json" 2>"$OUT/${TAG}train-$p.log"
	gp="$gp --graphpipe $p=$OUT/${TAG}train-$p.json"
done
pt=""
if "$PY" -c 'import torch' 2>/dev/null; then
	for p in $PRECISIONS; do
		# shellcheck disable=SC2086
		"$PY" bench/gpu/torch_step.py "$M" "$DUMP" $OPT ${TORCH_FLAGS:-} --precision "$p" --device "$TORCH_DEVICE" --json "$OUT/${TAG}torch-$p.json" >"$OUT/${TAG}torch-$p.txt"
		pt="$pt --torch $p=$OUT/${TAG}torch-$p.json"
	done
else
	echo "PyTorch is not installed for $PY: graphpipe's losses and times alone"
fi
rm -rf "$DUMP" # its initial and final parameters: 3.5 GB for MMT; ResNet-50's batches: 38.5 MB a step at 64
# shellcheck disable=SC2086
"$PY" bench/gpu/compare_train.py $gp $pt | tee "$OUT/${TAG}train-vs-torch.txt"
