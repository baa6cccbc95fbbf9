package profile

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/graphpipe/graphpipe/plan"
	"github.com/graphpipe/graphpipe/runtime/wire"
)

// A join is the shape of a graph pipeline's iteration on one host: k−1
// branch workers each compute a pass and send their activations to one
// join worker, which takes them all, computes, and sends a gradient back
// to each in turn (joinPass). Its messages travel while other workers
// compute, send and wake on the same cores, which a probe between two
// workers never sees (bench/history.md has the one-way times that showed
// it). joins times the one-way messages of joins of 2, 3, ... workers
// (NATSJoinS).

// joinPass is how long a join's workers compute between their messages:
// branch b computes b passes after the go before it sends (the branches'
// messages leave a pass apart, as stages of different work send theirs),
// the join two after taking them all, each branch one after taking its
// gradient. A short pass, as short as the small presets' stages compute:
// messages that leave soon after the go meet the go's own traffic and the
// other workers' waking, which a long pass lets settle, and a run's
// messages meet them (bench/history.md has the times this was chosen
// from).
const joinPass = 40 * time.Microsecond

// joinKey keys a join's messages: activations (Dir 'a') and gradients
// ('g') of round i, MB the branch (1..k−1).
func joinKey(i int64, branch int32, dir byte) wire.Key {
	return wire.Key{Iter: i, MB: branch, Edge: 1, Dir: dir}
}

// joinStamps is a join worker's report of round i to the measuring
// process: on the host's clock (ns), per branch (index b−1) when each
// message was sent and when the other end had taken it. A branch fills
// its own entry: its activation's send (SentA) and its gradient's taking
// (TookG); the join every branch's: the activations' taking (TookA) and
// the gradients' sends (SentG).
type joinStamps struct {
	SentA []int64 `json:"sent_a,omitempty"`
	TookA []int64 `json:"took_a,omitempty"`
	SentG []int64 `json:"sent_g,omitempty"`
	TookG []int64 `json:"took_g,omitempty"`
}

// joinWorkers are the join sizes probed (2 to max(3, cores+1)) and the
// rounds of each.
func joinWorkers(cores int, quick bool) (ks []int, reps int) {
	top, reps := max(3, cores+1), 150
	if quick {
		top, reps = 3, 10
	}
	for k := 2; k <= min(top, plan.MaxCoreSlowdown); k++ {
		ks = append(ks, k)
	}
	return ks, reps
}

// joins times joins of k = 2, 3, ... workers, each a process with its
// share of the cores (cores/k, at least 1, as a run's local workers get):
// reps rounds each after wakeGap, begun by a go from this process to every
// worker in turn (branches first), as a run's iterations are. Each
// message's one-way time, from its send call's start to its taking, is
// pooled per k into a typical mean, NATSJoinS[k-1]. The join of two sets
// the NATS path's latency (NATSLat, beside the bandwidth links fitted):
// its hundreds of messages, each after a go as a run's first ones are,
// swing less from one profile to the next than the intercept of a fit
// over sizes from 256 bytes to 8 MiB (bench/history.md).
func (w *workers) joins(o RunCostsPlan, res *RunCostsResult, rc *plan.RunCosts) error {
	ks, reps := joinWorkers(o.Cores, o.Quick)
	lats := make([]float64, ks[len(ks)-1])
	for _, k := range ks {
		t, err := w.join(k, reps, max(1, o.Cores/k))
		if err != nil {
			return fmt.Errorf("profile: timing a join of %d workers: %w", k, err)
		}
		res.JoinWorkers, res.JoinS = append(res.JoinWorkers, k), append(res.JoinS, t)
		lats[k-1] = t
	}
	lats[0] = lats[1] // one worker sends nothing: as two
	rc.NATSJoinS = plan.NewJoinLatencies(lats...)
	if rc.NATSBW > 0 {
		rc.NATSLat = max(0, lats[1]-float64(joinMsgBytes)/rc.NATSBW)
	}
	return nil
}

// joinMsgBytes is a join's message as encoded: holdBytes of float32s.
var joinMsgBytes = func() int {
	b, _ := joinMsg()
	return len(b)
}()

// joinMsg is a join's message: holdBytes of float32s as a worker encodes them.
func joinMsg() ([]byte, error) {
	return wire.EncodeTensors([]wire.Tensor{{Name: "x", Shape: []int{holdBytes / 4}, F32: make([]float32, holdBytes/4)}})
}

