package runtime

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/graphpipe/graphpipe/dag"
	"github.com/graphpipe/graphpipe/runtime/wire"
	"github.com/graphpipe/graphpipe/stage"
	"github.com/graphpipe/graphpipe/tensor"
)

// runJoined runs job with one worker per device joining over the embedded
// server srv, each with the worker process's config wc; every worker's
// streams go over a connection of their own (Config.Bulk), as the
// command's do.
func runJoined(t *testing.T, ctx context.Context, srv *wire.Embedded, job *Job, wc Config) (*Result, error) {
	t.Helper()
	dial := func() wire.Transport { return dialEmbedded(t, srv) }
	n := Workers(job.Plan)
	errs := make(chan error, n)
	for range n {
		c := wc
		c.Bulk = dial()
		go func() { errs <- Serve(ctx, dial(), Join{Run: job.Run, Config: c}) }()
	}
	job.Config.Bulk = dial()
	res, err := Coordinate(ctx, job, dial(), nil)
	for range n {
		if werr := <-errs; werr != nil && err == nil {
			err = werr
		}
	}
	return res, err
}

// dialEmbedded is a connection to the embedded server srv, closed when
// the test ends.
func dialEmbedded(t *testing.T, srv *wire.Embedded) wire.Transport {
	t.Helper()
	nt, err := wire.DialNATS(wire.NATSOptions{URL: srv.URL(), Token: srv.Token})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nt.Close() })
	return nt
}

// natsRun runs job as run id over srv, one worker a device serving it
// and the coordinator under config c reporting progress: the stop and
// resume tests' run, each a connection of its own.
func natsRun(t *testing.T, ctx context.Context, srv *wire.Embedded, job Job, id string, c Config, progress func(int64, float64)) (*Result, error) {
	job.Run, job.Config = id, c
	n := Workers(job.Plan)
	errs := make(chan error, n)
	for range n {
		go func() { errs <- Serve(ctx, dialEmbedded(t, srv), Join{Run: id}) }()
	}
	res, err := Coordinate(ctx, &job, dialEmbedded(t, srv), progress)
	for range n {
		if werr := <-errs; werr != nil && err == nil {
			err = fmt.Errorf("a worker: %w", werr)
		}
	}
	return res, err
}

// TestShardedCheckpoints: workers that see the checkpoint directory write
// their own shards; workers that stream them (as one on another host
// would) have the coordinator write them. Either way the manifest names a
// params and an optim shard per stage, the checkpoint holds the run's
// parameters bit for bit, and a run resumed from it under another plan (4
// devices, not 3) ends bit for bit where one resumed from the other
// layout does, and near the uninterrupted run.
func TestShardedCheckpoints(t *testing.T) {
	srv, err := wire.StartEmbedded(0)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	g, plan3 := smallPlan(t, "case-study", 3, 4)
	_, plan4 := smallPlan(t, "case-study", 4, 4)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	o := Options{Train: stage.TrainOptions{Optimizer: "adam", LR: 1e-3}, CheckpointEvery: 2}
	want, err := RunLocal(ctx, &Job{Run: "ref", Graph: g, Plan: plan3, Steps: 6, Options: o}, wire.NewMemory(1, wire.Faults{}, 1<<20))
	if err != nil {
		t.Fatal(err)
	}
	resumed := map[bool]map[string]*stage.Value[float32]{}
	for _, tc := range []struct {
		name   string
		stream bool
		by     string
	}{{"written by the workers", false, byWorker}, {"streamed to the coordinator", true, byCoord}} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			job := &Job{Run: "sharded", Graph: g, Plan: plan3, Steps: 4, Options: o, Config: Config{CheckpointDir: dir}}
			res, err := runJoined(t, ctx, srv, job, Config{StreamCheckpoints: tc.stream})
			if err != nil {
				t.Fatal(err)
			}
			ck, err := LoadCheckpoint(dir, nil)
			if err != nil {
				t.Fatal(err)
			}
			m := ck.Manifest
			if m.Format != CheckpointFormat || m.Step != 4 || len(m.Shards) != 2*len(plan3.Stages) {
				t.Fatalf("manifest %+v", m)
			}
			for _, sh := range m.Shards {
				if sh.By != tc.by {
					t.Errorf("%s written by the %s, want the %s", sh.File, sh.By, tc.by)
				}
			}
			equalParams(t, ck.Params, res.Params, 0)
			if len(ck.Optim) != 2*countParams(g) {
				t.Errorf("%d optimizer slots, want Adam's 2 for each of %d parameters", len(ck.Optim), countParams(g))
			}
			leftovers, _ := filepath.Glob(filepath.Join(dir, ".*"))
			for _, l := range leftovers {
				if filepath.Base(l) != lockFile {
					t.Errorf("left behind: %s", l)
				}
			}
			job = &Job{Run: "resumed", Graph: g, Plan: plan4, Steps: 6, Options: Options{Train: o.Train}, Config: Config{Resume: ck}}
			res, err = runJoined(t, ctx, srv, job, Config{StreamCheckpoints: tc.stream})
			if err != nil {
				t.Fatal(err)
			}
			equalParams(t, res.Params, want.Params, 1e-5)
			resumed[tc.stream] = res.Params
		})
	}
	if len(resumed) == 2 {
		equalParams(t, resumed[true], resumed[false], 0)
	}
}

