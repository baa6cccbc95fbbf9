package profile

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	goruntime "runtime"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/graphpipe/graphpipe/plan"
	"github.com/graphpipe/graphpipe/runtime/wire"
)

// RunCostsResult is every measurement of what a run pays beside its ops
// (MeasureRunCosts), as graphpipe profile --json prints it.
type RunCostsResult struct {
	// InProcess: the program could not start measuring children (it does
	// not call Child), so the workers were goroutines of this process.
	InProcess bool `json:"in_process,omitempty"`
	// LinkSizes: the messages probed, bytes; OneWay their mean one-way
	// times, from the send's start to the receiver's taking (Idle: a round
	// trip halved), Send the sender's send call, Recv the receiver's taking
	// one that has landed, each in seconds. HoldIdle and HoldBusy: a small
	// message's one-way time with the sender waiting after its send and
	// with it computing on (SendHoldS is the difference).
	LinkSizes []int     `json:"link_sizes"`
	OneWay    []float64 `json:"link_one_way_s"`
	Idle      []float64 `json:"link_round_trip_half_s"`
	HoldIdle  float64   `json:"hold_idle_s"`
	HoldBusy  float64   `json:"hold_busy_s"`
	Send      []float64 `json:"send_s"`
	Recv      []float64 `json:"recv_s"`
	// JoinWorkers and JoinS: per join size k probed (joins), its messages'
	// typical one-way time, seconds.
	JoinWorkers []int     `json:"join_workers"`
	JoinS       []float64 `json:"join_one_way_s"`
	// RingReplicas, RingSizes and RingS: the ring all-reduces timed, a
	// round's mean seconds per replica count and size.
	RingReplicas []int       `json:"ring_replicas"`
	RingSizes    []int       `json:"ring_sizes"`
	RingS        [][]float64 `json:"ring_s"`
	// GoS: when the coordinator's go reached each worker (by its index in
	// the order told) after it began to tell them, mean seconds over
	// every round; IterWorkers and ReportS: per worker count, what a round
	// took after the last go arrived (the reports), mean seconds.
	GoS         []float64 `json:"go_s"`
	IterWorkers []int     `json:"iteration_workers"`
	ReportS     []float64 `json:"report_s"`
	// BusyS, on a CPU: a pass of a busy worker's model with k workers busy at
	// once (index k-1), each worker's mean seconds, averaged (the median
	// over rounds).
	BusyS []float64 `json:"busy_s,omitempty"`
}

// RunCostsPlan says how much MeasureRunCosts measures.
type RunCostsPlan struct {
	Cores int  // the host's logical cores
	CPU   bool // measure the sharing of cores (CoreSlowdown): workers compute on them
	Quick bool
}

// MeasureRunCosts measures what a run pays beside its ops on this host, as
// workers on it pay it: messages between two workers over NATS (an
// embedded server on loopback, the runtime's reliable endpoints, tensors
// encoded as workers encode them) at sizes from a few hundred bytes to
// megabytes, with what the send call and taking a landed message cost; the
// ring all-reduce among 2 (and 3) replicas; the coordinator's go and the
// reports of 1 to several workers; and, on a CPU, the slowdown of an op
// with k workers busy at once, each with its share of the cores. The
// workers are processes of their own, as a run's are, where the program
// calls Child. It returns the fitted costs and every measurement.
func MeasureRunCosts(o RunCostsPlan) (plan.RunCosts, *RunCostsResult, error) {
	var rc plan.RunCosts
	res := &RunCostsResult{InProcess: !childCapable.Load()}
	cores := max(1, o.Cores)
	rc.HostCores = cores
	srv, err := wire.StartEmbedded(0)
	if err != nil {
		return rc, nil, err
	}
	defer srv.Shutdown()
	w := &workers{srv: srv, inProcess: res.InProcess}
	if err := w.links(o, res, &rc); err != nil {
		return rc, nil, err
	}
	if err := w.joins(o, res, &rc); err != nil {
		return rc, nil, err
	}
	if err := w.rings(o, res, &rc); err != nil {
		return rc, nil, err
	}
	if err := w.iterations(o, res, &rc); err != nil {
		return rc, nil, err
	}
	if o.CPU {
		if err := coreSlowdown(o, res, &rc); err != nil {
			return rc, nil, err
		}
	}
	return rc, res, nil
}

