package supervise

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/graphpipe/graphpipe/runtime"
	"github.com/graphpipe/graphpipe/runtime/wire"
)

// PoolLauncher takes each generation's workers from a pool of agents: as
// many live, free agents as the generation has slots, each plan node's
// slots on agents of one host, each confirmed before it counts. It holds
// them until Close gives them back.
type PoolLauncher struct {
	cfg    PoolConfig
	t      wire.Transport
	claim  string
	unsub  []func()
	mu     sync.Mutex // guards seen, excl and held
	seen   map[string]seenAgent
	excl   map[string]time.Time // agents that failed an offer, and when
	change chan struct{}        // a new advert came (buffered, 1)
	// answers carries agents' answers to offers.
	answers chan agentAnswer
	held    map[string]Advert // the agents this launcher holds, by id
	placed  map[uint32]map[int]Advert
}

type seenAgent struct {
	ad   Advert
	last time.Time
}

// PoolConfig says which pool a PoolLauncher takes agents from, and how it
// waits for them.
type PoolConfig struct {
	Pool string
	// JoinTimeout > 0 bounds the wait for enough agents; 0 waits for ever.
	JoinTimeout time.Duration
	Log         io.Writer // what it takes, and while it waits; nil: nothing said
	// Timings are the run's (zero fields: the defaults): an agent is live
	// while heard within HeartbeatTimeout, and taken for dead when it does
	// not confirm an offer within ConfirmTimeout.
	Timings runtime.Timings
}

// NewPoolLauncher starts listening to the adverts of c's pool over t.
func NewPoolLauncher(t wire.Transport, c PoolConfig) (*PoolLauncher, error) {
	if err := CheckPoolName(c.Pool); err != nil {
		return nil, err
	}
	c.Timings = c.Timings.WithDefaults()
	pool := c.Pool
	p := &PoolLauncher{cfg: c, t: t, claim: randomHex(6), seen: map[string]seenAgent{},
		excl: map[string]time.Time{}, change: make(chan struct{}, 1), answers: make(chan agentAnswer, 64),
		held: map[string]Advert{}, placed: map[uint32]map[int]Advert{}}
	unsub, err := t.Subscribe(poolAdverts(pool), p.heard)
	if err != nil {
		return nil, err
	}
	p.unsub = append(p.unsub, unsub)
	unsub, err = t.Subscribe(poolClaims(pool, p.claim), func(b []byte) {
		var a agentAnswer
		if json.Unmarshal(b, &a) == nil {
			select {
			case p.answers <- a:
			default: // nobody waits for that many: an answer to an offer long given up
			}
		}
	})
	if err != nil {
		p.Close()
		return nil, err
	}
	p.unsub = append(p.unsub, unsub)
	return p, nil
}

func (p *PoolLauncher) heard(b []byte) {
	var ad Advert
	if json.Unmarshal(b, &ad) != nil || ad.Agent == "" {
		return
	}
	p.mu.Lock()
	p.seen[ad.Agent] = seenAgent{ad: ad, last: time.Now()}
	p.mu.Unlock()
	select {
	case p.change <- struct{}{}:
	default:
	}
}

// live is the agents this launcher may take: heard within the heartbeat
// timeout, free or its own, and not failed since they were last heard.
func (p *PoolLauncher) live() []Advert {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []Advert
	for id, s := range p.seen {
		if time.Since(s.last) > p.cfg.Timings.HeartbeatTimeout {
			continue
		}
		if at, bad := p.excl[id]; bad && !s.last.After(at) {
			continue
		}
		if s.ad.Claim == "" || s.ad.Claim == p.claim {
			out = append(out, s.ad)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Agent < out[j].Agent })
	return out
}