func countParams(g *dag.Graph) int {
	n := 0
	for i := range g.NumOps() {
		n += len(g.Params(i))
	}
	return n
}

// TestCheckpointSees: a worker shares the checkpoint directory only when
// it reads the coordinator's token in the probe file there; a probe a
// killed coordinator left is removed.
func TestCheckpointSees(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, probeFile("dead")), []byte("dead"), 0o644) // a killed coordinator's
	target, unprobe, err := newCheckpointTarget(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, probeFile("dead"))); err == nil {
		t.Error("a killed coordinator's probe is left")
	}
	if err := target.sees(); err != nil {
		t.Fatalf("the coordinator's own directory: %v", err)
	}
	other := t.TempDir()
	fifo := filepath.Join(other, probeFile("f1f0"))
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(other, probeFile("0123")), []byte("4567"), 0o644)
	for _, tc := range []struct {
		name string
		t    *checkpointTarget
		want string
	}{
		{"none", nil, "no checkpoint directory"},
		{"another host's path", &checkpointTarget{Dir: filepath.Join(other, "absent"), Token: target.Token}, "does not see"},
		{"another token", &checkpointTarget{Dir: other, Token: "0123"}, "not the coordinator's"},
		{"a FIFO for a probe", &checkpointTarget{Dir: other, Token: "f1f0"}, "not a regular file"},
	} {
		done := make(chan error, 1)
		go func() { done <- tc.t.sees() }()
		select {
		case err := <-done:
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: hangs", tc.name)
		}
	}
	unprobe()
	if err := target.sees(); err == nil {
		t.Error("the probe outlived the run")
	}
}

// writeV1 writes c as earlier builds did (graphpipe/checkpoint@1): a
// params and an optim file beside a manifest naming their checksums.
func writeV1(t *testing.T, dir string, c *Checkpoint) {
	t.Helper()
	path := stepDir(dir, c.Manifest.Step)
	os.MkdirAll(path, 0o755)
	var params, optim []tensor.Named
	for name, v := range c.Params {
		params = append(params, tensor.Named{Name: name, Shape: v.Shape, F32: v.Data})
	}
	for slot, v := range c.Optim {
		optim = append(optim, tensor.Named{Name: slot, Shape: []int{len(v)}, F32: v})
	}
	m := c.Manifest
	m.Format, m.Files = CheckpointFormatV1, map[string]string{}
	for name, entries := range map[string][]tensor.Named{"params.safetensors": params, "optim.safetensors": optim} {
		b, err := tensor.EncodeSafetensors(entries, nil)
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(path, name), b, 0o644)
		sum := sha256.Sum256(b)
		m.Files[name] = hex.EncodeToString(sum[:])
	}
	b, _ := json.Marshal(m)
	os.WriteFile(filepath.Join(path, "manifest.json"), b, 0o644)
}

