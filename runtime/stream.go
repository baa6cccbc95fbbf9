package runtime

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/graphpipe/graphpipe/runtime/wire"
)

// Streams carry a stage's state in bounded chunks: a checkpoint's shards
// from a worker that does not share the checkpoint's directory, every
// stage's parameters at the end of a run, a checkpoint's share to resume
// from. They run over the bulk endpoints (a generation of their own, on
// Config.Bulk when set: a connection of their own), never over the
// control endpoint the heartbeats and the orders share a connection with.
//
// A stream is chunks of at most streamChunk bytes, each one message, sent
// only once the receiver granted it: the receiver grants streamWindow
// chunks ahead of what it has taken (credit messages back to the sender),
// so neither side holds more than a window of a stream, whatever the
// sizes of the state and whatever the pace of the disk at the far end.
const (
	bulkGenOffset = 2 << 16
	streamEdge    = -1 // the bulk generation carries streams alone
	streamChunk   = 4 << 20
	streamWindow  = 4
	// the first byte of a chunk: more follow, the last one, or the
	// sender's failure (its text)
	chunkMore = 'm'
	chunkLast = 'e'
	chunkFail = 'x'
)

// The kinds of stream.
const (
	streamShardParams = 1 // a checkpoint's params shard, from a worker
	streamShardOptim  = 2 // a checkpoint's optim shard, from a worker
	streamFinal       = 3 // a stage's parameters at the end of the run
	streamResume      = 4 // a worker's share of the checkpoint it resumes from
)

// streamID names one stream of a generation: its kind, the step it is
// of, and the worker at its far end from the coordinator.
type streamID struct {
	kind   int32
	step   int
	worker int32
}

// key is the key of a stream's message seq: a chunk ('g') or a credit
// ('a'). Keys of different streams differ in the kind, the worker or the
// step.
func (s streamID) key(seq int64, dir byte) wire.Key {
	return wire.Key{Iter: int64(s.step)<<32 | seq, MB: s.kind<<20 | s.worker, Edge: streamEdge, Dir: dir}
}

func (s streamID) String() string {
	what := map[int32]string{streamShardParams: "params shard", streamShardOptim: "optim shard", streamFinal: "parameters", streamResume: "resume share"}[s.kind]
	return fmt.Sprintf("worker %d's %s at step %d", s.worker, what, s.step)
}

// newBulk opens the bulk endpoint of party id in generation gen of run:
// over Config.Bulk when set, else over t.
func newBulk(c Config, t wire.Transport, run string, gen uint32, id int32) (*wire.Endpoint, error) {
	if c.Bulk != nil {
		t = c.Bulk
	}
	return wire.NewEndpoint(t, run, gen+bulkGenOffset, id)
}

// streamWriter sends a stream as an io.Writer: chunks go out as the
// receiver grants them. Close sends the last one; Fail tells the receiver
// the stream will not end.
type streamWriter struct {
	ctx     context.Context
	ep      *wire.Endpoint
	peer    int32
	id      streamID
	buf     []byte // the chunk being filled, its first byte the flag
	seq     int64  // chunks sent
	granted int64  // chunks the receiver allows
	credits int64  // credit messages taken
	sent    int64  // bytes sent
}

func newStreamWriter(ctx context.Context, ep *wire.Endpoint, peer int32, id streamID) *streamWriter {
	return &streamWriter{ctx: ctx, ep: ep, peer: peer, id: id, buf: make([]byte, 1, 1+streamChunk)}
}

func (s *streamWriter) Write(p []byte) (int, error) {
	n := 0
	for len(p) > 0 {
		k := min(len(p), 1+streamChunk-len(s.buf))
		s.buf = append(s.buf, p[:k]...)
		p, n = p[k:], n+k
		if len(s.buf) == 1+streamChunk {
			if err := s.flush(chunkMore); err != nil {
				return n, err
			}
		}
	}
	return n, nil
}

