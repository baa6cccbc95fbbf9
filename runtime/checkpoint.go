package runtime

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/graphpipe/graphpipe/internal/atomicfile"
	"github.com/graphpipe/graphpipe/internal/regular"
	"github.com/graphpipe/graphpipe/stage"
	"github.com/graphpipe/graphpipe/tensor"
)

// CheckpointFormat is the manifest format this build writes: a sharded
// checkpoint, each stage's state in its own pair of files. It reads
// CheckpointFormatV1 too, the two-file checkpoints of earlier builds.
const (
	CheckpointFormat   = "graphpipe/checkpoint@2"
	CheckpointFormatV1 = "graphpipe/checkpoint@1"
)

// Manifest describes one checkpoint. It is written last: a checkpoint without
// a manifest, or whose files do not match its checksums, is not whole.
type Manifest struct {
	Format    string `json:"format"`
	Step      int    `json:"step"` // the next iteration to run: the data position
	Model     string `json:"model"`
	ModelHash string `json:"model_sha256"`
	Run       string `json:"run,omitempty"` // the run that wrote it
	Seed      int64  `json:"seed"`          // the model's seed (parameters and data)
	Plan      string `json:"plan"`          // what made it, for people: strategy, stages, devices
	Optimizer string `json:"optimizer"`
	OptStep   int    `json:"optimizer_step"`
	// Files (@1) is each of params.safetensors and optim.safetensors by
	// name, with its SHA-256.
	Files map[string]string `json:"files,omitempty"`
	// Shards (@2) are the files that hold the state, two per stage.
	Shards []Shard `json:"shards,omitempty"`
	// Stages (@2) is what completes the checkpoint: the stages, 0 to
	// Stages-1, each with both its shards. A manifest whose shards leave
	// one out is refused, and so is one that names no stages where it
	// lists none. 0: written before manifests recorded it, its shards
	// taken as they are.
	Stages  int    `json:"stages,omitempty"`
	Created string `json:"created"`
	// SBHistory is, under selective backprop, the loss's stage's history
	// of recent losses (stage.Selector.History), oldest first: what a
	// resumed run selects by.
	SBHistory []float64 `json:"selective_backprop_history,omitempty"`
}

// Shard is one file of a sharded checkpoint: a stage's parameters and
// buffers under their names (params-SSS.safetensors), or its optimizer
// state as "<param>.<slot>" (optim-SSS.safetensors). Together the shards
// are one checkpoint keyed by name: no name is in two of them, and the
// plan that loads it need not be the plan that wrote it.
type Shard struct {
	File   string `json:"file"`
	SHA256 string `json:"sha256"`
	Bytes  int64  `json:"bytes"`
	Stage  int    `json:"stage"`
	// By says who wrote the file: the stage's "worker", into the
	// checkpoint directory it shares with the coordinator, or the
	// "coordinator", from the worker's stream.
	By string `json:"written_by"`
}

// The kinds of shard, and who writes one.
const (
	shardParams = "params"
	shardOptim  = "optim"
	byWorker    = "worker"
	byCoord     = "coordinator"
)

// shardFile is the name of a stage's shard of a kind.
func shardFile(kind string, stage int) string { return fmt.Sprintf("%s-%03d.safetensors", kind, stage) }

// Checkpoint is parameters and optimizer state, keyed by name.
type Checkpoint struct {
	Manifest Manifest
	// Params holds the parameters and the buffers (batch_norm's running
	// statistics), side by side under their names.
	Params map[string]*stage.Value[float32]
	Optim  map[string][]float32 // "<param>.<slot>"
}

func stepDir(dir string, step int) string { return filepath.Join(dir, fmt.Sprintf("step-%08d", step)) }

// tmpStepDir is where the shards of the checkpoint at step go, in
// generation gen of the run whose checkpoint target carries token, until
// the checkpoint is whole: the coordinator and the workers that share the
// directory name it alike.
func tmpStepDir(dir string, step int, token string, gen uint32) string {
	return filepath.Join(dir, fmt.Sprintf(".step-%08d.tmp-%s-g%d", step, token, gen))
}