func sampleCheckpoint(step int) *Checkpoint {
	return &Checkpoint{Manifest: Manifest{Step: step, Model: "m", ModelHash: strings.Repeat("ab", 32), Optimizer: "adam", OptStep: step},
		Params: map[string]*stage.Value[float32]{"a.weight": {Shape: []int{2, 2}, Data: []float32{1, 2, 3, float32(step)}}, "b.bias": {Shape: []int{3}, Data: []float32{4, 5, 6}}},
		Optim:  map[string][]float32{"a.weight.exp_avg": {1, 1, 1, 1}, "a.weight.exp_avg_sq": {2, 2, 2, 2}, "b.bias.exp_avg": {3, 3, 3}, "b.bias.exp_avg_sq": {4, 4, 4}}}
}

// TestCheckpointLayouts: a checkpoint of earlier builds (@1) still loads;
// a sharded one (@2) loads to the same values; the newest of them is
// taken, and a damaged newest one (a shard truncated, a name in two
// shards, a shard that is a FIFO) is skipped for the one before, naming
// why.
func TestCheckpointLayouts(t *testing.T) {
	dir := t.TempDir()
	writeV1(t, dir, sampleCheckpoint(1))
	c, err := LoadCheckpoint(dir, nil)
	if err != nil || c.Manifest.Format != CheckpointFormatV1 || c.Params["a.weight"].Data[3] != 1 || len(c.Optim) != 4 {
		t.Fatalf("@1: %+v, %v", c, err)
	}
	if err := WriteCheckpoint(dir, sampleCheckpoint(2)); err != nil {
		t.Fatal(err)
	}
	c, err = LoadCheckpoint(dir, nil)
	if err != nil || c.Manifest.Format != CheckpointFormat || c.Params["a.weight"].Data[3] != 2 || len(c.Optim) != 4 || c.Optim["b.bias.exp_avg_sq"][2] != 4 {
		t.Fatalf("@2: %+v, %v", c, err)
	}
	shard := filepath.Join(stepDir(dir, 2), shardFile(shardParams, 0))
	good, _ := os.ReadFile(shard)
	for _, tc := range []struct {
		name   string
		damage func()
		want   string
	}{
		{"truncated", func() { os.WriteFile(shard, good[:len(good)-4], 0o644) }, "truncated or corrupt"},
		{"a bit flipped", func() {
			b := append([]byte(nil), good...)
			b[len(b)-1] ^= 1
			os.WriteFile(shard, b, 0o644)
		}, "checksum does not match"},
		{"a FIFO", func() { os.Remove(shard); syscall.Mkfifo(shard, 0o644) }, "not a regular file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.damage()
			defer func() { os.Remove(shard); os.WriteFile(shard, good, 0o644) }()
			var why error
			done := make(chan struct{})
			go func() {
				defer close(done)
				c, err = LoadCheckpoint(dir, func(step int, err error) { why = err })
			}()
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				t.Fatal("hangs")
			}
			if err != nil || c.Manifest.Step != 1 || why == nil || !strings.Contains(why.Error(), tc.want) {
				t.Fatalf("step %d, %v; skipped for %v, want %q", c.Manifest.Step, err, why, tc.want)
			}
		})
	}
	// a name in two shards: the checkpoint is not one keyed by name
	m, _ := readManifest(stepDir(dir, 2))
	b := append([]byte(nil), good...)
	os.WriteFile(filepath.Join(stepDir(dir, 2), shardFile(shardParams, 1)), b, 0o644)
	os.WriteFile(filepath.Join(stepDir(dir, 2), shardFile(shardOptim, 1)), mustRead(t, filepath.Join(stepDir(dir, 2), shardFile(shardOptim, 0))), 0o644)
	for _, sh := range append([]Shard(nil), m.Shards...) {
		sh.Stage, sh.File = 1, strings.Replace(sh.File, "-000", "-001", 1)
		m.Shards = append(m.Shards, sh)
	}
	m.Stages = 2 // a manifest of two stages says so
	mb, _ := json.Marshal(m)
	os.WriteFile(filepath.Join(stepDir(dir, 2), "manifest.json"), mb, 0o644)
	_, err = readCheckpoint(stepDir(dir, 2), 2)
	if err == nil || !strings.Contains(err.Error(), "a name belongs to one shard") {
		t.Fatalf("a name in two shards: %v", err)
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestShardedManifestRefusals: a sharded manifest names each stage's two
// shards once, each with a checksum, a size and its writer.
func TestShardedManifestRefusals(t *testing.T) {
	dir := t.TempDir()
	if err := WriteCheckpoint(dir, sampleCheckpoint(3)); err != nil {
		t.Fatal(err)
	}
	good := string(mustRead(t, filepath.Join(stepDir(dir, 3), "manifest.json")))
	if _, err := DecodeManifest([]byte(good)); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ old, new, want string }{
		{`"file": "params-000.safetensors"`, `"file": "params-007.safetensors"`, "want params-000.safetensors or optim-000.safetensors"},
		{`"file": "params-000.safetensors"`, `"file": "../params-000.safetensors"`, "want params-000.safetensors"},
		{`"file": "params-000.safetensors"`, `"file": "optim-000.safetensors"`, "named twice"},
		{`"stage": 0`, `"stage": -1`, "want params--01.safetensors"},
		{`"written_by": "coordinator"`, `"written_by": "someone"`, "written_by"},
		{`"bytes": `, `"bytes": -`, "at least 16"},
		{`"sha256": "`, `"sha256": "z`, "SHA-256"},
		{`"shards": [`, `"files": {"params.safetensors": "00"}, "shards": [`, "names shards, not files"},
	} {
		bad := strings.Replace(good, tc.old, tc.new, 1)
		if bad == good {
			t.Fatalf("edit %q did nothing", tc.old)
		}
		if _, err := DecodeManifest([]byte(bad)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.new, err, tc.want)
		}
	}
	var m Manifest
	json.Unmarshal([]byte(good), &m)
	m.Shards = m.Shards[:1]
	one, _ := json.Marshal(m)
	if _, err := DecodeManifest(one); err == nil || !strings.Contains(err.Error(), "stage 0 has no optim-000.safetensors") {
		t.Errorf("one shard of two: %v", err)
	}
}

