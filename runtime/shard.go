package runtime

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/graphpipe/graphpipe/runtime/wire"
	"github.com/graphpipe/graphpipe/stage"
	"github.com/graphpipe/graphpipe/tensor"
)

// A checkpoint is written where its state is. Each stage's replica 0
// writes its own shards (shardFile: params-SSS and optim-SSS) into the
// checkpoint's temporary directory when it sees the coordinator's
// checkpoint directory, and says so, with their checksums and sizes, in a
// small report on the control endpoint; the coordinator writes nothing
// of them. A worker that does not see the directory (another host, another
// file system) says so in its report and streams its shards over its bulk
// endpoint (stream.go), which the coordinator writes as they come, a
// window at a time. Either way no state is held whole in one message, or
// twice in memory. The coordinator then checks every shard's size, renames
// the directory into place and writes the manifest, naming the shards and
// their checksums, last and atomically.
//
// Whether a worker sees the directory is a fact it checks, not an option
// it is given: the coordinator writes a probe file into the directory
// (probeFile, holding a random token) for the run's life, and sends its
// absolute path and the token with every assignment (checkpointTarget); a
// worker that reads the token there shares the directory. Config.
// StreamCheckpoints (StreamEnv) makes a worker stream all the same.

// checkpointTarget is where a run's checkpoints go, as its workers are
// told: the directory, absolute, as the coordinator sees it, and the token
// in the probe file the coordinator wrote there.
type checkpointTarget struct {
	Dir   string `json:"dir"`
	Token string `json:"token"`
}

func probeFile(token string) string { return ".probe-" + token }

// newCheckpointTarget writes the probe file into dir (made if need be) and
// returns the target and what removes the probe.
func newCheckpointTarget(dir string) (*checkpointTarget, func(), error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, nil, err
	}
	if err := os.MkdirAll(abs, 0o755); err != nil {
		return nil, nil, err
	}
	// a probe left by a coordinator that was killed: the directory has one
	// owner (LockDir), so no other is in use
	stale, _ := filepath.Glob(filepath.Join(abs, probeFile("*")))
	for _, p := range stale {
		os.Remove(p)
	}
	b := make([]byte, 8)
	rand.Read(b)
	t := &checkpointTarget{Dir: abs, Token: hex.EncodeToString(b)}
	probe := filepath.Join(abs, probeFile(t.Token))
	if err := os.WriteFile(probe, []byte(t.Token), 0o644); err != nil {
		return nil, nil, fmt.Errorf("checkpoint directory %s: %w", dir, err)
	}
	return t, func() { os.Remove(probe) }, nil
}

// sees says why this process does not share the target's directory (nil
// when it does): the probe file there must hold the token.
func (t *checkpointTarget) sees() error {
	if t == nil {
		return fmt.Errorf("the coordinator named no checkpoint directory")
	}
	b, err := readRegular(filepath.Join(t.Dir, probeFile(t.Token)), 64)
	if err != nil {
		return fmt.Errorf("this host does not see %s: %v", t.Dir, err)
	}
	if !bytes.Equal(b, []byte(t.Token)) {
		return fmt.Errorf("%s here is not the coordinator's (its probe differs)", t.Dir)
	}
	return nil
}

// shardReport is a stage's account of its share of a checkpoint.
type shardReport struct {
	Stage   int `json:"stage"`
	OptStep int `json:"optimizer_step"`
	// NonFinite names a value that is not finite: nothing follows, and no
	// checkpoint is written.
	NonFinite string `json:"nonfinite,omitempty"`
	// Shards are the files the worker wrote into the checkpoint's
	// temporary directory.
	Shards []Shard `json:"shards,omitempty"`
	// Stream, when set, says why the shards follow on the bulk stream
	// instead (the directory not seen, or StreamCheckpoints).
	Stream string `json:"stream,omitempty"`
	// SBHistory is, from the loss's stage under selective backprop, the
	// selector's history of losses (Manifest.SBHistory).
	SBHistory []float64 `json:"sb_history,omitempty"`
}

// stateEntries is this stage's parameters and buffers, and its optimizer
// state (of a sharded stage, every replica's shard of it: gatherState), as
// the shards of the checkpoint at ckptStep hold them, with the optimizer's
// step and the first value that is not finite ("" if none).
func (w *Worker) stateEntries(ctx context.Context, ckptStep int) (params, optim []tensor.Named, step int, bad string, err error) {
	vals, err := w.ex.HostState()
	if err != nil {
		return nil, nil, 0, "", err
	}
	st, step, err := w.ex.OptimizerState()
	if w.role.sharded(w.Stage) {
		st, step, err = w.gatherState(ctx, ckptStep)
	}
	if err != nil {
		return nil, nil, 0, "", err
	}
	for _, name := range append(w.ex.ParamNames(), w.ex.BufferNames()...) {
		params = append(params, tensor.Named{Name: name, Shape: vals[name].Shape, F32: vals[name].Data})
	}
	slots := make([]string, 0, len(st))
	for slot := range st {
		slots = append(slots, slot)
	}
	sort.Strings(slots)
	for _, slot := range slots {
		shape := []int{len(st[slot])}
		if i := strings.LastIndexByte(slot, '.'); i > 0 {
			if v := vals[slot[:i]]; v != nil && len(v.Data) == len(st[slot]) {
				shape = v.Shape
			}
		}
		optim = append(optim, tensor.Named{Name: slot, Shape: shape, F32: st[slot]})
	}
	for _, set := range [][]tensor.Named{params, optim} {
		for _, e := range set {
			if !stage.Finite(e.F32) {
				return nil, nil, step, fmt.Sprintf("%s holds a value that is not finite (NaN or Inf) after the update", e.Name), nil
			}
		}
	}
	return params, optim, step, "", nil
}

