package supervise

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/graphpipe/graphpipe/runtime"
	"github.com/graphpipe/graphpipe/runtime/wire"
	"github.com/graphpipe/graphpipe/stage"
)

// TestPlaceAgainstBruteForce: on random small pools, place finds a
// placement exactly when one exists (every map of nodes to hosts tried),
// and the one it finds puts each node's slots on distinct agents of one
// host.
func TestPlaceAgainstBruteForce(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	found := 0
	for trial := range 500 {
		var slots []Slot
		need := make([]int, 1+rng.Intn(4))
		for n := range need {
			need[n] = 1 + rng.Intn(3)
			for range need[n] {
				slots = append(slots, Slot{Worker: len(slots), Node: n})
			}
		}
		var agents []Advert
		free := make([]int, 1+rng.Intn(4))
		for h := range free {
			free[h] = rng.Intn(5)
			for range free[h] {
				agents = append(agents, Advert{Agent: fmt.Sprintf("%03d", rng.Intn(1000)) + fmt.Sprint(len(agents)), Host: fmt.Sprint("h", h)})
			}
		}
		rng.Shuffle(len(agents), func(i, j int) { agents[i], agents[j] = agents[j], agents[i] })
		got, err := place("p", slots, agents)
		if want := feasible(need, free); want != (err == nil) {
			t.Fatalf("trial %d: needs %v, hosts %v: place says %v, brute force %v", trial, need, free, err, want)
		}
		if err != nil {
			continue
		}
		found++
		hostOf, used := map[int]string{}, map[string]bool{}
		for _, s := range slots {
			a, ok := got[s.Worker]
			if !ok || used[a.Agent] {
				t.Fatalf("trial %d: slot %d: agent %+v missing or given twice", trial, s.Worker, a)
			}
			used[a.Agent] = true
			if h, ok := hostOf[s.Node]; ok && h != a.Host {
				t.Fatalf("trial %d: node %d on hosts %s and %s", trial, s.Node, h, a.Host)
			}
			hostOf[s.Node] = a.Host
		}
	}
	if found < 100 || found > 400 {
		t.Fatalf("%d of 500 trials placeable: the trials test too little", found)
	}
}

// TestPlaceByKind: on a plan of several device kinds, place puts each
// node's slots on agents of its kind's profile only (one host's agents of
// two profiles serve two nodes), and refuses in one line when the pool has
// too few agents of a kind, naming hosts by profile.
func TestPlaceByKind(t *testing.T) {
	slots := []Slot{{Worker: 0, Node: 0, Kind: "cpu"}, {Worker: 1, Node: 0, Kind: "cpu"}, {Worker: 2, Node: 1, Kind: "cpu-slow"}, {Worker: 3, Node: 1, Kind: "cpu-slow"}}
	agents := []Advert{{Agent: "a", Host: "h", Profile: "cpu-slow"}, {Agent: "b", Host: "h", Profile: "cpu"}, {Agent: "c", Host: "h", Profile: "cpu-slow"}, {Agent: "d", Host: "h", Profile: "cpu"}}
	got, err := place("p", slots, agents)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range slots {
		if a := got[s.Worker]; a.Profile != s.Kind {
			t.Errorf("slot %d of kind %s on agent %s, profile %s", s.Worker, s.Kind, a.Agent, a.Profile)
		}
	}
	_, err = place("p", slots, append(agents[:2:2], Advert{Agent: "e", Host: "h", Profile: "cpu"}, Advert{Agent: "f", Host: "h", Profile: "cpu"}))
	var pe *PlacementError
	if !errors.As(err, &pe) || !pe.Kinds || !strings.Contains(err.Error(), "h [cpu-slow] (1)") || strings.Contains(err.Error(), "\n") {
		t.Errorf("one cpu-slow agent for two cpu-slow slots: %v", err)
	}
}

// feasible tries every map of nodes to hosts.
func feasible(need, free []int) bool {
	left := append([]int(nil), free...)
	var try func(n int) bool
	try = func(n int) bool {
		if n == len(need) {
			return true
		}
		for h := range left {
			if left[h] >= need[n] {
				left[h] -= need[n]
				if try(n + 1) {
					return true
				}
				left[h] += need[n]
			}
		}
		return false
	}
	return try(0)
}

