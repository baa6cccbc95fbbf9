package microbatch

import (
	"math/rand"
	"testing"
)

// playZeroBubble builds the zero-bubble schedule for p and tm with Warmup's
// counts, checks it holds no more than they allow, and simulates it.
func playZeroBubble(t *testing.T, p Pipeline, tm Timing) (*Result, []int) {
	t.Helper()
	warm, err := Warmup(p, tm, 0)
	if err != nil {
		t.Fatal(err)
	}
	s, err := ZeroBubble(p, tm, warm)
	if err != nil {
		t.Fatal(err)
	}
	if err := Check(s, warm); err != nil {
		t.Fatalf("%v on %+v with %+v", err, p, tm)
	}
	r, err := Simulate(s, tm)
	if err != nil {
		t.Fatal(err)
	}
	return r, warm
}

// TestZeroBubbleByHand: 2 stages, 2 micro-batches, F=1, B=1, W=1,
// transfers 0.5. Worked out on paper (warm-up: stage 0 wants 3, has 2
// micro-batches; the sink 1):
//
//	s1: act0 at 1.5: F0 1.5–2.5, B0 2.5–3.5 (grad0 lands 4); F1's data is
//	    there but the sink holds 1: W0 3.5–4.5, F1 4.5–5.5, B1 5.5–6.5
//	    (grad1 lands 7), W1 6.5–7.5
//	s0: F0 0–1, F1 1–2; B0 4–5; grad1 not there yet: W0 5–6; B1 7–8, W1 8–9
//
// 1F1B with the whole backward (2) ends at 10 (TestSimulateChainByHand).
func TestZeroBubbleByHand(t *testing.T) {
	p := chain(2, 2)
	tm := Timing{F: []float64{1, 1}, B: []float64{1, 1}, W: []float64{1, 1}, Act: []float64{0.5}, Grad: []float64{0.5}}
	r, _ := playZeroBubble(t, p, tm)
	sameTimeline(t, timeline(r, 2), [][]span{
		{{"F0", 0, 1}, {"F1", 1, 2}, {"B0", 4, 5}, {"W0", 5, 6}, {"B1", 7, 8}, {"W1", 8, 9}},
		{{"F0", 1.5, 2.5}, {"B0", 2.5, 3.5}, {"W0", 3.5, 4.5}, {"F1", 4.5, 5.5}, {"B1", 5.5, 6.5}, {"W1", 6.5, 7.5}},
	})
	if r.Iteration != 9 {
		t.Errorf("iteration %v, want 9", r.Iteration)
	}
}

// TestZeroBubbleOnRandomDAGs: on random stage DAGs with random durations
// (backward split 30-70% into B and W) and transfers, the zero-bubble lists
// pass the checker holding no more than 1F1B with the same warm-up, and are
// never slower than that 1F1B running each whole backward at once.
func TestZeroBubbleOnRandomDAGs(t *testing.T) {
	r := rand.New(rand.NewSource(5))
	faster, n := 0, 1000
	sumGain := 0.0
	for i := 0; i < n; i++ {
		p := randomPipeline(r)
		tm := randomTiming(r, p, i%4 == 0)
		for s := range tm.B {
			frac := 0.3 + 0.4*r.Float64()
			tm.W = append(tm.W, tm.B[s]*(1-frac))
			tm.B[s] *= frac
		}
		zr, warm := playZeroBubble(t, p, tm)
		whole := tm
		whole.B, whole.W = make([]float64, len(tm.B)), nil
		for s := range tm.B {
			whole.B[s] = tm.B[s] + tm.W[s]
		}
		base := iteration(t, p, whole, warm)
		if zr.Iteration > base*(1+1e-12) {
			t.Fatalf("case %d: zero bubble takes %v, 1F1B %v, on %+v with %+v", i, zr.Iteration, base, p, tm)
		}
		if zr.Iteration < base*(1-1e-12) {
			faster++
		}
		sumGain += base/zr.Iteration - 1
	}
	if faster == 0 {
		t.Error("zero bubble was never faster than 1F1B")
	}
	t.Logf("zero bubble faster than 1F1B in %d of %d cases, %.2f%% faster on average", faster, n, 100*sumGain/float64(n))
}

// BenchmarkZeroBubble plays a 32-stage chain with 4096 micro-batches, beside
// 1F1B's lists for the same warm-up and the old playout (oracle_test.go),
// the baselines in the same run.
func BenchmarkZeroBubble(b *testing.B) {
	p := chain(32, 4096)
	tm := Timing{}
	for s := 0; s < p.Stages; s++ {
		tm.F, tm.B, tm.W = append(tm.F, 1), append(tm.B, 1), append(tm.W, 1)
	}
	for range p.Edges {
		tm.Act, tm.Grad = append(tm.Act, 0.1), append(tm.Grad, 0.1)
	}
	warm, err := Warmup(p, tm, 0)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("zb", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			if _, err := ZeroBubble(p, tm, warm); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("zb-vs-old", func(b *testing.B) { // alternating, as BenchmarkSimulate
		paired(b, func() error {
			_, err := oldZeroBubble(p, tm, warm)
			return err
		}, func() error {
			_, err := ZeroBubble(p, tm, warm)
			return err
		})
	})
	b.Run("1f1b", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			if _, err := OneFOneBWarm(p, warm); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestZeroBubbleGrid: the step × stage grid of a zero-bubble chain (F, B and
// W one step each, free transfers), golden.
func TestZeroBubbleGrid(t *testing.T) {
	p := chain(4, 6)
	tm := Unit(p)
	s, err := NewTimed("zb", p, tm, 0)
	if err != nil {
		t.Fatal(err)
	}
	g, err := Grid(s)
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "zb-chain4-m6", g)
}