// WriteCheckpoint writes c under dir/step-N atomically, as one stage's
// shards: the files go into a temporary directory, each fsynced, which is
// renamed into place; the manifest follows the same way. Only the newest
// two checkpoints are kept.
func WriteCheckpoint(dir string, c *Checkpoint) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	suffix := make([]byte, 4)
	rand.Read(suffix)
	tmp := filepath.Join(dir, fmt.Sprintf(".step-%08d.tmp-%s", c.Manifest.Step, hex.EncodeToString(suffix)))
	if err := os.Mkdir(tmp, 0o755); err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	var params, optim []tensor.Named
	for name, v := range c.Params {
		params = append(params, tensor.Named{Name: name, Shape: v.Shape, F32: v.Data})
		for slot, s := range c.Optim {
			if strings.HasPrefix(slot, name+".") && !strings.Contains(slot[len(name)+1:], ".") {
				optim = append(optim, tensor.Named{Name: slot, Shape: v.Shape, F32: s})
			}
		}
	}
	c.Manifest.Shards = nil
	for _, f := range []struct {
		kind    string
		entries []tensor.Named
	}{{shardParams, params}, {shardOptim, optim}} {
		sh, err := writeShard(tmp, shardFile(f.kind, 0), func(w io.Writer) error { return streamNamed(w, f.entries) })
		if err != nil {
			return err
		}
		sh.By = byCoord
		c.Manifest.Shards = append(c.Manifest.Shards, sh)
	}
	return commitCheckpoint(dir, tmp, &c.Manifest)
}

// streamNamed writes entries as a safetensors file, tensor by tensor.
func streamNamed(w io.Writer, entries []tensor.Named) error {
	heads := make([]tensor.Head, len(entries))
	byName := make(map[string][]float32, len(entries))
	for i, e := range entries {
		heads[i] = tensor.Head{Name: e.Name, Shape: e.Shape, DType: "F32"}
		byName[e.Name] = e.F32
	}
	return tensor.StreamSafetensors(w, heads, nil, func(h tensor.Head, w io.Writer) error {
		return tensor.WriteF32(w, byName[h.Name])
	})
}

// hashWriter is a file being written and hashed at once.
type hashWriter struct {
	w io.Writer
	h hash.Hash
	n int64
}

func (h *hashWriter) Write(p []byte) (int, error) {
	n, err := h.w.Write(p)
	h.h.Write(p[:n])
	h.n += int64(n)
	return n, err
}

// writeShard writes the file name in dir through write, buffered, hashed
// as it goes and fsynced; it appears under its name only once whole.
func writeShard(dir, name string, write func(w io.Writer) error) (Shard, error) {
	part := filepath.Join(dir, name+".part")
	f, err := os.Create(part)
	if err != nil {
		return Shard{}, err
	}
	defer os.Remove(part)
	bw := bufio.NewWriterSize(f, 1<<20)
	hw := &hashWriter{w: bw, h: sha256.New()}
	err = write(hw)
	if err == nil {
		err = bw.Flush()
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return Shard{}, fmt.Errorf("%s: %w", name, err)
	}
	if err := os.Rename(part, filepath.Join(dir, name)); err != nil {
		return Shard{}, err
	}
	return Shard{File: name, SHA256: hex.EncodeToString(hw.h.Sum(nil)), Bytes: hw.n}, nil
}