// linkSizes are the message sizes probed, and the rounds per size.
func linkSizes(quick bool) ([]int, int) {
	if quick {
		return []int{1 << 10, 64 << 10, 1 << 20}, 10
	}
	return []int{256, 4 << 10, 64 << 10, 1 << 20, 8 << 20}, 60
}

// workers starts the measurements' workers: measuring children connected
// to srv, or goroutines of this process.
type workers struct {
	srv       *wire.Embedded
	inProcess bool
	run       int // numbers the probes' runs
}

// started is a set of workers: their stop and, for ring workers, their
// answers.
type started struct {
	procs []*proc
	// answering: how many of them answer (all but echoes)
	answering int
	wg        sync.WaitGroup
	mu        sync.Mutex
	errs      []error
	out       map[int32][]byte // each worker's answer, as JSON
	stop      func()
}

// start starts one worker per spec (its ID set), each with GOMAXPROCS
// procs; in process, as goroutines.
func (w *workers) start(specs []childSpec, procs int) (*started, error) {
	s := &started{out: map[int32][]byte{}}
	for _, spec := range specs {
		if !untilStopped(spec.Mode) {
			s.answering++
		}
	}
	if !w.inProcess {
		for _, spec := range specs {
			spec.URL, spec.Token = w.srv.URL(), w.srv.Token
			p, err := startChild(spec, procs)
			if err != nil {
				for _, q := range s.procs {
					q.stop()
				}
				return nil, err
			}
			s.procs = append(s.procs, p)
		}
		s.stop = func() {
			for _, p := range s.procs {
				p.stop()
			}
		}
		return s, nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	var closers []func()
	s.stop = func() {
		cancel()
		s.wg.Wait()
		for _, c := range closers {
			c()
		}
	}
	for _, spec := range specs {
		t, err := dial(w.srv)
		if err != nil {
			s.stop()
			return nil, err
		}
		ep, err := wire.NewEndpoint(t, spec.Run, 1, spec.ID)
		if err != nil {
			t.Close()
			s.stop()
			return nil, err
		}
		closers = append(closers, ep.Close, func() { t.Close() })
		s.wg.Add(1)
		go func(spec childSpec, chunk int) {
			defer s.wg.Done()
			answer, err := work(ctx, ep, spec, chunk)
			s.mu.Lock()
			defer s.mu.Unlock()
			if answer != nil {
				s.out[spec.ID], _ = json.Marshal(answer)
			}
			if err != nil && ctx.Err() == nil {
				s.errs = append(s.errs, err)
			}
		}(spec, max(t.MaxPayload()-256, 64))
	}
	return s, nil
}

// work is a link worker's part (echo, probe or ring) on ep: its answer,
// nil for an echo, which answers until ctx ends. chunk is its transport's
// chunk size.
func work(ctx context.Context, ep *wire.Endpoint, spec childSpec, chunk int) (any, error) {
	switch spec.Mode {
	case "echo":
		return nil, echo(ctx, ep, spec)
	case "probe":
		return probe(ctx, ep, int32(spec.Peers), spec.Stamper, chunk, spec.Sizes, spec.Reps)
	case "join":
		return nil, joinWorker(ctx, ep, spec)
	case "ring":
		return ring(ctx, ep, int(spec.ID)-1, spec.Peers, spec.Sizes, spec.Reps)
	}
	return nil, fmt.Errorf("unknown mode %q", spec.Mode)
}

// answers tells the workers to go and gathers the answers of those that
// answer (all but echoes), by ID, as JSON.
func (s *started) answers() (map[int32][]byte, error) {
	if s.procs == nil {
		s.mu.Lock()
		n := len(s.out)
		s.mu.Unlock()
		for n < s.answering { // the echoes answer until stopped
			time.Sleep(time.Millisecond)
			s.mu.Lock()
			n = len(s.out)
			if len(s.errs) > 0 {
				n = s.answering
			}
			s.mu.Unlock()
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.out, errors.Join(s.errs...)
	}
	for _, p := range s.procs {
		if err := p.start(); err != nil {
			return nil, err
		}
	}
	for i, p := range s.procs {
		if untilStopped(p.mode) {
			continue
		}
		var answer json.RawMessage
		if err := p.answer(&answer); err != nil {
			return nil, fmt.Errorf("profile: %s worker %d: %w", p.mode, i+1, err)
		}
		s.out[p.id] = answer
	}
	return s.out, nil
}

// parent is the measuring process's endpoint on a fresh run of the
// probes, and the chunk size of its transport.
func (w *workers) parent() (ep *wire.Endpoint, run string, chunk int, closeEp func(), err error) {
	w.run++
	run = "probe" + strconv.Itoa(w.run)
	t, err := dial(w.srv)
	if err != nil {
		return nil, "", 0, nil, err
	}
	if ep, err = wire.NewEndpoint(t, run, 1, parentID); err != nil {
		t.Close()
		return nil, "", 0, nil, err
	}
	return ep, run, max(t.MaxPayload()-256, 64), func() { ep.Close(); t.Close() }, nil
}

// links probes the NATS path between two workers, each a process with
// its share of the cores, through this process's server, as a run's
// workers talk through their coordinator's: each size's one-way time, send
// call and receive (probe), fitted to NATSLat/NATSBW (joins then sets
// the latency), SendS/SendBW and
// RecvS/RecvBW, and how long a message waits for its sender computing on
// (SendHoldS, at most holdSpin).
func (w *workers) links(o RunCostsPlan, res *RunCostsResult, rc *plan.RunCosts) error {
	sizes, reps := linkSizes(o.Quick)
	w.run++
	run := "link" + strconv.Itoa(w.run)
	s, err := w.start([]childSpec{{Mode: "echo", Run: run, ID: 2, To: 1}, {Mode: "echo", Run: run, ID: 3, To: 1, Reply: 8, Stamp: true},
		{Mode: "probe", Run: run, ID: 1, Peers: 2, Stamper: 3, Sizes: sizes, Reps: reps}}, max(1, o.Cores/2))
	if err != nil {
		return err
	}
	out, err := s.answers()
	s.stop()
	if err != nil {
		return err
	}
	var lp linkProbe
	if err := json.Unmarshal(out[1], &lp); err != nil {
		return fmt.Errorf("profile: the link probe's answer: %w", err)
	}
	res.LinkSizes, res.OneWay, res.Idle, res.Send, res.Recv = lp.Sizes, lp.OneWay, lp.Idle, lp.Send, lp.Recv
	res.HoldIdle, res.HoldBusy = lp.HoldIdle, lp.HoldBusy
	rc.SendHoldS = min(max(0, lp.HoldBusy-lp.HoldIdle), holdSpin.Seconds())
	rc.NATSLat, rc.NATSBW = fitLinkAnyway(samples(res.LinkSizes, res.OneWay))
	rc.SendS, rc.SendBW = fitCost(res.LinkSizes, res.Send)
	rc.RecvS, rc.RecvBW = fitCost(res.LinkSizes, res.Recv)
	return nil
}

// linkProbe is what probe measured: per message size (bytes, as encoded),
// the mean one-way time from the send call's start until the receiver has
// taken the message (OneWay), and a round trip halved (Idle); the send
// call; and the taking of a message that has landed; in seconds. And, for
// messages of holdBytes, the one-way time with the sender waiting after
// its send and with it computing holdSpin on, in turns (HoldIdle,
// HoldBusy). Typical means (typical), not medians: an iteration pays for
// dozens of messages in a row, and so for their tail (a worker woken late)
// as often as it comes; but not for the rare stall of this kind of
// machine, which a run's median iteration does not see.
type linkProbe struct {
	Sizes    []int     `json:"sizes"`
	OneWay   []float64 `json:"one_way_s"`
	Idle     []float64 `json:"idle_one_way_s"`
	Send     []float64 `json:"send_s"`
	Recv     []float64 `json:"recv_s"`
	HoldIdle float64   `json:"hold_idle_s"`
	HoldBusy float64   `json:"hold_busy_s"`
}

// holdSpin is how long the probe computes after a send to see how long a
// message waits for its sender's computing (Device.SendHoldS): a stage
// computes on after it sends, and on a host whose cores are all busy the
// message travels only once a core is free (bench/history.md has the one-way
// times this was chosen from). holdBytes is the size of the small presets'
// messages.
const (
	holdSpin  = time.Millisecond
	holdBytes = 4 << 10
)

// wakeGap is how long the workers wait before each message the one-way
// times, the send hold and an iteration's go and reports are timed with: a
// run's stages wait on their peers for hundreds of microseconds to
// milliseconds between messages, and a process that has waited that long
// wakes later than one that waited a few microseconds (on this project's
// 2-core virtual machine a 4 KiB message took 80 µs one way back to back,
// 155-200 µs after a gap of 0.1-3 ms: bench/history.md).
const wakeGap = time.Millisecond

// passSpin is how long the probe computes before each message it times one
// way, as a stage computes a pass before it sends.
const passSpin = 200 * time.Microsecond

// spin computes for d, as a stage does between its messages.
func spin(d time.Duration) {
	x := 1.0
	for start := time.Now(); time.Since(start) < d; {
		for i := 0; i < 100; i++ {
			x = x*1.0000001 + 1e-9
		}
	}
	sink = x
}

var sink float64

// stamped sends msg to the stamping echo stamper as message stamps and
// returns the time from the send's start to the echo's taking of it (on
// the host's clock, which the echo's answer carries) and the send call's,
// computing busy after the send.
func stamped(ctx context.Context, ep *wire.Endpoint, stamper int32, stamps int64, msg []byte, busy time.Duration) (way, sent float64, err error) {
	start := time.Now()
	if err := ep.Send(ctx, stamper, echoKey(stamps), msg); err != nil {
		return 0, 0, err
	}
	sent = time.Since(start).Seconds()
	spin(busy)
	got, err := ep.Receive(ctx, replyKey(stamps, stamper))
	if err == nil && len(got) < 8 {
		err = fmt.Errorf("a stamp of %d bytes", len(got))
	}
	if err != nil {
		return 0, 0, err
	}
	return float64(int64(binary.LittleEndian.Uint64(got))-start.UnixNano()) / 1e9, sent, nil
}

// probe sends messages of each size (float32 tensors encoded as a worker
// encodes them), reps times each after a warm-up: to the stamping echo
// stamper, one way (stamped), each after waiting wakeGap; then to the echo peer and back, reps round
// trips and reps more each answer taken only once it has landed. Then
// messages of holdBytes to the stamper, reps pairs (each after wakeGap), the sender waiting
// after one and computing holdSpin after the other. chunk is the
// transport's chunk size.
func probe(ctx context.Context, ep *wire.Endpoint, peer, stamper int32, chunk int, sizes []int, reps int) (linkProbe, error) {
	var lp linkProbe
	round, stamps := int64(0), int64(0)
	tensors := func(size int) ([]byte, error) {
		return wire.EncodeTensors([]wire.Tensor{{Name: "x", Shape: []int{size / 4}, F32: make([]float32, size/4)}})
	}
	for _, size := range sizes {
		msg, err := tensors(size)
		if err != nil {
			return lp, err
		}
		var ways, sends []float64
		for i := -1; i < reps; i++ { // -1 warms up
			time.Sleep(wakeGap)
			spin(passSpin)
			way, sent, err := stamped(ctx, ep, stamper, stamps, msg, 0)
			stamps++
			if err != nil {
				return lp, fmt.Errorf("profile: probing links with %d-byte messages: %w", size, err)
			}
			if i >= 0 {
				ways, sends = append(ways, way), append(sends, sent)
			}
		}
		var trips, recvs []float64
		for i := -1; i < 2*reps; i++ { // -1 warms up; then reps round trips, reps landed receives
			before := ep.Stats().Received
			start := time.Now()
			if err := ep.Send(ctx, peer, echoKey(round), msg); err != nil {
				return lp, err
			}
			if i >= reps { // wait until the answer has landed, then time taking it
				if err := landed(ctx, ep, before, (len(msg)+chunk-1)/chunk); err != nil {
					return lp, err
				}
				start = time.Now()
			}
			got, err := ep.Receive(ctx, replyKey(round, peer))
			if err == nil {
				_, err = wire.DecodeTensors(got)
			}
			if err != nil {
				return lp, fmt.Errorf("profile: probing links with %d-byte messages: %w", size, err)
			}
			took := time.Since(start).Seconds()
			round++
			switch {
			case i < 0:
			case i < reps:
				trips = append(trips, took)
			default:
				recvs = append(recvs, took)
			}
		}
		lp.Sizes = append(lp.Sizes, len(msg))
		lp.OneWay = append(lp.OneWay, typical(ways))
		lp.Idle = append(lp.Idle, mean(trips)/2)
		lp.Send = append(lp.Send, typical(sends))
		lp.Recv = append(lp.Recv, typical(recvs))
	}
	msg, err := tensors(holdBytes)
	if err != nil {
		return lp, err
	}
	var idle, busy []float64
	for i := 0; i < reps; i++ {
		for _, d := range []time.Duration{0, holdSpin} {
			time.Sleep(wakeGap)
			way, _, err := stamped(ctx, ep, stamper, stamps, msg, d)
			stamps++
			if err != nil {
				return lp, fmt.Errorf("profile: probing a busy sender's messages: %w", err)
			}
			if d == 0 {
				idle = append(idle, way)
			} else {
				busy = append(busy, way)
			}
		}
	}
	lp.HoldIdle, lp.HoldBusy = typical(idle), typical(busy)
	return lp, nil
}

// landed waits until an answer of chunks chunks is whole at ep, which had
// received before chunks before it: a receive of it would not wait. It
// gives up after a second, which only makes the measurement of taking it
// include waiting.
func landed(ctx context.Context, ep *wire.Endpoint, before int64, chunks int) error {
	deadline := time.Now().Add(time.Second)
	for time.Now().Before(deadline) {
		if ep.Stats().Received >= before+int64(chunks) {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		time.Sleep(20 * time.Microsecond)
	}
	return nil
}

// samples pairs sizes with times for a fit.
func samples(sizes []int, times []float64) []KernelSample {
	out := make([]KernelSample, len(sizes))
	for i, s := range sizes {
		out[i] = KernelSample{Work: float64(s), Seconds: times[i]}
	}
	return out
}

// fitCost fits a cost that may not grow with the bytes, fixed +
// bytes/bw: FitLink where the times grow with the sizes, else the least
// of them, fixed, with nothing per byte (bw 0).
func fitCost(sizes []int, times []float64) (fixed, bw float64) {
	if lat, b, err := FitLink(samples(sizes, times)); err == nil {
		return lat, b
	}
	fixed = math.Inf(1)
	for _, t := range times {
		fixed = min(fixed, t)
	}
	return fixed, 0
}

// ringPlan is the replica counts and sizes the ring all-reduce is timed
// at, and the rounds of each.
func ringPlan(quick bool) (ks, sizes []int, reps int) {
	if quick {
		return []int{2}, []int{16 << 10, 1 << 20}, 10
	}
	return []int{2, 3}, []int{16 << 10, 256 << 10, 4 << 20}, 10
}

// rings times the ring all-reduce among k replicas, each a worker with its
// share of the cores, and fits a step (a chunk of bytes/k one way) to
// RingLat/RingBW.
func (w *workers) rings(o RunCostsPlan, res *RunCostsResult, rc *plan.RunCosts) error {
	ks, sizes, reps := ringPlan(o.Quick)
	res.RingReplicas, res.RingSizes = ks, sizes
	var steps []KernelSample
	for _, k := range ks {
		w.run++
		run := "ring" + strconv.Itoa(w.run)
		var specs []childSpec
		for r := 0; r < k; r++ {
			specs = append(specs, childSpec{Mode: "ring", Run: run, ID: int32(r + 1), Peers: k, Sizes: sizes, Reps: reps})
		}
		s, err := w.start(specs, max(1, o.Cores/k))
		if err != nil {
			return err
		}
		out, err := s.answers()
		s.stop()
		if err != nil {
			return err
		}
		var rounds []float64
		if err := json.Unmarshal(out[1], &rounds); err != nil || len(rounds) != len(sizes) {
			return fmt.Errorf("profile: ring replica 1's answer %s: %v", out[1], err)
		}
		res.RingS = append(res.RingS, rounds)
		for j, size := range sizes {
			steps = append(steps, KernelSample{Work: float64(size / k), Seconds: rounds[j] / float64(2*(k-1))})
		}
	}
	rc.RingLat, rc.RingBW = fitLinkAnyway(steps)
	return nil
}

// fitLinkAnyway is FitLink, or where the times do not grow with the bytes
// (noise from elsewhere on a busy machine), the largest message's rate
// and what the smallest took beyond it.
func fitLinkAnyway(samples []KernelSample) (latency, bandwidth float64) {
	if lat, bw, err := FitLink(samples); err == nil {
		return lat, bw
	}
	small, large := samples[0], samples[0]
	for _, s := range samples {
		if s.Work < small.Work {
			small = s
		}
		if s.Work > large.Work {
			large = s
		}
	}
	bandwidth = large.Work / large.Seconds
	return max(0, small.Seconds-small.Work/bandwidth), bandwidth
}

// iterationWorkers is the most workers the fixed cost of an iteration is
// timed with (1 to one more than the cores, at least 3), and the rounds of
// each count.
func iterationWorkers(cores int, quick bool) (int, int) {
	if quick {
		return 2, 20
	}
	return max(3, cores+1), 150
}

// iterations times the coordinator's part of an iteration with k = 1, 2,
// ... workers, the counts in turn, round after round, each after wakeGap
// (a run's workers wait for the go): a go to each of the
// first k workers in turn, then each one's report (sent at once), a JSON
// document of a worker's report's shape and size that this process decodes
// as a coordinator does (probeReport: decoding is most of what a
// coordinator spends on a report; bench/history.md has the figures). The go's
// arrival at worker w (its report says when, on the host's clock) after
// the first go was sent is fitted to GoS + w·GoWorkerS over every round;
// what a round takes after the last go arrived, to ReportS +
// k·ReportWorkerS over the counts' means.
func (w *workers) iterations(o RunCostsPlan, res *RunCostsResult, rc *plan.RunCosts) error {
	ks, reps := iterationWorkers(o.Cores, o.Quick)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	ep, run, _, closeEp, err := w.parent()
	if err != nil {
		return err
	}
	defer closeEp()
	var specs []childSpec
	for i := 0; i < ks; i++ {
		specs = append(specs, childSpec{Mode: "echo", Run: run, ID: int32(i + 1), To: parentID, Report: true})
	}
	s, err := w.start(specs, max(1, o.Cores/ks))
	if err != nil {
		return err
	}
	defer s.stop()
	goMsg := make([]byte, 64)
	tails := make([][]float64, ks)
	goes := make([][]float64, ks) // per worker index, its go's arrivals
	next := make([]int64, ks+1)   // per worker, its next round
	for i := 0; i <= reps; i++ {
		for k := 1; k <= ks; k++ {
			time.Sleep(wakeGap)
			start := time.Now()
			for id := 1; id <= k && err == nil; id++ {
				err = ep.Send(ctx, int32(id), echoKey(next[id]), goMsg)
			}
			came := make([]float64, k)
			for id := 1; id <= k && err == nil; id++ {
				var rep []byte
				if rep, err = ep.Receive(ctx, replyKey(next[id], int32(id))); err == nil {
					came[id-1], err = cameOf(rep, start)
				}
				next[id]++
			}
			if err != nil {
				return fmt.Errorf("profile: timing iterations of %d workers: %w", k, err)
			}
			if i == 0 { // the first round warms up
				continue
			}
			last := 0.0
			for j, t := range came {
				goes[j], last = append(goes[j], t), max(last, t)
			}
			tails[k-1] = append(tails[k-1], time.Since(start).Seconds()-last)
		}
	}
	var idx []int
	var arrive []float64
	for j := range goes {
		res.GoS = append(res.GoS, typical(goes[j]))
		for _, t := range goes[j] {
			idx, arrive = append(idx, j), append(arrive, t)
		}
	}
	for k := 1; k <= ks; k++ {
		res.IterWorkers, res.ReportS = append(res.IterWorkers, k), append(res.ReportS, typical(tails[k-1]))
	}
	rc.GoS, rc.GoWorkerS = fitAffine(idx, arrive)
	rc.ReportS, rc.ReportWorkerS = fitAffine(res.IterWorkers, res.ReportS)
	return nil
}

// fitAffine fits y = a + b·x by least squares, b at least 0 (a at least
// 0).
func fitAffine(xs []int, ys []float64) (a, b float64) {
	n := float64(len(xs))
	var sx, sy, sxx, sxy float64
	for i, x := range xs {
		fx := float64(x)
		sx, sy, sxx, sxy = sx+fx, sy+ys[i], sxx+fx*fx, sxy+fx*ys[i]
	}
	if det := n*sxx - sx*sx; det > 0 {
		b = (n*sxy - sx*sy) / det
	}
	if b < 0 {
		b = 0
	}
	return max(0, (sy-b*sx)/n), b
}

// busyPlan is the most workers the sharing of cores is timed with (twice
// the cores, at least 3, at most plan.MaxCoreSlowdown), how long each
// round runs, and how many rounds of every count there are.
func busyPlan(cores int, quick bool) (ks int, seconds float64, rounds int) {
	if quick {
		return min(plan.MaxCoreSlowdown, max(2, cores+1)), 0.1, 1
	}
	return min(plan.MaxCoreSlowdown, max(3, 2*cores)), 0.15, 5
}

// coreSlowdown times busy workers k = 1, 2, ... at once, each with
// GOMAXPROCS cores/k (at least 1) as local workers get (in process: the
// process's), in rounds of every k, and records each k's time over one
// worker's with all the cores, the median over the rounds of each round's
// ratio (a round's counts are timed close together, under the same load
// from elsewhere), made never to fall with k nor to be below 1 (monotone).
func coreSlowdown(o RunCostsPlan, res *RunCostsResult, rc *plan.RunCosts) error {
	ks, seconds, rounds := busyPlan(o.Cores, o.Quick)
	pools := make([]*busyPool, ks+1) // per k: its workers, each with cores/k
	defer func() {
		for _, p := range pools {
			if p != nil {
				p.stop()
			}
		}
	}()
	ratios := make([][]float64, ks)
	times := make([][]float64, ks)
	for r := 0; r < rounds; r++ {
		var one float64
		for k := 1; k <= ks; k++ {
			if pools[k] == nil {
				p, err := newBusyPool(k, max(1, o.Cores/k), res.InProcess)
				if err != nil {
					return err
				}
				pools[k] = p
			}
			t, err := pools[k].round(seconds)
			if err != nil {
				return err
			}
			if k == 1 {
				one = t
			}
			ratios[k-1], times[k-1] = append(ratios[k-1], t/one), append(times[k-1], t)
		}
	}
	slow := make([]float64, ks)
	for k := range slow {
		slow[k] = median(ratios[k])
		res.BusyS = append(res.BusyS, median(times[k]))
	}
	rc.CoreSlowdown = plan.NewSlowdowns(monotone(slow)...)
	return nil
}

// monotone is the closest list to xs, each at least 1, that never falls
// (least squares: pool adjacent violators): more workers busy never make an
// op faster than alone, so a fall is noise.
func monotone(xs []float64) []float64 {
	type block struct {
		sum float64
		n   int
	}
	var bs []block
	for _, x := range xs {
		bs = append(bs, block{max(x, 1), 1})
		for len(bs) > 1 && bs[len(bs)-2].sum/float64(bs[len(bs)-2].n) > bs[len(bs)-1].sum/float64(bs[len(bs)-1].n) {
			last := bs[len(bs)-1]
			bs = bs[:len(bs)-1]
			bs[len(bs)-1].sum += last.sum
			bs[len(bs)-1].n += last.n
		}
	}
	var out []float64
	for _, b := range bs {
		for i := 0; i < b.n; i++ {
			out = append(out, b.sum/float64(b.n))
		}
	}
	return out
}

// busyPool is k busy workers, each a measuring child with its GOMAXPROCS,
// or in process a goroutine.
type busyPool struct {
	procs []*proc
	gos   []chan float64 // in process: each worker's go, carrying the seconds
	out   chan busyAnswer
	quit  chan struct{}
}

type busyAnswer struct {
	t   float64
	err error
}

// newBusyPool starts k busy workers, each with procs cores.
func newBusyPool(k, procs int, inProcess bool) (*busyPool, error) {
	p := &busyPool{out: make(chan busyAnswer, k), quit: make(chan struct{})}
	for i := 0; i < k; i++ {
		if !inProcess {
			c, err := startChild(childSpec{Mode: "busy", Seconds: 0}, procs)
			if err != nil {
				p.stop()
				return nil, err
			}
			p.procs = append(p.procs, c)
			continue
		}
		b, err := newBusy()
		if err != nil {
			p.stop()
			return nil, err
		}
		g := make(chan float64)
		p.gos = append(p.gos, g)
		go func() {
			goruntime.LockOSThread()
			defer goruntime.UnlockOSThread()
			for {
				select {
				case s := <-g:
					t, err := b.run(s)
					p.out <- busyAnswer{t, err}
				case <-p.quit:
					return
				}
			}
		}()
	}
	return p, nil
}

// round has every worker busy for seconds at once and returns their
// mean pass times, averaged.
func (p *busyPool) round(seconds float64) (float64, error) {
	var times []float64
	if p.procs == nil {
		for _, g := range p.gos {
			g <- seconds
		}
		var errs []error
		for range p.gos {
			a := <-p.out
			times, errs = append(times, a.t), append(errs, a.err)
		}
		return mean(times), errors.Join(errs...)
	}
	for _, c := range p.procs {
		if _, err := fmt.Fprintf(c.in, "go %g\n", seconds); err != nil {
			return 0, err
		}
	}
	for i, c := range p.procs {
		var t float64
		if err := c.next(&t); err != nil {
			return 0, fmt.Errorf("profile: busy worker %d of %d: %w", i+1, len(p.procs), err)
		}
		times = append(times, t)
	}
	return mean(times), nil
}

// stop ends the workers.
func (p *busyPool) stop() {
	close(p.quit)
	for _, c := range p.procs {
		c.stop()
	}
}

// typical is the mean of xs without its slowest tenth: what a median
// iteration pays for many of a kind in a row. The mean of all of them
// swings with the rare stall of a shared virtual machine (a vCPU held for
// milliseconds), which a run's median iteration does not see.
func typical(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return mean(s[:len(s)-len(s)/10])
}

func mean(xs []float64) float64 {
	s := 0.0
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}
