#!/bin/sh
# Two graphpipe binaries' search time on issue 34's cases, side by side:
# each case searched by binary A and binary B in turn, ROUNDS times (3 by
# default), each search a process of its own; prints each side's median
# wall and user seconds (/usr/bin/time), A / B, and both plans' predicted
# samples/s (search --json), which must be equal or B's faster.
#
#   sh bench/search_ab.sh /tmp/gp-before bin/graphpipe [DIR]
#
# DIR holds googlenet.json and resnet50.json as bench/torchvision/export.sh
# writes them (Python and torchvision needed); without them those two cases
# are skipped with a word.
set -eu
A=$1
B=$2
IMPORTED=${3:-}
ROUNDS=${ROUNDS:-3}
PY=${PYTHON:-python3}
DIR=$(mktemp -d)
trap 'rm -rf "$DIR"' EXIT
"$B" models export dlrm --branches 32 -o "$DIR/dlrm32.json" >/dev/null 2>&1
"$B" models export dlrm --branches 64 -o "$DIR/dlrm64.json" >/dev/null 2>&1
"$B" models export mmt --batch 512 -o "$DIR/mmt512.json" >/dev/null 2>&1
cases="dlrm32-32:$DIR/dlrm32.json:32: dlrm32-64:$DIR/dlrm32.json:64: dlrm32-128:$DIR/dlrm32.json:128:
dlrm64-sgd-64:$DIR/dlrm64.json:64:sgd mmt512-32:$DIR/mmt512.json:32:"
for m in googlenet resnet50; do
	if [ -n "$IMPORTED" ] && [ -s "$IMPORTED/$m.json" ]; then
		cases="$cases $m-b32-32:$IMPORTED/$m.json:32:"
	else
		echo "$m: skipped (no $m.json in '${IMPORTED}'; bench/torchvision/export.sh writes it)"
	fi
done
median() { tr ' ' '\n' | sed '/^$/d' | sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
sps() { "$PY" -c 'import json, sys; print("%.6g" % json.load(open(sys.argv[1]))["samples_per_s"])' "$1"; }
printf '%-16s %9s %9s %7s %9s %9s %7s %12s %12s\n' case "A wall s" "B wall s" "A / B" "A user s" "B user s" "A / B" "A samples/s" "B samples/s"
for c in $cases; do
	name=${c%%:*}
	rest=${c#*:}
	model=${rest%%:*}
	rest=${rest#*:}
	devices=${rest%%:*}
	opt=${rest#*:}
	set -- "$model" --devices "$devices" --device v100 --json
	[ -z "$opt" ] || set -- "$@" --optimizer "$opt"
	aw="" au="" bw="" bu=""
	i=0
	while [ $i -lt "$ROUNDS" ]; do
		for side in A B; do
			bin=$A
			[ $side = A ] || bin=$B
			/usr/bin/time -f "%e %U" -o "$DIR/time" "$bin" search "$@" >"$DIR/$side.json"
			read -r w u <"$DIR/time"
			if [ $side = A ]; then aw="$aw $w" au="$au $u"; else bw="$bw $w" bu="$bu $u"; fi
		done
		i=$((i + 1))
	done
	w1=$(echo "$aw" | median) w2=$(echo "$bw" | median) u1=$(echo "$au" | median) u2=$(echo "$bu" | median)
	printf '%-16s %9s %9s %7.2f %9s %9s %7.2f %12s %12s\n' "$name" "$w1" "$w2" "$(echo "$w1 $w2" | awk '{print $1 / $2}')" \
		"$u1" "$u2" "$(echo "$u1 $u2" | awk '{print $1 / $2}')" "$(sps "$DIR/A.json")" "$(sps "$DIR/B.json")"
done
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores"