// commitCheckpoint makes the shards in tmp the checkpoint m describes:
// each checked for its size, tmp renamed to its step's directory, the
// manifest written last and atomically, the older checkpoints pruned.
func commitCheckpoint(dir, tmp string, m *Manifest) error {
	if m.Stages == 0 {
		m.Stages = shardStages(m.Shards)
	}
	if err := checkShards(*m); err != nil {
		return fmt.Errorf("checkpoint at step %d is not whole: %w", m.Step, err)
	}
	for _, sh := range m.Shards {
		st, err := os.Stat(filepath.Join(tmp, sh.File))
		if err != nil {
			return fmt.Errorf("shard %s: %w", sh.File, err)
		}
		if st.Size() != sh.Bytes {
			return fmt.Errorf("shard %s: %d bytes on disk, its writer wrote %d", sh.File, st.Size(), sh.Bytes)
		}
	}
	syncDir(tmp)
	final := stepDir(dir, m.Step)
	os.RemoveAll(final)
	if err := os.Rename(tmp, final); err != nil {
		return err
	}
	m.Format, m.Files, m.Created = CheckpointFormat, nil, time.Now().UTC().Format(time.RFC3339)
	b, _ := json.MarshalIndent(m, "", "  ")
	if err := atomicfile.WriteFile(filepath.Join(final, "manifest.json"), append(b, '\n'), 0o666); err != nil {
		return err
	}
	syncDir(final)
	syncDir(dir)
	return prune(dir, 2, filepath.Base(tmp))
}

func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
}

// stepEntry is a checkpoint directory: the step its name says, and the
// name (step-00000040, or as a person wrote it: step-40).
type stepEntry struct {
	step int
	name string
}

// stepDirs lists the checkpoint directories, newest first (of one step,
// by name).
func stepDirs(dir string) []stepEntry {
	entries, _ := os.ReadDir(dir)
	var out []stepEntry
	for _, e := range entries {
		if n, ok := strings.CutPrefix(e.Name(), "step-"); ok && e.IsDir() {
			if s, err := strconv.Atoi(n); err == nil && s >= 0 {
				out = append(out, stepEntry{s, e.Name()})
			}
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].step != out[j].step {
			return out[i].step > out[j].step
		}
		return out[i].name > out[j].name
	})
	return out
}

// StepMismatchError is a checkpoint directory whose manifest is of
// another step (a manifest copied from another checkpoint, a directory
// renamed): which of the two is the data position cannot be told, so the
// checkpoint is not whole.
type StepMismatchError struct {
	Dir      string // the directory's name, step-00000040
	DirStep  int    // the step its name says
	Manifest int    // the step its manifest says
}

func (e *StepMismatchError) Error() string {
	return fmt.Sprintf("directory %s is step %d, but its manifest says step %d", e.Dir, e.DirStep, e.Manifest)
}

// prune removes all but the newest keep whole checkpoints, anything older,
// and temporary directories a writer that died left behind. The one under
// way is spared: the same writers' next step (committed names the
// temporary directory just made whole), which a schedule without a flush
// (2bw) writes while this one commits, its stages gone on to the next
// iteration. Whole, here, is what can be told without reading the tensors:
// a manifest that decodes and every file it names there, of the size it
// says; LoadCheckpoint checks the checksums.
func prune(dir string, keep int, committed string) error {
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".step-") && strings.Contains(e.Name(), ".tmp-") && !underWay(e.Name(), committed) {
			os.RemoveAll(filepath.Join(dir, e.Name()))
		}
	}
	whole := 0
	for _, e := range stepDirs(dir) {
		path := filepath.Join(dir, e.name)
		if whole >= keep {
			if err := os.RemoveAll(path); err != nil {
				return err
			}
			continue
		}
		if looksWhole(path, e.step) == nil {
			whole++
		}
	}
	return nil
}

// underWay says whether temporary directory name is a later step's of the
// writers that wrote committed (".step-%08d.tmp-WRITERS", tmpStepDir).
func underWay(name, committed string) bool {
	step, writers, ok := tmpParts(name)
	cstep, cwriters, cok := tmpParts(committed)
	return ok && cok && writers == cwriters && step > cstep
}

// tmpParts reads a temporary directory's name: its step and its writers.
func tmpParts(name string) (int, string, bool) {
	rest, ok := strings.CutPrefix(name, ".step-")
	if !ok {
		return 0, "", false
	}
	num, writers, ok := strings.Cut(rest, ".tmp-")
	step, err := strconv.Atoi(num)
	return step, writers, ok && err == nil
}