// saveShards hands over this stage's share of the checkpoint at step
// (its replica 0 does): written into the checkpoint's directory when this
// worker sees it, else streamed to the coordinator over bulk; the report
// goes on ctl under key.
func (w *Worker) saveShards(ctx context.Context, ctl, bulk *wire.Endpoint, a *assignment, step int, key wire.Key) error {
	params, optim, optStep, bad, err := w.stateEntries(ctx, step)
	if err != nil {
		return err
	}
	rep := shardReport{Stage: w.Stage, OptStep: optStep, NonFinite: bad, SBHistory: w.sbHistory()}
	if bad == "" {
		rep.Shards, rep.Stream = w.writeShards(a, step, params, optim)
	}
	b, _ := json.Marshal(rep)
	if err := ctl.Send(ctx, coordinator, key, b); err != nil {
		return err
	}
	if rep.Stream == "" || bad != "" {
		return nil
	}
	for _, f := range []struct {
		kind    int32
		entries []tensor.Named
	}{{streamShardParams, params}, {streamShardOptim, optim}} {
		sw := newStreamWriter(ctx, bulk, coordinator, streamID{f.kind, step, w.ID})
		if err := streamNamed(sw, f.entries); err != nil {
			sw.Fail(err)
			return err
		}
		if err := sw.Close(); err != nil {
			return err
		}
	}
	return nil
}

// writeShards writes the stage's shards into the checkpoint's temporary
// directory, or says why it does not (then they are streamed).
func (w *Worker) writeShards(a *assignment, step int, params, optim []tensor.Named) ([]Shard, string) {
	if w.streamShards {
		return nil, "this worker was asked to stream (" + StreamEnv + ")"
	}
	t := a.Checkpoint
	if err := t.sees(); err != nil {
		return nil, err.Error()
	}
	tmp := tmpStepDir(t.Dir, step, t.Token, a.Gen)
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return nil, err.Error()
	}
	var out []Shard
	for _, f := range []struct {
		kind    string
		entries []tensor.Named
	}{{shardParams, params}, {shardOptim, optim}} {
		sh, err := writeShard(tmp, shardFile(f.kind, w.Stage), func(wr io.Writer) error { return streamNamed(wr, f.entries) })
		if err != nil {
			return nil, fmt.Sprintf("writing %s: %v", sh.File, err)
		}
		sh.Stage, sh.By = w.Stage, byWorker
		out = append(out, sh)
	}
	return out, ""
}

// gatherShards takes every stage's share of the checkpoint at step (each
// stage's replica 0 reporting under key), writes what is streamed into
// tmp, and says what the manifest names. A stage that found a value not
// finite makes it a NonFiniteError; the other stages' streams are read
// and dropped all the same, so that no worker waits on them.
func (c *collector) gatherShards(ctx context.Context, step int, tmp string, key func(id int32) wire.Key) ([]Shard, int, error) {
	var shards []Shard
	var bad error
	optStep := 0
	for s := range c.job.Plan.Stages {
		id := c.lay.id(s, 0)
		got, opt, err := c.gatherStage(ctx, s, step, tmp, key(id), bad != nil)
		var ne *NonFiniteError
		switch {
		case errors.As(err, &ne):
			if bad == nil {
				bad = err
			}
		case err != nil:
			return nil, 0, err
		}
		if key(id).MB == mbStopState {
			c.left[id].Store(true) // a stopping worker leaves once its share is handed over
		}
		shards, optStep = append(shards, got...), opt
	}
	return shards, optStep, bad
}

// gatherStage takes stage s's share of the checkpoint at step: its
// report under key, then its shards as it wrote them, or as they stream
// (written into tmp, or dropped when drop).
func (c *collector) gatherStage(ctx context.Context, s, step int, tmp string, key wire.Key, drop bool) ([]Shard, int, error) {
	id := c.lay.id(s, 0)
	msg, err := c.ctl.Receive(ctx, key)
	if err != nil {
		return nil, 0, workerFailure(c.ctl, err)
	}
	var rep shardReport
	if err := json.Unmarshal(msg, &rep); err != nil {
		return nil, 0, fmt.Errorf("stage %d's checkpoint report: %w", s, err)
	}
	if rep.SBHistory != nil {
		c.sbHistory = rep.SBHistory
	}
	if rep.NonFinite != "" {
		return nil, rep.OptStep, c.nonFinite(step, s, rep.NonFinite)
	}
	if rep.Stream == "" {
		if len(rep.Shards) != 2 {
			return nil, 0, fmt.Errorf("stage %d reported %d shards, want 2", s, len(rep.Shards))
		}
		for _, sh := range rep.Shards {
			if sh.File != shardFile(shardParams, s) && sh.File != shardFile(shardOptim, s) || sh.Stage != s || sh.By != byWorker {
				return nil, 0, fmt.Errorf("stage %d reported a shard %q of stage %d", s, sh.File, sh.Stage)
			}
		}
		return rep.Shards, rep.OptStep, nil
	}
	var shards []Shard
	for _, f := range []struct {
		kind  int32
		shard string
	}{{streamShardParams, shardParams}, {streamShardOptim, shardOptim}} {
		r := newStreamReader(ctx, c.bulk, id, streamID{f.kind, step, id})
		if drop {
			if err := r.drain(); err != nil {
				return nil, 0, err
			}
			continue
		}
		sh, err := writeShard(tmp, shardFile(f.shard, s), func(w io.Writer) error {
			_, err := io.Copy(w, r)
			return err
		})
		if err != nil {
			return nil, 0, err
		}
		sh.Stage, sh.By = s, byCoord
		shards = append(shards, sh)
	}
	return shards, rep.OptStep, nil
}