// join runs reps rounds (and one to warm up) of a join of k workers, each
// with procs cores, and returns the typical one-way time of its messages.
func (w *workers) join(k, reps, procs int) (float64, error) {
	ep, run, _, closeEp, err := w.parent()
	if err != nil {
		return 0, err
	}
	defer closeEp()
	var specs []childSpec
	for id := 1; id <= k; id++ {
		specs = append(specs, childSpec{Mode: "join", Run: run, ID: int32(id), Peers: k})
	}
	s, err := w.start(specs, procs)
	if err != nil {
		return 0, err
	}
	defer s.stop()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	goMsg := make([]byte, 64)
	var ways []float64
	for i := int64(0); i <= int64(reps); i++ {
		time.Sleep(wakeGap)
		for id := 1; id <= k; id++ {
			if err := ep.Send(ctx, int32(id), echoKey(i), goMsg); err != nil {
				return 0, err
			}
		}
		st := make([]joinStamps, k+1)
		for id := 1; id <= k; id++ {
			b, err := ep.Receive(ctx, replyKey(i, int32(id)))
			if err == nil {
				err = json.Unmarshal(b, &st[id])
			}
			if err != nil {
				return 0, err
			}
		}
		if i > 0 { // the first round warms up
			ways = append(ways, joinWays(st, k)...)
		}
	}
	return typical(ways), nil
}

// joinWays is a round's one-way times, seconds: each branch's activation
// and gradient, from the stamps of workers 1..k (st[id]).
func joinWays(st []joinStamps, k int) []float64 {
	var out []float64
	j := st[k]
	for b := 1; b < k; b++ {
		br := st[b]
		if len(br.SentA) < b || len(br.TookG) < b || len(j.TookA) < b || len(j.SentG) < b {
			continue
		}
		out = append(out, float64(j.TookA[b-1]-br.SentA[b-1])/1e9, float64(br.TookG[b-1]-j.SentG[b-1])/1e9)
	}
	return out
}

// joinWorker is worker id of a join of k (spec.Peers; the last is the
// join, the others branches), round after round until ctx ends: on each
// go from the measuring process, a branch computes (joinPass),
// sends its activations (holdBytes as a tensor) to the join and takes its
// gradient back, then computes its backward and reports its stamps; the
// join takes every branch's activations in turn, computes, and sends each
// its gradient, then reports.
func joinWorker(ctx context.Context, ep *wire.Endpoint, spec childSpec) error {
	k, id := spec.Peers, spec.ID
	if k < 2 || id < 1 || int(id) > k {
		return fmt.Errorf("join: worker %d of %d", id, k)
	}
	msg, err := joinMsg()
	if err != nil {
		return err
	}
	for i := int64(0); ; i++ {
		if _, err := ep.Receive(ctx, echoKey(i)); err != nil {
			return stopped(ctx, err)
		}
		st, err := joinRound(ctx, ep, i, int32(k), id, msg)
		if err != nil {
			return stopped(ctx, err)
		}
		b, _ := json.Marshal(st)
		if err := ep.Send(ctx, parentID, replyKey(i, id), b); err != nil {
			return stopped(ctx, err)
		}
	}
}

// joinRound is worker id's part of round i of a join of k.
func joinRound(ctx context.Context, ep *wire.Endpoint, i int64, k, id int32, msg []byte) (joinStamps, error) {
	var st joinStamps
	take := func(from int32, dir byte) (int64, error) {
		got, err := ep.Receive(ctx, joinKey(i, from, dir))
		if err == nil {
			_, err = wire.DecodeTensors(got)
		}
		return time.Now().UnixNano(), err
	}
	send := func(to, branch int32, dir byte) (int64, error) {
		at := time.Now().UnixNano()
		return at, ep.Send(ctx, to, joinKey(i, branch, dir), msg)
	}
	if id < k { // a branch
		spin(time.Duration(id) * joinPass)
		st.SentA, st.TookG = make([]int64, id), make([]int64, id)
		var err error
		if st.SentA[id-1], err = send(k, id, 'a'); err != nil {
			return st, err
		}
		if st.TookG[id-1], err = take(id, 'g'); err != nil {
			return st, err
		}
		spin(joinPass)
		return st, nil
	}
	st.TookA, st.SentG = make([]int64, k-1), make([]int64, k-1)
	for b := int32(1); b < k; b++ {
		t, err := take(b, 'a')
		if err != nil {
			return st, err
		}
		st.TookA[b-1] = t
	}
	spin(2 * joinPass)
	for b := int32(1); b < k; b++ {
		t, err := send(b, b, 'g')
		if err != nil {
			return st, err
		}
		st.SentG[b-1] = t
	}
	return st, nil
}

// stopped is err, or nil where ctx has ended (the probe is over).
func stopped(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return nil
	}
	return err
}
