package runtime

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand"
	"testing"
	"time"

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
	shortHeartbeats(t)
	defer func(d time.Duration) { ConfirmTimeout = d }(ConfirmTimeout)
	ConfirmTimeout = 300 * time.Millisecond
	srv, err := StartEmbedded(0)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	dial := func() Transport {
		nt, err := DialNATS(NATSOptions{URL: srv.URL(), Token: srv.Token})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { nt.Close() })
		return nt
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for range 2 {
		a := &Agent{Pool: "ghosts", Host: "h", Profile: "cpu"}
		go a.Serve(ctx, dial())
	}
	g, plan := smallPlan(t, "mlp", 2, 8)
	o := Options{Train: stage.TrainOptions{Optimizer: "sgd", LR: 0.05}}
	want, err := RunLocal(ctx, g, plan, NewMemory(1, Faults{}, 1<<20), "ref", 3, o)
	if err != nil {
		t.Fatal(err)
	}
	t0 := dial()
	pl, err := NewPoolLauncher(t0, "ghosts", 10*time.Second, nil)
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
	job := &Job{Run: "ghost1", Graph: g, Plan: plan, Steps: 3, Options: o}
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
	time.Sleep(heartbeatTimeout() + 200*time.Millisecond)
	pl2, err := NewPoolLauncher(t0, "ghosts", 10*time.Second, nil)
	if err != nil {
		t.Fatal(err)
	}
	pl2.heard(ghost) // heard, but too long ago
	pl2.mu.Lock()
	pl2.seen["000000000000"] = seenAgent{ad: pl2.seen["000000000000"].ad, last: time.Now().Add(-2 * heartbeatTimeout())}
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

// TestFailedStopSetsQuietAgentsAside: when a generation fails, an agent it
// held that has missed beats is not live for the next generation (the
// coordinator's heartbeats may have caught its death first), one that beats
// on stays live, and the quiet one is live again once heard anew.
func TestFailedStopSetsQuietAgentsAside(t *testing.T) {
	m := NewMemory(1, Faults{}, 1<<20)
	pl, err := NewPoolLauncher(m, "quiet", time.Second, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer pl.Close()
	now := time.Now()
	pl.mu.Lock()
	pl.seen["dead00000000"] = seenAgent{ad: Advert{Agent: "dead00000000", Host: "h"}, last: now.Add(-(quietBeats + 1) * heartbeatEvery())}
	pl.seen["live00000000"] = seenAgent{ad: Advert{Agent: "live00000000", Host: "h"}, last: now}
	pl.held["dead00000000"], pl.held["live00000000"] = Advert{}, Advert{}
	pl.mu.Unlock()
	names := func() []string {
		var out []string
		for _, ad := range pl.live() {
			out = append(out, ad.Agent)
		}
		return out
	}
	if got := names(); len(got) != 2 {
		t.Fatalf("before the failure: live %v, want both (the quiet one is within the heartbeat timeout)", got)
	}
	pl.Stop(&Generation{Run: "r", Gen: 1}, false)
	if got := names(); len(got) != 2 {
		t.Fatalf("a finished generation set %v apart", got)
	}
	pl.Stop(&Generation{Run: "r", Gen: 1}, true)
	if got := names(); len(got) != 1 || got[0] != "live00000000" {
		t.Fatalf("after the failure: live %v, want only the agent that beats on", got)
	}
	b, _ := json.Marshal(Advert{Agent: "dead00000000", Host: "h"})
	time.Sleep(time.Millisecond) // heard strictly after it was set aside
	pl.heard(b)
	if got := names(); len(got) != 2 {
		t.Fatalf("heard again: live %v, want both", got)
	}
}