// TestPoolSkipsSilentAgents: over the embedded NATS server, a pool of two
// agents and a ghost, heard once and then silent (an agent SIGKILLed after
// the coordinator heard it): the ghost, placed first (its id sorts first),
// does not confirm and is set aside; the run takes the two agents and ends
// with the parameters of the in-process run, bit for bit. Once silent for
// the heartbeat timeout, the ghost is not even offered; the agents serve a
// second run.
func TestPoolSkipsSilentAgents(t *testing.T) {
	tm := shortTimings()
	srv, err := wire.StartEmbedded(0)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	dial := func() wire.Transport {
		nt, err := wire.DialNATS(wire.NATSOptions{URL: srv.URL(), Token: srv.Token})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { nt.Close() })
		return nt
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for range 2 {
		a := &Agent{Pool: "ghosts", Host: "h", Profile: "cpu", Config: runtime.Config{Timings: tm}}
		go a.Serve(ctx, dial())
	}
	g, plan := smallPlan(t, "mlp", 2, 8)
	o := runtime.Options{Train: stage.TrainOptions{Optimizer: "sgd", LR: 0.05}}
	want, err := runtime.RunLocal(ctx, &runtime.Job{Run: "ref", Graph: g, Plan: plan, Steps: 3, Options: o}, wire.NewMemory(1, wire.Faults{}, 1<<20))
	if err != nil {
		t.Fatal(err)
	}
	t0 := dial()
	pl, err := NewPoolLauncher(t0, PoolConfig{Pool: "ghosts", JoinTimeout: 10 * time.Second, Timings: tm})
	if err != nil {
		t.Fatal(err)
	}
	ghost, _ := json.Marshal(Advert{Agent: "000000000000", Host: "h", PID: 1, Device: "cpu", Profile: "cpu"})
	for len(pl.live()) < 2 {
		time.Sleep(20 * time.Millisecond)
	}
	t0.Publish(poolAdverts("ghosts"), ghost)
	for len(pl.live()) < 3 {
		time.Sleep(5 * time.Millisecond)
	}
	job := &Job{Job: runtime.Job{Run: "ghost1", Graph: g, Plan: plan, Steps: 3, Options: o, Config: runtime.Config{Timings: tm}}}
	res, _, err := (&Supervisor{Job: job, T: t0, Launcher: pl}).Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	equalParams(t, res.Params, want.Params, 0)
	for _, j := range res.Joined {
		if j.Agent == "000000000000" || j.Agent == "" {
			t.Fatalf("the ghost or no agent was counted: %+v", res.Joined)
		}
	}
	pl.mu.Lock()
	_, offered := pl.excl["000000000000"]
	pl.mu.Unlock()
	if !offered {
		t.Fatal("the ghost was never offered a slot: the test exercised nothing")
	}
	time.Sleep(tm.HeartbeatTimeout + 200*time.Millisecond)
	pl2, err := NewPoolLauncher(t0, PoolConfig{Pool: "ghosts", JoinTimeout: 10 * time.Second, Timings: tm})
	if err != nil {
		t.Fatal(err)
	}
	pl2.heard(ghost) // heard, but too long ago
	pl2.mu.Lock()
	pl2.seen["000000000000"] = seenAgent{ad: pl2.seen["000000000000"].ad, last: time.Now().Add(-2 * tm.HeartbeatTimeout)}
	pl2.mu.Unlock()
	for len(pl2.live()) < 2 {
		time.Sleep(20 * time.Millisecond)
	}
	for _, a := range pl2.live() {
		if a.Agent == "000000000000" {
			t.Fatal("an agent silent past the heartbeat timeout is offered")
		}
	}
	job.Run = "ghost2"
	res, _, err = (&Supervisor{Job: job, T: t0, Launcher: pl2}).Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	equalParams(t, res.Params, want.Params, 0)
}

