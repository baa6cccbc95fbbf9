package runtime

import (
	"context"
	"testing"
	"time"
)

// TestEmptyMessage: a message with no payload is delivered, not waited for.
func TestEmptyMessage(t *testing.T) {
	m := NewMemory(1, Faults{}, 1<<20)
	a, _ := NewEndpoint(m, "r", 1, 0)
	b, _ := NewEndpoint(m, "r", 1, 1)
	defer a.Close()
	defer b.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	k := msgKey{iter: 3, mb: 1, edge: 0, dir: 'a'}
	if err := a.Send(ctx, 1, k, nil); err != nil {
		t.Fatal(err)
	}
	msg, err := b.Receive(ctx, k)
	if err != nil || msg == nil || len(msg) != 0 {
		t.Fatalf("got %v, %v", msg, err)
	}
}
