package supervise

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sync"

	"github.com/graphpipe/graphpipe/runtime"
	"github.com/graphpipe/graphpipe/runtime/wire"
)

// Agent is a long-lived worker of a pool: it advertises itself on the
// pool's subject every heartbeat, takes the slot a coordinator offers,
// trains it, and stays for the next generation or run. A coordinator holds
// it from its first confirmed offer until it releases it, or falls silent
// for the heartbeat timeout.
type Agent struct {
	Pool    string
	Host    string // its host's label; "": os.Hostname
	Profile string // the device profile it plans as: "cpu", "h100", ...
	Memory  int64  // its device's memory in bytes, which it advertises (0: not said)
	// Log hears what it joins and runs; nil: nothing said.
	Log func(format string, args ...any)
	// Config is its worker process's (runtime.Join.Config): Device (nil:
	// the CPU), Precision, KillPoints; and Timings, its adverts' heartbeat
	// and how long a silent coordinator holds it.
	Config runtime.Config

	id string
	mu sync.Mutex // guards id (for ID) and ad
	ad Advert
}

// agentEvent is what the agent's loop acts on, from its subscription and
// from the goroutines it started.
type agentEvent struct {
	order *agentOrder
	done  *serveDone
	lost  *holdLost
}

type serveDone struct {
	seq int
	err error
}

type holdLost struct {
	seq   int
	cause error
}

// agentState is what the agent's loop keeps between events.
type agentState struct {
	holdSeq, serveSeq int
	endHold           context.CancelCauseFunc // nil while free
	holdCtx           context.Context
	endServe          context.CancelCauseFunc // nil while not serving
	gen               uint32
	releasing         bool // released while serving: free once the serving ends
}

// ID is the agent's id in its pool (set once Serve has started).
func (a *Agent) ID() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.id
}

// Serve runs the agent until ctx ends.
func (a *Agent) Serve(ctx context.Context, t wire.Transport) error {
	if err := CheckPoolName(a.Pool); err != nil {
		return err
	}
	if a.Log == nil {
		a.Log = func(string, ...any) {}
	}
	if a.Host == "" {
		a.Host, _ = os.Hostname()
	}
	a.mu.Lock()
	a.id = randomHex(6)
	a.ad = Advert{Agent: a.id, Host: a.Host, PID: os.Getpid(), Device: runtime.DeviceLabel(a.Config.Device), Profile: a.Profile, Memory: a.Memory}
	a.mu.Unlock()
	events := make(chan agentEvent, 16)
	unsub, err := t.Subscribe(poolAgent(a.Pool, a.id), func(b []byte) {
		var o agentOrder
		if json.Unmarshal(b, &o) == nil {
			events <- agentEvent{order: &o}
		}
	})
	if err != nil {
		return err
	}
	defer unsub()
	go a.Config.Timings.Beat(ctx, t, poolAdverts(a.Pool), a.advert)
	a.Log("agent %s of pool %s on host %s (pid %d), computing on %s: waiting for a coordinator", a.id, a.Pool, a.Host, os.Getpid(), a.ad.Device)
	var st agentState
	for {
		select {
		case <-ctx.Done():
			st.leave(context.Cause(ctx))
			return nil
		case e := <-events:
			a.handle(ctx, t, &st, e, events)
		}
	}
}

func (a *Agent) advert() []byte {
	a.mu.Lock()
	defer a.mu.Unlock()
	b, _ := json.Marshal(a.ad)
	return b
}

func (a *Agent) setAdvert(f func(ad *Advert), t wire.Transport) {
	a.mu.Lock()
	f(&a.ad)
	a.mu.Unlock()
	t.Publish(poolAdverts(a.Pool), a.advert()) // at once, not at the next beat
}

func (a *Agent) handle(ctx context.Context, t wire.Transport, st *agentState, e agentEvent, events chan agentEvent) {
	a.mu.Lock()
	claim := a.ad.Claim
	a.mu.Unlock()
	switch {
	case e.order != nil && e.order.Kind == orderOffer:
		a.offered(ctx, t, st, e.order, claim, events)
	case e.order != nil && e.order.Claim != claim:
		// a stop or release from a coordinator that no longer holds it
	case e.order != nil && e.order.Kind == orderStop:
		if st.endServe != nil && st.gen == e.order.Gen {
			st.endServe(errors.New("the coordinator ended the generation"))
		}
	case e.order != nil && e.order.Kind == orderRelease:
		if st.endServe != nil {
			st.releasing = true
			return
		}
		a.free(t, st, "released by run "+a.ad.Run)
	case e.done != nil && e.done.seq == st.serveSeq:
		st.endServe = nil
		if e.done.err != nil {
			a.Log("run %s (generation %d) failed here: %v", a.ad.Run, st.gen, e.done.err)
		}
		if st.releasing {
			a.free(t, st, "released by run "+a.ad.Run)
		}
	case e.lost != nil && e.lost.seq == st.holdSeq && st.endHold != nil:
		a.free(t, st, e.lost.cause.Error())
	}
}