// TestPoolStopSetsAsideTheQuiet: when a generation fails, a held agent not
// heard for two heartbeats is set aside until it is heard again (it is the
// likely loss: a worker's silence can be noticed up to a beat before its
// agent's adverts have been silent for the heartbeat timeout, and offering
// it to the next generation would cost the confirmation timeout); an agent heard
// within the last beat stays on offer.
func TestPoolStopSetsAsideTheQuiet(t *testing.T) {
	// a beat every 100 ms, silent after 1 s
	pl, err := NewPoolLauncher(wire.NewMemory(1, wire.Faults{}, 1<<20), PoolConfig{Pool: "quiet", JoinTimeout: time.Second, Timings: shortTimings()})
	if err != nil {
		t.Fatal(err)
	}
	defer pl.Close()
	ads := map[string][]byte{}
	heardAgo := func(id string, ago time.Duration) {
		pl.heard(ads[id])
		pl.mu.Lock()
		s := pl.seen[id]
		s.last = time.Now().Add(-ago)
		pl.seen[id] = s
		pl.mu.Unlock()
	}
	for id, ago := range map[string]time.Duration{"aaaaaaaaaaaa": 700 * time.Millisecond, "bbbbbbbbbbbb": 0} {
		ads[id], _ = json.Marshal(Advert{Agent: id, Host: "h", Device: "cpu", Profile: "cpu", Claim: pl.claim})
		heardAgo(id, ago)
		pl.hold(id)
	}
	ids := func() []string {
		var out []string
		for _, a := range pl.live() {
			out = append(out, a.Agent)
		}
		return out
	}
	if got := ids(); len(got) != 2 {
		t.Fatalf("live before the failure: %v, want both", got)
	}
	pl.Stop(&Generation{Run: "q", Gen: 1}, true)
	if got := ids(); !slices.Equal(got, []string{"bbbbbbbbbbbb"}) {
		t.Fatalf("live after the failure: %v, want only the agent heard within a beat", got)
	}
	heardAgo("aaaaaaaaaaaa", 0)
	if got := ids(); len(got) != 2 {
		t.Fatalf("live once the quiet agent is heard again: %v, want both", got)
	}
}

// TestPoolCloseReleasesTheSetAside: Close releases the agents it holds and
// those it set aside that still advertise its claim (an agent continued
// after a SIGSTOP), not those of other coordinators.
func TestPoolCloseReleasesTheSetAside(t *testing.T) {
	tr := wire.NewMemory(1, wire.Faults{}, 1<<20)
	pl, err := NewPoolLauncher(tr, PoolConfig{Pool: "rel", JoinTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex // guards released
	released := map[string]bool{}
	for _, c := range []struct{ id, claim string }{{"held00000000", pl.claim}, {"aside0000000", pl.claim}, {"other0000000", "someone"}} {
		id := c.id
		unsub, err := tr.Subscribe(poolAgent("rel", id), func(b []byte) {
			var o agentOrder
			if json.Unmarshal(b, &o) == nil && o.Kind == orderRelease && o.Claim == pl.claim {
				mu.Lock()
				released[id] = true
				mu.Unlock()
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		defer unsub()
		ad, _ := json.Marshal(Advert{Agent: id, Host: "h", Device: "cpu", Profile: "cpu", Claim: c.claim})
		pl.heard(ad)
	}
	pl.hold("held00000000")
	pl.hold("aside0000000")
	pl.setAside("aside0000000")
	pl.Close()
	want := map[string]bool{"held00000000": true, "aside0000000": true}
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		mu.Lock()
		done := len(released) >= 2
		mu.Unlock()
		if done {
			break
		}
	}
	time.Sleep(50 * time.Millisecond) // and nothing more
	mu.Lock()
	defer mu.Unlock()
	if len(released) != 2 || !released["held00000000"] || !released["aside0000000"] {
		t.Fatalf("released %v, want %v", released, want)
	}
}

// TestAgentKeepsTheRunsTimings: an agent is held by a coordinator silent
// for longer than the agent's own heartbeat timeout but not the run's,
// which the offer carries (--heartbeat-timeout reaches the agents); past
// the run's, it goes back to the pool.
func TestAgentKeepsTheRunsTimings(t *testing.T) {
	tr := wire.NewMemory(1, wire.Faults{}, 1<<20)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	own := runtime.Timings{HeartbeatEvery: 20 * time.Millisecond, HeartbeatTimeout: 100 * time.Millisecond}
	a := &Agent{Pool: "slow", Host: "h", Profile: "cpu", Config: runtime.Config{Timings: own}}
	go a.Serve(ctx, tr)
	for a.ID() == "" {
		time.Sleep(5 * time.Millisecond)
	}
	run := runtime.Timings{HeartbeatEvery: 20 * time.Millisecond, HeartbeatTimeout: 1500 * time.Millisecond}
	b, _ := json.Marshal(agentOrder{Kind: orderOffer, Claim: "c1", Run: "slowrun", Gen: 1, Slot: Slot{Worker: 0}, Timings: &run})
	time.Sleep(50 * time.Millisecond) // subscribed
	tr.Publish(poolAgent("slow", a.ID()), b)
	claim := func() string {
		a.mu.Lock()
		defer a.mu.Unlock()
		return a.ad.Claim
	}
	for deadline := time.Now().Add(5 * time.Second); claim() != "c1"; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the offer was not taken")
		}
	}
	tr.Publish(runtime.CoordinatorBeats("slowrun"), nil) // heard once, then silent
	time.Sleep(600 * time.Millisecond)                   // past the agent's own timeout, within the run's
	if claim() != "c1" {
		t.Fatal("the agent left on its own heartbeat timeout, not the run's")
	}
	for deadline := time.Now().Add(5 * time.Second); claim() != ""; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the agent stayed held past the run's heartbeat timeout")
		}
	}
}

