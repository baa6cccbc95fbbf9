#!/bin/sh
# Where a training step's time goes, graphpipe against PyTorch eager, for
# one model file on the GPU: graphpipe's op times (profile --model, each
# op timed alone) summed by op kind at the batch, beside torch.profiler's
# table of one PyTorch step of the same model, batch and optimizer. Run
# from the repository root on a GPU machine after `make gpu-build`:
#   MODEL=bench/gpu/resnet50.json BATCH=64 sh bench/gpu/breakdown.sh
# Writes breakdown-*.txt under $OUT.
set -eu
B=${B:-build/gpu}
OUT=${OUT:-$B/out}
MODEL=${MODEL:-bench/gpu/resnet50.json}
BATCH=${BATCH:-64}
PREC=${PREC:-fp32}
PY=${PYTHON:-python3}
tag=$(basename "$MODEL" .json)-$PREC
mkdir -p "$OUT"
"$B/graphpipe" profile --model "$MODEL" --device cuda --batch "$BATCH" --quick -o "$OUT/$tag.optimes.json" 2>"$OUT/$tag.optimes.log"
"$PY" - "$MODEL" "$OUT/$tag.optimes.json" "$BATCH" <<'PY' | tee "$OUT/breakdown-$tag-graphpipe.txt"
import collections, json, sys
model, times, batch = json.load(open(sys.argv[1])), json.load(open(sys.argv[2])), int(sys.argv[3])
kind = {o["name"]: o["op"] for o in model["ops"]}
by = collections.defaultdict(lambda: [0.0, 0.0, 0.0, 0])
for name, s in times["ops"].items():
    i = s["micro_batch"].index(batch) if batch in s["micro_batch"] else -1
    k = by[kind.get(name, "?")]
    k[0] += s["forward_s"][i]; k[1] += s["input_grad_s"][i]; k[2] += s["weight_grad_s"][i]; k[3] += 1
total = sum(sum(v[:3]) for v in by.values())
print("graphpipe op times at micro-batch %d (each op timed alone), by kind, ms:" % batch)
print("%-24s %5s %9s %9s %9s %9s %6s" % ("kind", "ops", "forward", "in-grad", "w-grad", "all", "share"))
for k, v in sorted(by.items(), key=lambda kv: -sum(kv[1][:3])):
    a = sum(v[:3])
    print("%-24s %5d %9.3f %9.3f %9.3f %9.3f %5.1f%%" % (k, v[3], 1e3 * v[0], 1e3 * v[1], 1e3 * v[2], 1e3 * a, 100 * a / total))
print("%-24s %5s %9s %9s %9s %9.3f" % ("all ops", "", "", "", "", 1e3 * total))
PY
# PyTorch: the same model from graphpipe's dump (weights, batches), 4
# steps, then one step profiled
rm -rf "$OUT/dump-$tag"
flag=""
[ "$PREC" != fp32 ] && flag="--precision $PREC"
"$B/graphpipe" train "$MODEL" --backend cuda --batch "$BATCH" --steps 4 --optimizer adam --lr 0.001 $flag \
	--dump "$OUT/dump-$tag" --json >"$OUT/$tag.train.json" 2>"$OUT/$tag.train.log"
"$PY" bench/gpu/torch_step.py "$MODEL" "$OUT/dump-$tag" --optimizer adam --lr 0.001 --precision "$PREC" \
	--profile "$OUT/breakdown-$tag-torch.txt" >"$OUT/$tag.torch.log" 2>&1
grep -h 'median' "$OUT/$tag.torch.log" || true
head -n 48 "$OUT/breakdown-$tag-torch.txt"
rm -rf "$OUT/dump-$tag"
