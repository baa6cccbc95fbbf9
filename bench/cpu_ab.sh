#!/bin/sh
# Two graphpipe binaries' CPU training speed, side by side: each zoo small
# preset (and, unless QUICK is set, the default mlp) trained with Adam by
# binary A and binary B in turn, ROUNDS times, GOMAXPROCS=2; prints each
# side's median samples/s (train --json's samples_per_s, which every
# graphpipe has printed) and B / A. The environment reaches both: run it
# with GRAPHPIPE_BLAS=go to set the Go kernels against an older binary's.
#
#   GRAPHPIPE_BLAS=go sh bench/cpu_ab.sh /tmp/gp-before bin/graphpipe
set -eu
A=$1
B=$2
ROUNDS=${ROUNDS:-3}
PY=${PYTHON:-python3}
DIR=$(mktemp -d)
trap 'rm -rf "$DIR"' EXIT
cases="mmt:small:30 dlrm:small:30 candle-uno:small:30 case-study:small:30 transformer:small:30 mlp:small:30"
[ -n "${QUICK:-}" ] || cases="$cases mlp::6"
rate() { # binary model steps: samples/s
	GOMAXPROCS=2 "$1" train "$2" --steps "$3" --optimizer adam --lr 0.001 --json 2>/dev/null |
		"$PY" -c 'import json, sys; print(json.load(sys.stdin)["samples_per_s"])'
}
median() { tr ' ' '\n' | sed '/^$/d' | sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
printf '%-28s %12s %12s %8s\n' model "A samples/s" "B samples/s" "B / A"
for c in $cases; do
	name=${c%%:*}
	rest=${c#*:}
	preset=${rest%%:*}
	steps=${rest#*:}
	m="$DIR/$name-$preset.json"
	if [ -n "$preset" ]; then
		"$B" models export "$name" --preset "$preset" -o "$m" 2>/dev/null
	else
		"$B" models export "$name" -o "$m" 2>/dev/null
	fi
	a="" b=""
	i=0
	while [ $i -lt "$ROUNDS" ]; do
		a="$a $(rate "$A" "$m" "$steps")"
		b="$b $(rate "$B" "$m" "$steps")"
		i=$((i + 1))
	done
	ma=$(echo "$a" | median)
	mb=$(echo "$b" | median)
	printf '%-28s %12.1f %12.1f %8.3f\n' "$name ${preset:-default}" "$ma" "$mb" "$(echo "$mb $ma" | awk '{print $1 / $2}')"
done