// gatedOrders holds the orders to its agent until open is closed: an agent
// whose offer comes later than the confirmation timeout.
type gatedOrders struct {
	wire.Transport
	ctx    context.Context
	prefix string
	open   chan struct{}
}

func (g *gatedOrders) Subscribe(subject string, fn func([]byte)) (func(), error) {
	if !strings.HasPrefix(subject, g.prefix) {
		return g.Transport.Subscribe(subject, fn)
	}
	q := make(chan []byte, 64)
	go func() {
		select {
		case <-g.open:
		case <-g.ctx.Done():
			return
		}
		for {
			select {
			case b := <-q:
				fn(b)
			case <-g.ctx.Done():
				return
			}
		}
	}()
	return g.Transport.Subscribe(subject, func(b []byte) { q <- append([]byte(nil), b...) })
}

// TestPoolReleasesTheLateAgent: an agent whose offer reaches it after the
// confirmation timeout is set aside, the generation goes to another, and
// when the offer does reach it, the release sent with the timeout follows:
// it does not stay held, serving a slot that is another's, while the
// coordinator still runs.
func TestPoolReleasesTheLateAgent(t *testing.T) {
	tm := shortTimings()
	tr := wire.NewMemory(1, wire.Faults{}, 1<<20)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	open := make(chan struct{})
	var mu sync.Mutex // guards said
	var said []string
	late := &Agent{Pool: "late", Host: "h", Profile: "cpu", Config: runtime.Config{Timings: tm}, Log: func(f string, args ...any) {
		mu.Lock()
		said = append(said, fmt.Sprintf(f, args...))
		mu.Unlock()
	}}
	go late.Serve(ctx, &gatedOrders{Transport: tr, ctx: ctx, prefix: poolAgent("late", ""), open: open})
	pl, err := NewPoolLauncher(tr, PoolConfig{Pool: "late", JoinTimeout: 10 * time.Second, Timings: tm})
	if err != nil {
		t.Fatal(err)
	}
	defer pl.Close()
	for len(pl.live()) < 1 {
		time.Sleep(5 * time.Millisecond)
	}
	_, p := smallPlan(t, "mlp", 1, 8)
	gen := &Generation{Run: "late1", Gen: 1, Plan: p, Slots: Slots(p)}
	started := make(chan error, 1)
	go func() { started <- pl.Start(ctx, gen) }()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		pl.mu.Lock()
		_, aside := pl.excl[late.ID()]
		pl.mu.Unlock()
		if aside {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the late agent was not set aside")
		}
	}
	prompt := &Agent{Pool: "late", Host: "h", Profile: "cpu", Config: runtime.Config{Timings: tm}}
	go prompt.Serve(ctx, tr)
	if err := <-started; err != nil {
		t.Fatal(err)
	}
	if len(gen.Agents) != 1 || gen.Agents[0] != prompt.ID() {
		t.Fatalf("placed %v, want the prompt agent %s", gen.Agents, prompt.ID())
	}
	close(open)
	claim := func() string {
		late.mu.Lock()
		defer late.mu.Unlock()
		return late.ad.Claim
	}
	joined := func() bool {
		mu.Lock()
		defer mu.Unlock()
		return slices.ContainsFunc(said, func(s string) bool { return strings.Contains(s, "joined run late1") })
	}
	for deadline := time.Now().Add(3 * time.Second); !joined() || claim() != ""; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			mu.Lock()
			t.Fatalf("the late agent is still held (claim %q) after its late offer: %q", claim(), said)
		}
	}
}