// looksWhole checks a checkpoint without reading its tensors: its manifest
// decodes, is of the directory's step, and every file it names is there, a
// regular file of the size it says (@2).
func looksWhole(path string, step int) error {
	m, err := readStepManifest(path, step)
	if err != nil {
		return err
	}
	for _, f := range m.files() {
		st, err := os.Lstat(filepath.Join(path, f.File))
		switch {
		case err != nil:
			return err
		case !st.Mode().IsRegular():
			return fmt.Errorf("%s: not a regular file", f.File)
		case f.Bytes >= 0 && st.Size() != f.Bytes:
			return fmt.Errorf("%s: %d bytes, the manifest says %d (truncated or corrupt)", f.File, st.Size(), f.Bytes)
		}
	}
	return nil
}

// files lists the files a manifest names, with their checksums and sizes
// (-1: not recorded, @1).
func (m Manifest) files() []Shard {
	if m.Format == CheckpointFormatV1 {
		var out []Shard
		for _, name := range checkpointFilesV1 {
			out = append(out, Shard{File: name, SHA256: m.Files[name], Bytes: -1})
		}
		return out
	}
	return m.Shards
}

// NoCheckpointError is a directory that holds no checkpoint at all (none
// whole is another error: checkpoints damaged, not a directory mistaken).
type NoCheckpointError struct{ Dir string }

func (e *NoCheckpointError) Error() string {
	return fmt.Sprintf("checkpoint: %s holds no checkpoint", e.Dir)
}

// LoadCheckpoint reads the newest whole checkpoint in dir; it says which it
// skipped and why through skipped. It fails if none is whole.
func LoadCheckpoint(dir string, skipped func(step int, why error)) (*Checkpoint, error) {
	all := stepDirs(dir)
	for _, e := range all {
		c, err := readCheckpoint(filepath.Join(dir, e.name), e.step)
		if err == nil {
			return c, nil
		}
		if skipped != nil {
			skipped(e.step, err)
		}
	}
	if len(all) == 0 {
		return nil, &NoCheckpointError{Dir: dir}
	}
	return nil, fmt.Errorf("checkpoint: none of the %d checkpoints in %s is whole", len(all), dir)
}

// checkpointFilesV1 are the files a @1 checkpoint holds besides its manifest.
var checkpointFilesV1 = []string{"params.safetensors", "optim.safetensors"}

// maxManifest bounds a manifest file's size: a checkpoint of ten thousand
// stages takes a few megabytes.
const maxManifest = 16 << 20

