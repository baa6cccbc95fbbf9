package wire_test

import (
	"context"

	"github.com/graphpipe/graphpipe/runtime/wire"
)

// The runtime's path from a stage's output to the next stage's feed, as
// runtime.Worker's send and recv take it (a stage of one replica on each
// side): the tensors framed from their own memory, the message reassembled
// in one buffer and read in place, the buffer given back when the feed
// is done with (the worker does at the end of the iteration). bench/link_ab.sh writes an older tree's
// version of this file beside BenchmarkActivationTransfer.

func sendActivation(ctx context.Context, ep *wire.Endpoint, peer int32, k wire.Key, ts []wire.Tensor) error {
	p, err := wire.TensorPayload(ts)
	if err != nil {
		return err
	}
	return ep.SendPayload(ctx, peer, k, p)
}

func receiveActivation(ctx context.Context, ep *wire.Endpoint, k wire.Key) ([]float32, func(), error) {
	msg, err := ep.Receive(ctx, k)
	if err != nil {
		return nil, nil, err
	}
	ts, err := wire.DecodeTensorsView(msg)
	if err != nil {
		return nil, nil, err
	}
	return ts[0].F32, func() { ep.Recycle(msg) }, nil
}