// Start takes gen's agents: it waits (up to JoinTimeout) until the pool's
// live agents of the plan's device (matching) can be placed, offers each
// its slot, and tries again without those that refuse or do not confirm
// within the confirmation timeout. Enough agents, but too few of the
// plan's device or placeable, for a heartbeat timeout: a *DeviceError or
// a *PlacementError.
func (p *PoolLauncher) Start(ctx context.Context, gen *Generation) error {
	// the coordinator's heartbeats start now: a taken agent leaves when
	// they stop
	tm := p.cfg.Timings
	go tm.Beat(ctx, p.t, runtime.CoordinatorBeats(gen.Run), func() []byte { return []byte{} })
	deadline, wait, stop := joinDeadline(p.cfg.JoinTimeout, gen)
	defer stop()
	said, began := false, time.Now()
	tick := time.NewTicker(tm.HeartbeatEvery)
	defer tick.Stop()
	// enough agents that cannot be placed: refused once they have stayed
	// so for a heartbeat timeout (agents started together are all heard)
	var unplaceable time.Time
	for {
		agents := p.live()
		var err error
		if len(agents) >= len(gen.Slots) {
			var placed map[int]Advert
			var usable []Advert
			if usable, err = matching(p.cfg.Pool, gen.Slots, agents); err == nil {
				placed, err = place(p.cfg.Pool, gen.Slots, usable)
			}
			if err == nil {
				if p.offer(ctx, gen, placed) {
					p.placed[gen.Gen] = placed
					gen.Agents = placedAgents(gen, placed)
					p.report(gen, placed)
					go p.watch(ctx, gen, placed)
					return nil
				}
				continue
			}
			if unplaceable.IsZero() {
				unplaceable = time.Now()
			} else if time.Since(unplaceable) > tm.HeartbeatTimeout {
				return err
			}
		} else {
			unplaceable = time.Time{}
		}
		if !said && p.cfg.Log != nil && time.Since(began) > tm.HeartbeatEvery {
			fmt.Fprintf(p.cfg.Log, "waiting for %s of pool %s (%d free now)\n", count(len(gen.Slots), "agent"), p.cfg.Pool, len(agents))
			said = true
		}
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-deadline:
			if err != nil {
				return err
			}
			return fmt.Errorf("pool %s: %d of the %d agents the plan needs free within %v", p.cfg.Pool, len(agents), len(gen.Slots), wait)
		case <-p.change:
		case <-tick.C:
		}
	}
}

// offer offers every placed agent its slot and waits for the answers: true
// when all confirmed. Otherwise those that did not are set aside until they
// are heard again, and the others are let go. One that did not confirm in
// time is told to stop the generation and is released: should the offer
// reach it late, it would otherwise serve the generation, its slot by then
// another agent's, and stay held until the coordinator ends.
func (p *PoolLauncher) offer(ctx context.Context, gen *Generation, placed map[int]Advert) bool {
	host, _ := os.Hostname()
	who := fmt.Sprintf("host %s (pid %d)", host, os.Getpid())
	waiting := map[string]bool{}
	for _, s := range gen.Slots {
		ad := placed[s.Worker]
		waiting[ad.Agent] = true
		p.send(ad.Agent, agentOrder{Kind: orderOffer, Claim: p.claim, Run: gen.Run, Gen: gen.Gen, Slot: s, Coordinator: who, Timings: &p.cfg.Timings})
	}
	timeout := time.NewTimer(p.cfg.Timings.ConfirmTimeout)
	defer timeout.Stop()
	ok := true
	for len(waiting) > 0 {
		select {
		case a := <-p.answers:
			if !waiting[a.Agent] || a.Gen != gen.Gen {
				continue
			}
			delete(waiting, a.Agent)
			if a.OK {
				p.hold(a.Agent)
				continue
			}
			ok = false
			p.setAside(a.Agent)
		case <-timeout.C:
			for id := range waiting {
				if p.cfg.Log != nil {
					fmt.Fprintf(p.cfg.Log, "graphpipe: agent %s did not confirm within %v: taken for dead\n", id, p.cfg.Timings.ConfirmTimeout)
				}
				p.send(id, agentOrder{Kind: orderStop, Claim: p.claim, Run: gen.Run, Gen: gen.Gen})
				p.send(id, agentOrder{Kind: orderRelease, Claim: p.claim})
				p.setAside(id)
			}
			waiting, ok = nil, false
		case <-ctx.Done():
			return false
		}
	}
	if !ok {
		p.Stop(gen, true)
	}
	return ok
}

// placedAgents is the agent placed on each of gen's worker ids.
func placedAgents(gen *Generation, placed map[int]Advert) []string {
	out := make([]string, len(gen.Slots))
	for _, s := range gen.Slots {
		if s.Worker >= 0 && s.Worker < len(out) {
			out[s.Worker] = placed[s.Worker].Agent
		}
	}
	return out
}

// watch fails gen (gen.Lost) as soon as one of its agents has not been
// heard for the heartbeat timeout: one that died before it joined would
// otherwise keep the coordinator waiting for the join timeout.
func (p *PoolLauncher) watch(ctx context.Context, gen *Generation, placed map[int]Advert) {
	tick := time.NewTicker(p.cfg.Timings.HeartbeatEvery / 2)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		for _, s := range gen.Slots {
			ad := placed[s.Worker]
			p.mu.Lock()
			quiet := time.Since(p.seen[ad.Agent].last)
			p.mu.Unlock()
			if quiet > p.cfg.Timings.HeartbeatTimeout && gen.Lost != nil {
				p.setAside(ad.Agent)
				gen.Lost(&runtime.SilentError{Who: fmt.Sprintf("agent %s of pool %s (host %s, pid %d), worker %d (stage %d, replica %d),",
					ad.Agent, p.cfg.Pool, ad.Host, ad.PID, s.Worker, s.Stage, s.Replica), Silent: quiet})
				return
			}
		}
	}
}

