#!/bin/sh
# The time to move an MMT activation (16.8 MB) from one worker's stage to
# the next over NATS, before and after: runtime/wire's
# BenchmarkActivationTransfer built in an older tree (BEFORE, a commit:
# default main's merge base with HEAD; its shim, the old runtime.Worker's
# send and recv, written here) and in this one, run in turn ROUNDS times
# with N messages each, interleaved with raw NATS publish→subscribe of the
# same bytes (message by message in turn with each side's path). Prints
# each side's median milliseconds per activation, before / after and after
# / raw; with EMULATOR set, the IPC path's time on the CUDA emulator beside
# them (runtime's BenchmarkIPCTransfer).
#
#   sh bench/link_ab.sh            # main's merge base against HEAD
#   ROUNDS=9 sh bench/link_ab.sh v0.9
set -eu
ROOT=$(git rev-parse --show-toplevel)
BEFORE=${1:-$(git merge-base HEAD main)}
ROUNDS=${ROUNDS:-5}
N=${N:-10}
DIR=$(mktemp -d)
trap 'rm -rf "$DIR"' EXIT
mkdir "$DIR/before"
git -C "$ROOT" archive "$BEFORE" | tar -x -C "$DIR/before"
cp "$ROOT/runtime/wire/transfer_bench_test.go" "$DIR/before/runtime/wire/"
cat >"$DIR/before/runtime/wire/transfer_shim_test.go" <<'GO'
package wire_test

import (
	"context"

	"github.com/graphpipe/graphpipe/runtime/wire"
)

// The old runtime.Worker's send and recv: EncodeTensors, Send; Receive,
// DecodeTensors and the rows placed into the feed.

func sendActivation(ctx context.Context, ep *wire.Endpoint, peer int32, k wire.Key, ts []wire.Tensor) error {
	payload, err := wire.EncodeTensors(ts)
	if err != nil {
		return err
	}
	return ep.Send(ctx, peer, k, payload)
}

func receiveActivation(ctx context.Context, ep *wire.Endpoint, k wire.Key) ([]float32, func(), error) {
	msg, err := ep.Receive(ctx, k)
	if err != nil {
		return nil, nil, err
	}
	ts, err := wire.DecodeTensors(msg)
	if err != nil {
		return nil, nil, err
	}
	feed := make([]float32, len(ts[0].F32))
	copy(feed, ts[0].F32)
	return feed, func() {}, nil
}
GO
(cd "$DIR/before" && go test -c -o "$DIR/before.test" ./runtime/wire)
(cd "$ROOT" && go test -c -o "$DIR/after.test" ./runtime/wire)
if [ -n "${EMULATOR:-}" ]; then
	(cd "$ROOT" && go test -c -o "$DIR/ipc.test" ./runtime)
fi
metric() { # binary name: the benchmark's median of that metric
	"$1" -test.run '^$' -test.bench 'ActivationTransfer$' -test.benchtime "${N}x" 2>/dev/null |
		awk -v m="$2" '/ActivationTransfer/ {for (i = 1; i < NF; i++) if ($(i + 1) == m) print $i}'
}
ipc() {
	"$DIR/ipc.test" -test.run '^$' -test.bench 'IPCTransfer$' -test.benchtime "${N}x" 2>/dev/null |
		awk '/ns\/op/ {printf "%.3f\n", $3 / 1e6}'
}
median() { sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
for f in b a r q i; do : >"$DIR/$f"; done
i=0
while [ $i -lt "$ROUNDS" ]; do
	metric "$DIR/before.test" link-ms >>"$DIR/b"
	"$DIR/after.test" -test.run '^$' -test.bench 'ActivationTransfer$' -test.benchtime "${N}x" 2>/dev/null >"$DIR/out"
	awk '/ActivationTransfer/ {for (i = 1; i < NF; i++) if ($(i + 1) == "link-ms") print $i}' "$DIR/out" >>"$DIR/a"
	awk '/ActivationTransfer/ {for (i = 1; i < NF; i++) if ($(i + 1) == "raw-ms") print $i}' "$DIR/out" >>"$DIR/r"
	awk '/ActivationTransfer/ {for (i = 1; i < NF; i++) if ($(i + 1) == "link/raw") print $i}' "$DIR/out" >>"$DIR/q"
	[ -z "${EMULATOR:-}" ] || ipc >>"$DIR/i"
	i=$((i + 1))
done
b=$(median <"$DIR/b")
a=$(median <"$DIR/a")
r=$(median <"$DIR/r")
echo "activation 16.8 MB, $ROUNDS rounds of $N, load $(cut -d' ' -f1-3 /proc/loadavg), before = $BEFORE"
printf '%-34s %10s\n' path "ms (median)"
printf '%-34s %10.2f\n' "NATS, before" "$b" "NATS, after" "$a" "raw NATS publish→subscribe" "$r"
[ -z "${EMULATOR:-}" ] || printf '%-34s %10.2f\n' "IPC on the CUDA emulator" "$(median <"$DIR/i")"
echo "before / after: $(echo "$b $a" | awk '{printf "%.2f", $1 / $2}')   after / raw: $(median <"$DIR/q") (median of each round's, the two taking turns message by message)"