// flush sends the chunk in buf, flagged, once granted.
func (s *streamWriter) flush(flag byte) error {
	for s.seq >= s.granted {
		msg, err := s.ep.Receive(s.ctx, s.id.key(s.credits, 'a'))
		if err != nil {
			return fmt.Errorf("%s: waiting for the receiver: %w", s.id, err)
		}
		if len(msg) != 8 {
			return fmt.Errorf("%s: a credit of %d bytes", s.id, len(msg))
		}
		s.credits++
		s.granted = max(s.granted, int64(binary.LittleEndian.Uint64(msg)))
	}
	s.buf[0] = flag
	if err := s.ep.Send(s.ctx, s.peer, s.id.key(s.seq, 'g'), s.buf); err != nil {
		return fmt.Errorf("%s: %w", s.id, err)
	}
	s.sent += int64(len(s.buf) - 1)
	s.seq++
	s.buf = s.buf[:1]
	return nil
}

// Close sends what is left as the last chunk.
func (s *streamWriter) Close() error { return s.flush(chunkLast) }

// Fail ends the stream with err instead of its data, so that its receiver
// does not wait for the rest.
func (s *streamWriter) Fail(err error) {
	s.buf = append(s.buf[:1], err.Error()...)
	s.flush(chunkFail)
}

// StreamError is a stream whose sender failed before its end.
type StreamError struct {
	Stream string
	Msg    string
}

func (e *StreamError) Error() string {
	return fmt.Sprintf("%s: its sender failed: %s", e.Stream, e.Msg)
}

// streamReader receives a stream as an io.Reader, granting the sender
// streamWindow chunks ahead of what it has read.
type streamReader struct {
	ctx     context.Context
	ep      *wire.Endpoint
	peer    int32
	id      streamID
	cur     []byte
	seq     int64 // chunks taken
	granted int64
	credits int64 // credit messages sent
	done    bool
	n       int64 // bytes read
}

func newStreamReader(ctx context.Context, ep *wire.Endpoint, peer int32, id streamID) *streamReader {
	return &streamReader{ctx: ctx, ep: ep, peer: peer, id: id}
}

// grant lets the sender run a window ahead, once half of it is used.
func (r *streamReader) grant() error {
	if r.granted-r.seq > streamWindow/2 {
		return nil
	}
	r.granted = r.seq + streamWindow
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], uint64(r.granted))
	r.credits++
	return r.ep.Send(r.ctx, r.peer, r.id.key(r.credits-1, 'a'), b[:])
}

func (r *streamReader) Read(p []byte) (int, error) {
	for len(r.cur) == 0 {
		if r.done {
			return 0, io.EOF
		}
		if err := r.grant(); err != nil {
			return 0, fmt.Errorf("%s: %w", r.id, err)
		}
		msg, err := r.ep.Receive(r.ctx, r.id.key(r.seq, 'g'))
		if err != nil {
			return 0, fmt.Errorf("%s: %w", r.id, err)
		}
		r.seq++
		if len(msg) == 0 {
			return 0, fmt.Errorf("%s: an empty chunk", r.id)
		}
		switch msg[0] {
		case chunkMore:
		case chunkLast:
			r.done = true
		case chunkFail:
			return 0, &StreamError{Stream: r.id.String(), Msg: string(msg[1:])}
		default:
			return 0, fmt.Errorf("%s: a chunk flagged %q", r.id, msg[0])
		}
		r.cur = msg[1:]
	}
	n := copy(p, r.cur)
	r.cur = r.cur[n:]
	r.n += int64(n)
	return n, nil
}

// drain reads what is left of the stream: a reader that read all it
// wanted still takes the last chunk, so that the sender's Close returns.
func (r *streamReader) drain() error {
	_, err := io.Copy(io.Discard, r)
	if errors.Is(err, io.EOF) {
		return nil
	}
	return err
}