// offered answers an offer: yes when free or held by the same coordinator
// (a new generation of its run), no when another holds it.
func (a *Agent) offered(ctx context.Context, t wire.Transport, st *agentState, o *agentOrder, claim string, events chan agentEvent) {
	answer := agentAnswer{Agent: a.id, Gen: o.Gen, OK: true}
	if claim != "" && claim != o.Claim {
		answer = agentAnswer{Agent: a.id, Gen: o.Gen, Why: "held by run " + a.ad.Run}
	}
	if !answer.OK {
		b, _ := json.Marshal(answer)
		t.Publish(poolClaims(a.Pool, o.Claim), b)
		return
	}
	if st.endServe != nil { // the last generation's serving goes first
		st.endServe(errors.New("a new generation started"))
		awaitServe(ctx, events, st.serveSeq)
		st.endServe = nil
	}
	if claim == "" {
		a.hold(ctx, t, st, o, events)
	}
	st.releasing = false
	a.setAdvert(func(ad *Advert) { ad.Claim, ad.Run, ad.Gen = o.Claim, o.Run, o.Gen }, t)
	b, _ := json.Marshal(answer)
	t.Publish(poolClaims(a.Pool, o.Claim), b)
	a.Log("joined run %s (generation %d) of the coordinator on %s as worker %d (stage %d, replica %d, node %d)",
		o.Run, o.Gen, o.Coordinator, o.Slot.Worker, o.Slot.Stage, o.Slot.Replica, o.Slot.Node)
	a.serve(st, t, o, events)
}

// awaitServe returns once the serving numbered seq has ended, dropping the
// events that come meanwhile (the agent is taken by a new offer).
func awaitServe(ctx context.Context, events <-chan agentEvent, seq int) {
	for {
		select {
		case e := <-events:
			if e.done != nil && e.done.seq == seq {
				return
			}
		case <-ctx.Done():
			return
		}
	}
}

// hold starts being held by o's coordinator: while it is silent for the
// heartbeat timeout (the run's, which the offer carries) the agent goes
// back to the pool.
func (a *Agent) hold(ctx context.Context, t wire.Transport, st *agentState, o *agentOrder, events chan<- agentEvent) {
	st.holdSeq++
	seq := st.holdSeq
	st.holdCtx, st.endHold = context.WithCancelCause(ctx)
	hctx := st.holdCtx
	tm := a.Config.Timings
	if o.Timings != nil { // the run's, so that one run keeps one heartbeat timeout
		tm = *o.Timings
	}
	if err := tm.WatchCoordinator(hctx, t, o.Run, st.endHold); err != nil {
		st.endHold(err)
	}
	go func() {
		<-hctx.Done()
		if c := context.Cause(hctx); c != nil && !errors.Is(c, errReleased) {
			events <- agentEvent{lost: &holdLost{seq: seq, cause: c}}
		}
	}()
}

var errReleased = errors.New("released")

// serve trains o's slot in a goroutine of its own.
func (a *Agent) serve(st *agentState, t wire.Transport, o *agentOrder, events chan<- agentEvent) {
	st.serveSeq++
	seq := st.serveSeq
	sctx, end := context.WithCancelCause(st.holdCtx)
	st.endServe, st.gen = end, o.Gen
	slot := o.Slot.Worker
	go func() {
		err := runtime.Serve(sctx, t, runtime.Join{Run: o.Run, Gen: o.Gen, Config: a.Config, Log: a.Log, Host: a.Host, Slot: &slot, Agent: a.id, Kind: a.Profile})
		end(nil)
		events <- agentEvent{done: &serveDone{seq: seq, err: err}}
	}()
}

// free ends the hold: the agent is the pool's again.
func (a *Agent) free(t wire.Transport, st *agentState, why string) {
	if st.endServe != nil {
		st.endServe(errors.New(why))
		st.endServe = nil
	}
	if st.endHold != nil {
		st.endHold(errReleased)
		st.endHold = nil
	}
	st.releasing = false
	a.setAdvert(func(ad *Advert) { ad.Claim = "" }, t)
	a.Log("back in pool %s (%s)", a.Pool, why)
}

// leave ends what the agent is doing as it stops.
func (st *agentState) leave(cause error) {
	if st.endServe != nil {
		st.endServe(cause)
	}
	if st.endHold != nil {
		st.endHold(errReleased)
	}
}

func (a *Agent) String() string {
	return fmt.Sprintf("agent %s of pool %s on %s", a.id, a.Pool, a.Host)
}