// DecodeManifest reads a checkpoint's manifest.json strictly: the format
// (@2, or @1), steps that are not negative, and its files: @1's a SHA-256
// (64 hex digits) for each of params.safetensors and optim.safetensors and
// none other; @2's shards, each named for its kind and stage, once, with a
// SHA-256 and a size, both kinds for each stage.
func DecodeManifest(b []byte) (Manifest, error) {
	var m Manifest
	if len(b) > maxManifest {
		return Manifest{}, fmt.Errorf("manifest: %d bytes, over the limit of %d", len(b), maxManifest)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil || m.Format != CheckpointFormat && m.Format != CheckpointFormatV1 {
		return Manifest{}, fmt.Errorf("manifest: not a %s (or @1) manifest", CheckpointFormat)
	}
	if _, err := dec.Token(); err != io.EOF {
		return Manifest{}, fmt.Errorf("manifest: data after the closing brace")
	}
	switch {
	case m.Step < 0:
		return Manifest{}, fmt.Errorf("manifest: step: must not be negative, got %d", m.Step)
	case m.OptStep < 0:
		return Manifest{}, fmt.Errorf("manifest: optimizer_step: must not be negative, got %d", m.OptStep)
	}
	if m.Format == CheckpointFormatV1 {
		return m, checkFilesV1(m)
	}
	return m, checkShards(m)
}

func checkFilesV1(m Manifest) error {
	if len(m.Shards) > 0 {
		return fmt.Errorf("manifest: shards: a %s manifest names files, not shards", CheckpointFormatV1)
	}
	if len(m.Files) != len(checkpointFilesV1) {
		return fmt.Errorf("manifest: files: %d files, want %s", len(m.Files), strings.Join(checkpointFilesV1, " and "))
	}
	for _, name := range checkpointFilesV1 {
		if sum, ok := m.Files[name]; !ok || !isSHA256(sum) {
			return fmt.Errorf("manifest: files: %s: want its SHA-256 in 64 hex digits", name)
		}
	}
	return nil
}

func isSHA256(s string) bool {
	_, err := hex.DecodeString(s)
	return err == nil && len(s) == 64
}

// shardStages is one more than the highest stage of shards: the stages a
// writer that does not say gave.
func shardStages(shards []Shard) int {
	n := 0
	for _, sh := range shards {
		n = max(n, sh.Stage+1)
	}
	return n
}

func checkShards(m Manifest) error {
	if len(m.Files) > 0 {
		return fmt.Errorf("manifest: files: a %s manifest names shards, not files", CheckpointFormat)
	}
	if len(m.Shards) == 0 {
		return fmt.Errorf("manifest: shards: none")
	}
	seen := map[string]bool{}
	for i, sh := range m.Shards {
		kind := shardParams
		if strings.HasPrefix(sh.File, shardOptim+"-") {
			kind = shardOptim
		}
		switch {
		case sh.Stage < 0 || sh.Stage > 1<<20 || sh.File != shardFile(kind, sh.Stage):
			return fmt.Errorf("manifest: shards[%d]: file %q: want %s or %s for stage %d", i, sh.File, shardFile(shardParams, sh.Stage), shardFile(shardOptim, sh.Stage), sh.Stage)
		case seen[sh.File]:
			return fmt.Errorf("manifest: shards[%d]: %s named twice", i, sh.File)
		case !isSHA256(sh.SHA256):
			return fmt.Errorf("manifest: shards[%d]: %s: want its SHA-256 in 64 hex digits", i, sh.File)
		case sh.Bytes < 16:
			return fmt.Errorf("manifest: shards[%d]: %s: bytes: a safetensors file holds at least 16, got %d", i, sh.File, sh.Bytes)
		case sh.By != byWorker && sh.By != byCoord:
			return fmt.Errorf("manifest: shards[%d]: %s: written_by: want %q or %q, got %q", i, sh.File, byWorker, byCoord, sh.By)
		}
		seen[sh.File] = true
	}
	for _, sh := range m.Shards {
		for _, kind := range []string{shardParams, shardOptim} {
			if !seen[shardFile(kind, sh.Stage)] {
				return fmt.Errorf("manifest: shards: stage %d has no %s", sh.Stage, shardFile(kind, sh.Stage))
			}
		}
	}
	return checkStages(m, seen)
}

// checkStages holds a manifest's shards to what it says completes it:
// every stage below Stages, none past it.
func checkStages(m Manifest, seen map[string]bool) error {
	switch {
	case m.Stages < 0 || m.Stages > 1<<20+1:
		return fmt.Errorf("manifest: stages: must be between 1 and %d, got %d", 1<<20+1, m.Stages)
	case m.Stages == 0:
		return nil // before manifests recorded it
	}
	for _, sh := range m.Shards {
		if sh.Stage >= m.Stages {
			return fmt.Errorf("manifest: shards: %s is of stage %d, past the %d stages the checkpoint has", sh.File, sh.Stage, m.Stages)
		}
	}
	for s := 0; s < m.Stages; s++ {
		if !seen[shardFile(shardParams, s)] {
			return fmt.Errorf("manifest: shards: stage %d of %d has none: the checkpoint is not whole", s, m.Stages)
		}
	}
	return nil
}

// readManifest reads and decodes the manifest of the checkpoint at path.
func readManifest(path string) (Manifest, error) {
	mb, err := readRegular(filepath.Join(path, "manifest.json"), maxManifest)
	if err != nil {
		return Manifest{}, fmt.Errorf("no manifest: %w", err)
	}
	return DecodeManifest(mb)
}

// readRegular reads a file that must be a regular one of at most limit
// bytes: a FIFO, a device or a directory is refused before it is opened.
func readRegular(path string, limit int64) ([]byte, error) { return regular.ReadFileMax(path, limit) }

// openRegular opens a file for reading that must be a regular one (a
// FIFO's open would wait for a writer for ever).
func openRegular(path string) (*os.File, error) { return regular.Open(path) }

// readStepManifest is readManifest of the checkpoint directory of step,
// which its manifest must agree with.
func readStepManifest(path string, step int) (Manifest, error) {
	m, err := readManifest(path)
	if err == nil && m.Step != step {
		err = &StepMismatchError{Dir: filepath.Base(path), DirStep: step, Manifest: m.Step}
	}
	return m, err
}

func readCheckpoint(path string, step int) (*Checkpoint, error) {
	m, err := readStepManifest(path, step)
	if err != nil {
		return nil, err
	}
	c := &Checkpoint{Manifest: m, Params: map[string]*stage.Value[float32]{}, Optim: map[string][]float32{}}
	from := map[string]string{} // each name's file
	for _, f := range m.files() {
		optim := strings.HasPrefix(f.File, shardOptim) // optim.safetensors (@1), optim-SSS.safetensors
		if err := readShard(path, f, func(e tensor.Named) error {
			if other, dup := from[e.Name]; dup {
				return fmt.Errorf("%s: %q is in %s too: a name belongs to one shard", f.File, e.Name, other)
			}
			from[e.Name] = f.File
			if e.F32 == nil {
				return fmt.Errorf("%s: %q is not F32", f.File, e.Name)
			}
			if optim {
				c.Optim[e.Name] = e.F32
			} else {
				c.Params[e.Name] = &stage.Value[float32]{Shape: e.Shape, Data: e.F32}
			}
			return nil
		}); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// readShard reads one file of a checkpoint as it streams from the disk,
// its tensors handed to take, its checksum (and size, when known) checked
// against the manifest's at the end: a tensor taken from a file that then
// fails the check is dropped with the whole checkpoint.
func readShard(path string, f Shard, take func(tensor.Named) error) error {
	fh, err := openRegular(filepath.Join(path, f.File))
	if err != nil {
		return err
	}
	defer fh.Close()
	st, err := fh.Stat()
	if err != nil {
		return err
	}
	if f.Bytes >= 0 && st.Size() != f.Bytes {
		return fmt.Errorf("%s: %d bytes, not the %d the manifest says (truncated or corrupt)", f.File, st.Size(), f.Bytes)
	}
	h := sha256.New()
	br := bufio.NewReaderSize(io.TeeReader(fh, h), 1<<20)
	if _, err := tensor.DecodeSafetensorsFrom(br, st.Size(), take); err != nil {
		return fmt.Errorf("%s: %w (truncated or corrupt)", f.File, err)
	}
	if hex.EncodeToString(h.Sum(nil)) != f.SHA256 {
		return fmt.Errorf("%s: checksum does not match the manifest (truncated or corrupt)", f.File)
	}
	return nil
}

// OptimizerMismatchError is a resume under another optimizer than the one
// whose state the checkpoint holds: its state would be dropped unseen (or
// read as another's), so the run refuses it.
type OptimizerMismatchError struct {
	Dir        string
	Step       int
	Have, Want string // the checkpoint's optimizer, the run's
}

func (e *OptimizerMismatchError) Error() string {
	return fmt.Sprintf("--resume %s: checkpoint step-%d holds %s's optimizer state, and this run's --optimizer is %s: resume with --optimizer %s",
		e.Dir, e.Step, e.Have, e.Want, e.Have)
}

// CheckOptimizer says whether a run training with optimizer (a name of
// stage.Optimizers) may resume from c, read from dir. A checkpoint that
// names no optimizer (an --init) holds no optimizer state and fits any.
func (c *Checkpoint) CheckOptimizer(dir, optimizer string) error {
	have := c.Manifest.Optimizer
	if have == "" || have == optimizer {
		return nil
	}
	if _, err := stage.LookupOptimizer(have); err != nil {
		return fmt.Errorf("--resume %s: checkpoint step-%d names optimizer %q, which this build does not know (known: %s)", dir, c.Manifest.Step, have, stage.OptimizerNames())
	}
	return &OptimizerMismatchError{Dir: dir, Step: c.Manifest.Step, Have: have, Want: optimizer}
}
