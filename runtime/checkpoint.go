package runtime

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/graphpipe/graphpipe/stage"
	"github.com/graphpipe/graphpipe/tensor"
)

// CheckpointFormat is the manifest format this build writes and reads.
const CheckpointFormat = "graphpipe/checkpoint@1"

// Manifest describes one checkpoint. It is written last: a checkpoint without
// a manifest, or whose files do not match its checksums, is not whole.
type Manifest struct {
	Format    string            `json:"format"`
	Step      int               `json:"step"` // the next iteration to run: the data position
	Model     string            `json:"model"`
	ModelHash string            `json:"model_sha256"`
	Run       string            `json:"run,omitempty"` // the run that wrote it
	Seed      int64             `json:"seed"`          // the model's seed (parameters and data)
	Plan      string            `json:"plan"`          // what made it, for people: strategy, stages, devices
	Optimizer string            `json:"optimizer"`
	OptStep   int               `json:"optimizer_step"`
	Files     map[string]string `json:"files"` // name → SHA-256
	Created   string            `json:"created"`
}

// Checkpoint is parameters and optimizer state, keyed by name.
type Checkpoint struct {
	Manifest Manifest
	// Params holds the parameters and the buffers (batch_norm's running
	// statistics), side by side under their names.
	Params map[string]*stage.Value[float32]
	Optim  map[string][]float32 // "<param>.<slot>"
}

func stepDir(dir string, step int) string { return filepath.Join(dir, fmt.Sprintf("step-%08d", step)) }

// WriteCheckpoint writes c under dir/step-N atomically: the tensor files go
// into a temporary directory, each fsynced, which is renamed into place; the
// manifest follows the same way. Only the newest two checkpoints are kept.
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
	c.Manifest.Files = map[string]string{}
	for _, f := range []struct {
		name    string
		entries []tensor.Named
	}{{"params.safetensors", params}, {"optim.safetensors", optim}} {
		b, err := tensor.EncodeSafetensors(f.entries, nil)
		if err != nil {
			return err
		}
		if err := writeSynced(filepath.Join(tmp, f.name), b); err != nil {
			return err
		}
		sum := sha256.Sum256(b)
		c.Manifest.Files[f.name] = hex.EncodeToString(sum[:])
	}
	final := stepDir(dir, c.Manifest.Step)
	os.RemoveAll(final)
	if err := os.Rename(tmp, final); err != nil {
		return err
	}
	c.Manifest.Format, c.Manifest.Created = CheckpointFormat, time.Now().UTC().Format(time.RFC3339)
	m, _ := json.MarshalIndent(c.Manifest, "", "  ")
	tmpM := filepath.Join(final, ".manifest.tmp")
	if err := writeSynced(tmpM, append(m, '\n')); err != nil {
		return err
	}
	if err := os.Rename(tmpM, filepath.Join(final, "manifest.json")); err != nil {
		return err
	}
	syncDir(final)
	syncDir(dir)
	return prune(dir, 2)
}

func writeSynced(path string, b []byte) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
}

// steps lists the step numbers of the checkpoint directories, newest first.
func steps(dir string) []int {
	entries, _ := os.ReadDir(dir)
	var out []int
	for _, e := range entries {
		if n, ok := strings.CutPrefix(e.Name(), "step-"); ok && e.IsDir() {
			if s, err := strconv.Atoi(n); err == nil {
				out = append(out, s)
			}
		}
	}
	sort.Sort(sort.Reverse(sort.IntSlice(out)))
	return out
}

// prune removes all but the newest keep whole checkpoints, anything older,
// and temporary directories a writer that died left behind.
func prune(dir string, keep int) error {
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".step-") && strings.Contains(e.Name(), ".tmp-") {
			os.RemoveAll(filepath.Join(dir, e.Name()))
		}
	}
	whole := 0
	for _, s := range steps(dir) {
		if whole >= keep {
			if err := os.RemoveAll(stepDir(dir, s)); err != nil {
				return err
			}
			continue
		}
		if _, err := readCheckpoint(stepDir(dir, s)); err == nil {
			whole++
		}
	}
	return nil
}

// LoadCheckpoint reads the newest whole checkpoint in dir; it says which it
// skipped and why through skipped. It fails if none is whole.
func LoadCheckpoint(dir string, skipped func(step int, why error)) (*Checkpoint, error) {
	all := steps(dir)
	for _, s := range all {
		c, err := readCheckpoint(stepDir(dir, s))
		if err == nil {
			return c, nil
		}
		if skipped != nil {
			skipped(s, err)
		}
	}
	if len(all) == 0 {
		return nil, fmt.Errorf("checkpoint: %s holds no checkpoint", dir)
	}
	return nil, fmt.Errorf("checkpoint: none of the %d checkpoints in %s is whole", len(all), dir)
}

// checkpointFiles are the files a checkpoint holds besides its manifest.
var checkpointFiles = []string{"params.safetensors", "optim.safetensors"}

// DecodeManifest reads a checkpoint's manifest.json strictly: the format,
// steps that are not negative, and a SHA-256 (64 hex digits) for each of
// the checkpoint's files and none other.
func DecodeManifest(b []byte) (Manifest, error) {
	var m Manifest
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil || m.Format != CheckpointFormat {
		return Manifest{}, fmt.Errorf("manifest: not a %s manifest", CheckpointFormat)
	}
	if _, err := dec.Token(); err != io.EOF {
		return Manifest{}, fmt.Errorf("manifest: data after the closing brace")
	}
	switch {
	case m.Step < 0:
		return Manifest{}, fmt.Errorf("manifest: step: must not be negative, got %d", m.Step)
	case m.OptStep < 0:
		return Manifest{}, fmt.Errorf("manifest: optimizer_step: must not be negative, got %d", m.OptStep)
	case len(m.Files) != len(checkpointFiles):
		return Manifest{}, fmt.Errorf("manifest: files: %d files, want %s", len(m.Files), strings.Join(checkpointFiles, " and "))
	}
	for _, name := range checkpointFiles {
		sum, ok := m.Files[name]
		if _, err := hex.DecodeString(sum); !ok || err != nil || len(sum) != 64 {
			return Manifest{}, fmt.Errorf("manifest: files: %s: want its SHA-256 in 64 hex digits", name)
		}
	}
	return m, nil
}

func readCheckpoint(path string) (*Checkpoint, error) {
	mb, err := os.ReadFile(filepath.Join(path, "manifest.json"))
	if err != nil {
		return nil, fmt.Errorf("no manifest: %w", err)
	}
	c := &Checkpoint{Params: map[string]*stage.Value[float32]{}, Optim: map[string][]float32{}}
	if c.Manifest, err = DecodeManifest(mb); err != nil {
		return nil, err
	}
	for _, name := range checkpointFiles {
		b, err := os.ReadFile(filepath.Join(path, name))
		if err != nil {
			return nil, err
		}
		sum := sha256.Sum256(b)
		if hex.EncodeToString(sum[:]) != c.Manifest.Files[name] {
			return nil, fmt.Errorf("%s: checksum does not match the manifest (truncated or corrupt)", name)
		}
		entries, _, err := tensor.DecodeSafetensors(b)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		for _, e := range entries {
			if name == "params.safetensors" {
				c.Params[e.Name] = &stage.Value[float32]{Shape: e.Shape, Data: e.F32}
			} else {
				c.Optim[e.Name] = e.F32
			}
		}
	}
	return c, nil
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