func (p *PoolLauncher) hold(id string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.held[id] = p.seen[id].ad
}

// holding is the ids of the agents it holds.
func (p *PoolLauncher) holding() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for id := range p.held {
		out = append(out, id)
	}
	return out
}

// setAside stops counting on an agent until it is heard again: it refused
// an offer, did not confirm one or fell silent.
func (p *PoolLauncher) setAside(id string) {
	p.mu.Lock()
	p.excl[id] = time.Now()
	delete(p.held, id)
	p.mu.Unlock()
}

func (p *PoolLauncher) send(agent string, o agentOrder) {
	b, _ := json.Marshal(o)
	p.t.Publish(poolAgent(p.cfg.Pool, agent), b)
}

// report says which agent runs which worker, a line per plan node.
func (p *PoolLauncher) report(gen *Generation, placed map[int]Advert) {
	if p.cfg.Log == nil {
		return
	}
	byNode := map[int][]string{}
	var nodes []int
	host := map[int]string{}
	for _, s := range gen.Slots {
		if _, ok := byNode[s.Node]; !ok {
			nodes = append(nodes, s.Node)
		}
		ad := placed[s.Worker]
		host[s.Node] = ad.Host
		byNode[s.Node] = append(byNode[s.Node], fmt.Sprintf("worker %d (stage %d) on agent %s (pid %d, %s)", s.Worker, s.Stage, ad.Agent, ad.PID, ad.Device))
	}
	sort.Ints(nodes)
	for _, n := range nodes {
		fmt.Fprintf(p.cfg.Log, "pool %s: node %d on host %s: %s\n", p.cfg.Pool, n, host[n], strings.Join(byNode[n], ", "))
	}
}

// Capacity is how many agents it could take now: its own and the free
// ones, heard within the heartbeat timeout (an elastic run's device count).
func (p *PoolLauncher) Capacity() int { return len(p.live()) }

// Placed is the agent each worker of generation gen was given.
func (p *PoolLauncher) Placed(gen uint32) map[int]Advert { return p.placed[gen] }

// Stop tells a failed generation's agents to leave it at once; a finished
// generation's leave by themselves. An agent of a failed generation not
// heard for two heartbeats is set aside until it is heard again: it is
// likely the one lost, whose worker's silence can be noticed (by the
// coordinator's watch of the workers' heartbeats) up to a beat before its
// adverts have been silent for the heartbeat timeout; offered to the next
// generation, it would hold the restart up for the confirmation timeout.
// A live one
// is heard again within a beat.
func (p *PoolLauncher) Stop(gen *Generation, failed bool) {
	if !failed {
		return
	}
	for _, id := range p.holding() {
		p.send(id, agentOrder{Kind: orderStop, Claim: p.claim, Run: gen.Run, Gen: gen.Gen})
		p.mu.Lock()
		quiet := time.Since(p.seen[id].last) > 2*p.cfg.Timings.HeartbeatEvery
		p.mu.Unlock()
		if quiet {
			p.setAside(id)
		}
	}
}

// Close gives every agent it holds back to the pool, and those it set
// aside that still say they are its own (one that came back after a
// SIGSTOP: without the release it would keep the run's subscriptions until
// the coordinator's silence frees it), and stops listening.
func (p *PoolLauncher) Close() error {
	ids := p.holding()
	p.mu.Lock()
	for id, s := range p.seen {
		if _, held := p.held[id]; !held && s.ad.Claim == p.claim {
			ids = append(ids, id)
		}
	}
	p.mu.Unlock()
	for _, id := range ids {
		p.send(id, agentOrder{Kind: orderRelease, Claim: p.claim})
	}
	p.mu.Lock()
	p.held = map[string]Advert{}
	p.mu.Unlock()
	for _, u := range p.unsub {
		u()
	}
	p.unsub = nil
	return nil
}

// joinDeadline fires when a launcher has waited long enough for its
// workers to join, wait: gen's Wait where it sets one, else the launcher's
// timeout; nil (never) where neither is positive. stop releases its timer.
func joinDeadline(timeout time.Duration, gen *Generation) (deadline <-chan time.Time, wait time.Duration, stop func()) {
	wait = timeout
	if gen.Wait > 0 {
		wait = gen.Wait
	}
	if wait <= 0 {
		return nil, wait, func() {}
	}
	t := time.NewTimer(wait)
	return t.C, wait, func() { t.Stop() }
}
