package microbatch

import (
	"errors"
	"math"
	"math/rand"
	"strings"
	"testing"
)

// TestReceivesPairSends: every simulated transfer shows at both ends, the
// receive on the stage at the other end of its edge, over the same time.
func TestReceivesPairSends(t *testing.T) {
	r := rand.New(rand.NewSource(5))
	for i := 0; i < 100; i++ {
		p := randomPipeline(r)
		s := mustSchedule(t, "1f1b", p)
		res, err := Simulate(s, randomTiming(r, p, false))
		if err != nil {
			t.Fatal(err)
		}
		type key struct {
			edge, mb int
			dir      Dir
		}
		sends, recvs := map[key]Event{}, map[key]Event{}
		for _, e := range res.Events {
			switch e.Kind {
			case Send:
				sends[key{e.Edge, e.MB, e.Dir}] = e
			case Recv:
				recvs[key{e.Edge, e.MB, e.Dir}] = e
			}
		}
		if len(sends) != 2*len(p.Edges)*p.MicroBatches || len(recvs) != len(sends) {
			t.Fatalf("%d sends and %d receives for %d edges × %d micro-batches × 2 directions", len(sends), len(recvs), len(p.Edges), p.MicroBatches)
		}
		for k, snd := range sends {
			rcv := recvs[k]
			from, to := p.Edges[k.edge][0], p.Edges[k.edge][1]
			if k.dir == Grad {
				from, to = to, from
			}
			if snd.Stage != from || rcv.Stage != to || snd.Start != rcv.Start || snd.End != rcv.End {
				t.Fatalf("%v: send %+v, receive %+v (edge %d→%d)", k, snd, rcv, p.Edges[k.edge][0], p.Edges[k.edge][1])
			}
		}
	}
}

// TestTraceRoundTrip: ParseTrace reads back what Trace writes: the events
// (to the microsecond of the format), the stage names, the iteration.
func TestTraceRoundTrip(t *testing.T) {
	s := mustSchedule(t, "1f1b", twoBranch(3))
	tm := Timing{F: []float64{1e-3, 2e-3, 3e-3}, B: []float64{2e-3, 4e-3, 6e-3}, Act: []float64{5e-4, 7e-4}, Grad: []float64{5e-4, 7e-4}}
	res, err := Simulate(s, tm)
	if err != nil {
		t.Fatal(err)
	}
	names := []string{"stage 0 (devices 0-1)", "", "stage 2 (device 3)"}
	back, gotNames, err := ParseTrace(Trace(res, 3, names))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(gotNames, "|") != "stage 0 (devices 0-1)|stage 1|stage 2 (device 3)" {
		t.Errorf("names %q", gotNames)
	}
	if len(back.Events) != len(res.Events) {
		t.Fatalf("%d events back of %d", len(back.Events), len(res.Events))
	}
	for i, e := range res.Events {
		b := back.Events[i]
		if b.Stage != e.Stage || b.Kind != e.Kind || b.MB != e.MB || math.Abs(b.Start-e.Start) > 1e-12 || math.Abs(b.End-e.End) > 1e-12 ||
			!e.Compute() && (b.Edge != e.Edge || b.Dir != e.Dir) {
			t.Fatalf("event %d: %+v back as %+v", i, e, b)
		}
	}
	if math.Abs(back.Iteration-res.Iteration) > 1e-12 || math.Abs(back.Bubble-res.Bubble) > 1e-9 {
		t.Errorf("iteration %v bubble %v back as %v, %v", res.Iteration, res.Bubble, back.Iteration, back.Bubble)
	}
}

func TestParseTraceRefuses(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{`nope`, "trace: not Chrome trace JSON"},
		{`{}`, "trace: no traceEvents array"},
		{`{"traceEvents": [3]}`, "trace event 0: event:"},
		{`{"traceEvents": [{"ph": "X", "pid": 1, "tid": -1}]}`, "trace event 0: tid: -1 is out of range"},
		{`{"traceEvents": [{"ph": "X", "pid": 1, "tid": 0, "ts": -5, "args": {"micro_batch": 0}}]}`, "trace event 0: ts:"},
		{`{"traceEvents": [{"ph": "X", "pid": 1, "tid": 0, "ts": 5, "dur": -1, "args": {"micro_batch": 0}}]}`, "trace event 0: dur:"},
		{`{"traceEvents": [{"ph": "X", "pid": 1, "tid": 0, "ts": 5, "dur": 1, "cat": "forward"}]}`, "args.micro_batch: missing"},
		{`{"traceEvents": [{"ph": "X", "pid": 1, "tid": 0, "ts": 5, "dur": 1, "cat": "forward", "args": {"micro_batch": 1.5}}]}`, "args.micro_batch"},
		{`{"traceEvents": [{"ph": "X", "pid": 1, "tid": 0, "ts": 5, "dur": 1, "cat": "lunch", "args": {"micro_batch": 1}}]}`, `cat: "lunch"`},
		{`{"traceEvents": [{"ph": "X", "pid": 2, "tid": 0, "ts": 5, "dur": 1, "name": "x 1", "args": {"micro_batch": 1, "stage": 0}}]}`, `name: "x 1"`},
		{`{"traceEvents": [{"ph": "X", "pid": 3, "tid": 0, "ts": 5, "dur": 1, "name": "receive gradients 1", "args": {"micro_batch": 1}}]}`, "args.stage"},
		{`{"traceEvents": [{"ph": "X", "pid": 1, "tid": 0, "ts": 5, "dur": 10, "cat": "forward", "args": {"micro_batch": 1}},
			{"ph": "X", "pid": 1, "tid": 0, "ts": 9, "dur": 1, "cat": "backward", "args": {"micro_batch": 0}}]}`, "trace: stage 0 computes F1 and B0 at once"},
	} {
		_, _, err := ParseTrace([]byte(c.in))
		var te *TraceError
		if err == nil || !errors.As(err, &te) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want %q", c.in, err, c.want)
		}
	}
}

func FuzzParseTrace(f *testing.F) {
	s, _ := New("1f1b", twoBranch(2))
	res, _ := Simulate(s, Unit(s.Pipe))
	f.Add(Trace(res, 3, nil))
	f.Add([]byte(`{"traceEvents": [{"ph": "X", "pid": 3, "tid": 0, "ts": 5, "dur": 1, "name": "receive gradients 1", "args": {"micro_batch": 1, "stage": 2}}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, names, err := ParseTrace(data)
		if err != nil {
			return
		}
		for _, e := range r.Events {
			if e.Stage < 0 || e.Stage >= len(names) || e.End < e.Start || e.Start < 0 || e.End > r.Iteration {
				t.Fatalf("event %+v of %d stages, iteration %v", e, len(names), r.Iteration)
			}
		}
		if len(r.Busy) != len(names) || r.Bubble < -1e-9 || r.Bubble > 1+1e-9 && r.Iteration > 0 {
			t.Fatalf("busy %v, bubble %v for %d stages", r.Busy, r.Bubble, len(names))
		}
	})
}
