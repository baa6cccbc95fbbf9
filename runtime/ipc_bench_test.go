package runtime

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/graphpipe/graphpipe/runtime/wire"
	"github.com/graphpipe/graphpipe/tensor/cuda"
)

// BenchmarkIPCTransfer moves an MMT activation at micro-batch 16 (16 × 256
// × 1024 float32s, 16.8 MB) from one emulated device to another as the
// same-host link does (ipc.go): the sender exports its buffer and sends the
// handle over NATS (an embedded server, a connection per end), the
// receiver copies from the peer's memory into a buffer of its own and
// acknowledges, and the sender has the acknowledgement. On the CUDA
// emulator the copy is a memmove between shared mappings, so this times
// the path's overheads and a host memory copy, not a GPU's. bench/link_ab.sh
// prints it beside the NATS paths (EMULATOR=1). Not part of make test.
func BenchmarkIPCTransfer(b *testing.B) {
	lib, err := cuda.EmulatorLibrary()
	if errors.Is(err, cuda.ErrNoCompiler) {
		b.Skip(err)
	} else if err != nil {
		b.Fatal(err)
	}
	var devs [2]*cuda.Device
	for i := range devs {
		if devs[i], err = cuda.OpenEmulator(lib); err != nil {
			b.Fatal(err)
		}
		defer devs[i].Close()
	}
	shape := []int{16, 256, 1024}
	n := shape[0] * shape[1] * shape[2]
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(i % 977)
	}
	src, err := devs[0].Upload(x)
	if err != nil {
		b.Fatal(err)
	}
	srv, err := wire.StartEmbedded(0)
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Shutdown()
	var eps [2]*wire.Endpoint
	for i := range eps {
		t, err := wire.DialNATS(wire.NATSOptions{URL: srv.URL(), Token: srv.Token})
		if err != nil {
			b.Fatal(err)
		}
		defer t.Close()
		if eps[i], err = wire.NewEndpoint(t, "ipc-bench", 1, int32(i)); err != nil {
			b.Fatal(err)
		}
		defer eps[i].Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	move := func(i int) {
		k := msgKey(int64(i), 0, edgeKey(0, 0), 'a')
		ack := msgKey(int64(i), ipcAckMB, k.Edge, k.Dir)
		errs := make(chan error, 1)
		go func() { // the receiver
			msg, err := eps[1].Receive(ctx, k)
			if err != nil {
				errs <- err
				return
			}
			ts, err := wire.DecodeDeviceTensors(msg)
			if err != nil {
				errs <- err
				return
			}
			into, err := devs[1].Alloc(n)
			if err == nil {
				err = devs[1].CopyFromPeer(into, ts[0].Handle, ts[0].Offset, n)
				devs[1].Free(into)
			}
			if err == nil {
				err = eps[1].Send(ctx, 0, ack, nil)
			}
			errs <- err
		}()
		h, off, err := devs[0].Export(src)
		if err != nil {
			b.Fatal(err)
		}
		msg, _ := wire.EncodeDeviceTensors([]wire.DeviceTensor{{Name: "branch0.attn.out", Shape: shape, Handle: h, Offset: off}})
		if err := eps[0].Send(ctx, 1, k, msg); err != nil {
			b.Fatal(err)
		}
		if _, err := eps[0].Receive(ctx, ack); err != nil {
			b.Fatal(err)
		}
		if err := <-errs; err != nil {
			b.Fatal(err)
		}
	}
	move(1 << 20) // warm-up: the peer's memory opened
	b.SetBytes(int64(4 * n))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		move(i)
	}
}
