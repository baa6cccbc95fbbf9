#!/bin/sh
# Two graphpipe binaries' real CPU runs, side by side: each zoo small preset
# (mmt, dlrm, candle-uno) planned once for WORKERS CPU workers (2 by
# default) from a profile of this machine and the model's op times, taken
# by binary B, then trained by binary A and binary B in turn, ROUNDS times
# (4 by default), STEPS steps each (300); prints each side's
# measured_iteration_s per round and their medians, and the plan's
# prediction. Both run the same plan, so only the runtime differs.
#
#   sh bench/runs_ab.sh /tmp/gp-before bin/graphpipe
set -eu
A=$1
B=$2
ROUNDS=${ROUNDS:-4}
STEPS=${STEPS:-300}
WORKERS=${WORKERS:-2}
PY=${PYTHON:-python3}
DIR=$(mktemp -d)
trap 'rm -rf "$DIR"' EXIT
"$B" profile -o "$DIR/cpu.json" >/dev/null 2>&1
median() { tr ' ' '\n' | sed '/^$/d' | sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
field() { "$PY" -c 'import json, sys; print("%.3f" % (1e3 * json.load(sys.stdin)[sys.argv[1]]))' "$1"; }
printf '%-18s %-8s %s\n' model side "ms per iteration (rounds), median"
for m in mmt dlrm candle-uno; do
	"$B" models export "$m" --preset small -o "$DIR/$m.json" >/dev/null 2>&1
	"$B" profile --model "$DIR/$m.json" -o "$DIR/$m.optimes.json" >/dev/null 2>&1
	"$B" search "$DIR/$m.json" --devices "$WORKERS" --device "$DIR/cpu.json" --op-times "$DIR/$m.optimes.json" -o "$DIR/$m.plan.json" >/dev/null 2>&1
	a="" b="" pred=""
	i=0
	while [ $i -lt "$ROUNDS" ]; do
		"$A" run "$DIR/$m.plan.json" --model "$DIR/$m.json" --steps "$STEPS" --json >"$DIR/a.json" 2>/dev/null
		"$B" run "$DIR/$m.plan.json" --model "$DIR/$m.json" --steps "$STEPS" --json >"$DIR/b.json" 2>/dev/null
		a="$a $(field measured_iteration_s <"$DIR/a.json")"
		b="$b $(field measured_iteration_s <"$DIR/b.json")"
		pred=$(field predicted_iteration_s <"$DIR/b.json")
		i=$((i + 1))
	done
	printf '%-18s %-8s %s, %s\n' "$m small" A "$a" "$(echo "$a" | median)"
	printf '%-18s %-8s %s, %s (predicted %s)\n' "$m small" B "$b" "$(echo "$b" | median)" "$pred"
done
echo "$WORKERS workers; load average: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores"