// TestStreamIsBounded: a sender runs at most a window of chunks ahead of
// its receiver, however much it has to send; what it sends arrives whole
// and in order; a sender that fails says so to its receiver.
func TestStreamIsBounded(t *testing.T) {
	tr := wire.NewMemory(1, wire.Faults{}, 1<<20)
	a, _ := wire.NewEndpoint(tr, "s", 1, 0)
	b, _ := wire.NewEndpoint(tr, "s", 1, 1)
	defer a.Close()
	defer b.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	data := make([]byte, 20*streamChunk+123)
	for i := range data {
		data[i] = byte(i * 7)
	}
	id := streamID{streamFinal, 0, 0}
	sent := make(chan error, 1)
	go func() {
		w := newStreamWriter(ctx, a, 1, id)
		if _, err := w.Write(data); err != nil {
			sent <- err
			return
		}
		sent <- w.Close()
	}()
	r := newStreamReader(ctx, b, 0, id)
	first := make([]byte, 10)
	if _, err := io.ReadFull(r, first); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // the sender runs ahead as far as it may
	framesPerChunk := int64((streamChunk + 1 + (1<<20 - 256) - 1) / (1<<20 - 256))
	if got := b.Stats().Received; got > streamWindow*framesPerChunk {
		t.Errorf("the receiver holds %d frames, more than a window of %d chunks (%d frames)", got, streamWindow, streamWindow*framesPerChunk)
	}
	rest, err := io.ReadAll(r)
	if err != nil || !bytes.Equal(append(first, rest...), data) || <-sent != nil {
		t.Fatalf("read %d bytes of %d: %v", len(first)+len(rest), len(data), err)
	}
	// a sender that fails mid-stream
	id = streamID{streamFinal, 1, 0}
	go func() {
		w := newStreamWriter(ctx, a, 1, id)
		w.Write(data[:streamChunk+10])
		w.Fail(errors.New("the disk is gone"))
	}()
	_, err = io.ReadAll(newStreamReader(ctx, b, 0, id))
	var se *StreamError
	if !errors.As(err, &se) || !strings.Contains(err.Error(), "the disk is gone") {
		t.Fatalf("got %v, want the sender's failure", err)
	}
}
