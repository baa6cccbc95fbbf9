package runtime

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/graphpipe/graphpipe/runtime/wire"
	"github.com/graphpipe/graphpipe/stage"
)

// recorder keeps every frame published on the wrapped transport.
type recorder struct {
	wire.Transport
	mu     sync.Mutex // guards frames
	frames map[string][][]byte
}

func (r *recorder) Publish(subject string, data []byte) error {
	r.mu.Lock()
	r.frames[subject] = append(r.frames[subject], append([]byte(nil), data...))
	r.mu.Unlock()
	return r.Transport.Publish(subject, data)
}

// replayer publishes old frames into a new generation's inboxes while a run
// goes on, as a confused router or a late duplicate would.
type replayer struct {
	wire.Transport
	old     map[string][][]byte
	oldGen  string
	newGen  string
	mu      sync.Mutex // guards started
	started map[string]bool
}

func (r *replayer) Subscribe(subject string, fn func([]byte)) (func(), error) {
	unsub, err := r.Transport.Subscribe(subject, fn)
	r.mu.Lock()
	defer r.mu.Unlock()
	if oldSubject := strings.Replace(subject, r.newGen, r.oldGen, 1); !r.started[subject] && r.old[oldSubject] != nil {
		r.started[subject] = true
		go func() {
			for _, f := range r.old[oldSubject] {
				r.Transport.Publish(subject, f)
			}
		}()
	}
	return unsub, err
}

// TestReplayedFramesChangeNothing: every frame of a generation-1 run is
// replayed into a generation-2 run of the same plan; the generation-2 run
// drops them all and ends with a clean run's parameters, bit for bit.
func TestReplayedFramesChangeNothing(t *testing.T) {
	g, plan := smallPlan(t, "case-study", 3, 4)
	o := Options{Train: stage.TrainOptions{Optimizer: "sgd", LR: 0.05, Momentum: 0.9}}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rec := &recorder{Transport: wire.NewMemory(1, wire.Faults{}, 1<<20), frames: map[string][][]byte{}}
	if _, err := RunLocal(ctx, &Job{Run: "replay", Graph: g, Plan: plan, Steps: 3, Options: o}, rec); err != nil {
		t.Fatal(err)
	}
	clean, err := RunLocal(ctx, &Job{Run: "replay", Graph: g, Plan: plan, Steps: 3, Options: o, Config: Config{Gen: 2}}, wire.NewMemory(1, wire.Faults{}, 1<<20))
	if err != nil {
		t.Fatal(err)
	}
	rep := &replayer{Transport: wire.NewMemory(2, wire.Faults{}, 1<<20), old: rec.frames, oldGen: ".g1.", newGen: ".g2.", started: map[string]bool{}}
	res, err := RunLocal(ctx, &Job{Run: "replay", Graph: g, Plan: plan, Steps: 3, Options: o, Config: Config{Gen: 2}}, rep)
	if err != nil {
		t.Fatal(err)
	}
	equalParams(t, res.Params, clean.Params, 0)
	var stale int64
	for _, s := range res.Stats {
		stale += s.Stale
	}
	if stale == 0 {
		t.Fatal("no replayed frame reached an endpoint: the test exercised nothing")
	}
	t.Logf("%d frames from generation 1 dropped", stale)
}
