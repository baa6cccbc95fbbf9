package wire

import (
	"context"
	"testing"
	"time"
)

// endpointPair is stages 0 and 1 of run "r" over m, closed when the test ends.
func endpointPair(t *testing.T, m Transport) (a, b *Endpoint) {
	t.Helper()
	a, err := NewEndpoint(m, "r", 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Close)
	if b, err = NewEndpoint(m, "r", 1, 1); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return a, b
}

// TestEmptyMessage: a message with no payload is delivered, not waited for.
func TestEmptyMessage(t *testing.T) {
	a, b := endpointPair(t, NewMemory(1, Faults{}, 1<<20))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	k := Key{Iter: 3, MB: 1, Edge: 0, Dir: 'a'}
	if err := a.Send(ctx, 1, k, nil); err != nil {
		t.Fatal(err)
	}
	msg, err := b.Receive(ctx, k)
	if err != nil || msg == nil || len(msg) != 0 {
		t.Fatalf("got %v, %v", msg, err)
	}
}

// sendMany sends n messages of size bytes from a to b's stage 1 and checks
// each arrives whole; it returns a's counters.
func sendMany(t *testing.T, m Transport, n, size int) Stats {
	t.Helper()
	a, b := endpointPair(t, m)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	go func() {
		for i := 0; i < n; i++ {
			payload := make([]byte, size)
			payload[0] = byte(i)
			if err := a.Send(ctx, 1, Key{Iter: int64(i), Edge: 0, Dir: 'a'}, payload); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	for i := 0; i < n; i++ {
		msg, err := b.Receive(ctx, Key{Iter: int64(i), Edge: 0, Dir: 'a'})
		if err != nil || len(msg) != size || msg[0] != byte(i) {
			t.Fatalf("message %d: %d bytes, %v", i, len(msg), err)
		}
	}
	return a.Stats()
}

// TestSlowLinkIsNotFlooded: on a link that loses nothing but takes up to
// 300 ms each way (acknowledgements slower than the least resend timeout of
// 100 ms), the resend timeout follows the measured round trip and backs
// off, so few chunks are sent twice; on a lossy link everything still
// arrives.
func TestSlowLinkIsNotFlooded(t *testing.T) {
	st := sendMany(t, NewMemory(3, Faults{Delay: 300 * time.Millisecond}, 1<<10), 40, 3000)
	t.Logf("slow link: %d chunks sent, %d resent", st.Sent, st.Resent)
	if st.Resent*5 > st.Sent {
		t.Errorf("%d of %d chunks resent on a link that loses nothing: want at most a fifth", st.Resent, st.Sent)
	}
	st = sendMany(t, NewMemory(4, Faults{Drop: 0.2, Delay: 20 * time.Millisecond}, 1<<10), 40, 3000)
	t.Logf("lossy link: %d chunks sent, %d resent", st.Sent, st.Resent)
	if st.Resent == 0 {
		t.Error("nothing resent on a link that drops a fifth")
	}
}

// TestRTTEstimate: the timeout follows RFC 6298 from the first sample,
// stays within [floor, maxResend], and is the floor before any sample.
func TestRTTEstimate(t *testing.T) {
	var r rttEstimate
	if got := r.timeout(100 * time.Millisecond); got != 100*time.Millisecond {
		t.Fatalf("no samples: %v, want the floor", got)
	}
	r.add(200 * time.Millisecond) // srtt 200, rttvar 100
	if got := r.timeout(100 * time.Millisecond); got != 600*time.Millisecond {
		t.Fatalf("one sample of 200 ms: %v, want 600 ms", got)
	}
	r.add(200 * time.Millisecond) // srtt 200, rttvar 75
	if got := r.timeout(100 * time.Millisecond); got != 500*time.Millisecond {
		t.Fatalf("two samples of 200 ms: %v, want 500 ms", got)
	}
	for i := 0; i < 50; i++ {
		r.add(time.Millisecond)
	}
	if got := r.timeout(100 * time.Millisecond); got != 100*time.Millisecond {
		t.Fatalf("fast link: %v, want the floor", got)
	}
	r.add(time.Minute)
	if got := r.timeout(100 * time.Millisecond); got != maxResend {
		t.Fatalf("a very slow sample: %v, want the cap %v", got, maxResend)
	}
}
