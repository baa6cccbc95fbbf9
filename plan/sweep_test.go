package plan

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

const goodSweep = `{"format": "graphpipe/sweep@1", "jobs": [
  {"name": "a", "model": "mmt.json", "steps": 200, "optimizer": "adam", "lr": 0.001},
  {"name": "b.2", "model": "/m/dlrm.json", "steps": 50, "batch": 64, "micro_batch": 8, "schedule": "zb", "precision": "bf16",
   "seed": 7, "weight_decay": 0, "momentum": 0.9, "optimizer": "sgd", "lr_schedule": "cosine", "warmup_steps": 5, "clip_grad_norm": 1,
   "data": "d.npz", "op_times": "t.json", "after": ["a"]},
  {"name": "c", "model": "mmt.json", "steps": 1, "after": ["a", "b.2"]}]}`

func TestDecodeSweep(t *testing.T) {
	s, err := DecodeSweep([]byte(goodSweep))
	if err != nil {
		t.Fatal(err)
	}
	b := s.Jobs[1]
	if len(s.Jobs) != 3 || b.Name != "b.2" || b.Batch != 64 || *b.Seed != 7 || *b.WeightDecay != 0 || b.After[0] != "a" || s.Index("c") != 2 || s.Index("z") != -1 {
		t.Fatalf("%+v", s)
	}
}

// TestDecodeSweepRefuses: each wrong file is refused with a SweepError
// naming the job (or the file) and the field.
func TestDecodeSweepRefuses(t *testing.T) {
	job := func(fields string) string {
		return `{"format": "graphpipe/sweep@1", "jobs": [{"name": "a", "model": "m.json", "steps": 5}, {"name": "b", "model": "m.json", "steps": 5` + fields + `}]}`
	}
	cases := []struct {
		name, file, job, field, says string
	}{
		{"empty", " ", "", "format", "empty"},
		{"not json", "{", "", "format", "not a sweep file"},
		{"trailing", `{"format": "graphpipe/sweep@1", "jobs": [{"name": "a", "model": "m", "steps": 1}]} {}`, "", "format", "after the closing brace"},
		{"format", `{"format": "graphpipe/plan@1", "jobs": []}`, "", "format", `want "graphpipe/sweep@1"`},
		{"no jobs", `{"format": "graphpipe/sweep@1", "jobs": []}`, "", "jobs", "1 to 1024"},
		{"unknown field", job(`, "lerning_rate": 1`), "", "format", `unknown field "lerning_rate"`},
		{"no name", `{"format": "graphpipe/sweep@1", "jobs": [{"model": "m", "steps": 1}]}`, "", "name", "required"},
		{"name path", `{"format": "graphpipe/sweep@1", "jobs": [{"name": "../x", "model": "m", "steps": 1}]}`, "", "name", "must not start with '.'"},
		{"name slash", `{"format": "graphpipe/sweep@1", "jobs": [{"name": "x/y", "model": "m", "steps": 1}]}`, "", "name", "letters, digits"},
		{"repeated name", `{"format": "graphpipe/sweep@1", "jobs": [{"name": "a", "model": "m", "steps": 1}, {"name": "a", "model": "m", "steps": 1}]}`, "a", "name", "jobs[0] has this name too"},
		{"no model", `{"format": "graphpipe/sweep@1", "jobs": [{"name": "a", "steps": 1}]}`, "a", "model", "required"},
		{"no steps", `{"format": "graphpipe/sweep@1", "jobs": [{"name": "a", "model": "m"}]}`, "a", "steps", "got 0"},
		{"batch", job(`, "batch": -1`), "b", "batch", "got -1"},
		{"micro-batch", job(`, "batch": 6, "micro_batch": 4`), "b", "micro_batch", "does not divide"},
		{"lr", job(`, "lr": -0.1`), "b", "lr", "not negative"},
		{"weight decay", job(`, "weight_decay": -1`), "b", "weight_decay", "not negative"},
		// a momentum past float32 once became +Inf on its way to the
		// trainer, which refused "+Inf", not what the file said
		{"momentum 1e300", job(`, "optimizer": "sgd", "momentum": 1e300`), "b", "momentum", "must be in [0, 1), got 1e+300"},
		{"momentum 1", job(`, "optimizer": "sgd", "momentum": 1`), "b", "momentum", "must be in [0, 1), got 1"},
		{"warmup", job(`, "warmup_steps": -1`), "b", "warmup_steps", "got -1"},
		{"schedule", job(`, "schedule": "pipedream"`), "b", "schedule", "pipedream"},
		{"precision", job(`, "precision": "fp8"`), "b", "precision", `unknown precision "fp8"`},
		{"after nobody", job(`, "after": ["z"]`), "b", "after", `no job is named "z"`},
		{"after itself", job(`, "after": ["b"]`), "b", "after", "itself"},
		{"after twice", job(`, "after": ["a", "a"]`), "b", "after", `names "a" twice`},
		{"cycle", `{"format": "graphpipe/sweep@1", "jobs": [{"name": "a", "model": "m", "steps": 1, "after": ["c"]}, {"name": "b", "model": "m", "steps": 1, "after": ["a"]}, {"name": "c", "model": "m", "steps": 1, "after": ["b"]}]}`,
			"a", "after", `"a" waits for "c" waits for "b" waits for "a"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := DecodeSweep([]byte(c.file))
			var se *SweepError
			if !errors.As(err, &se) {
				t.Fatalf("got %v, want a SweepError", err)
			}
			if se.Job != c.job || se.Field != c.field || !strings.Contains(se.Msg, c.says) {
				t.Fatalf("job %q field %q: %q; want job %q field %q saying %q", se.Job, se.Field, se.Msg, c.job, c.field, c.says)
			}
			if c.job != "" && !strings.Contains(err.Error(), `job "`+c.job+`": `+c.field+": ") {
				t.Fatalf("%q does not name the job and the field", err)
			}
		})
	}
}

// FuzzDecodeSweep: a sweep file is refused with a SweepError, or decodes to
// jobs of distinct, valid names whose `after` lists name other jobs and
// leave them in an order where each comes after those it waits for;
// written back, it decodes to the same.
func FuzzDecodeSweep(f *testing.F) {
	f.Add([]byte(goodSweep))
	f.Add([]byte(`{"format": "graphpipe/sweep@1", "jobs": [{"name": "a", "model": "m", "steps": 1, "after": ["a"]}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var s *Sweep
		var err error
		if n := allocated(func() { s, err = DecodeSweep(data) }); n > decodeBudget(len(data)) {
			t.Fatalf("%d bytes allocated for a sweep file of %d", n, len(data))
		}
		if err != nil {
			var se *SweepError
			if !errors.As(err, &se) {
				t.Fatalf("not a SweepError: %v", err)
			}
			return
		}
		if len(s.Jobs) < 1 || len(s.Jobs) > MaxSweepJobs {
			t.Fatalf("%d jobs", len(s.Jobs))
		}
		for _, j := range s.Jobs {
			if CheckJobName(j.Name) != nil || j.Steps < 1 {
				t.Fatalf("job %+v", j)
			}
		}
		if s.cycle() != nil {
			t.Fatal("a cycle decoded")
		}
		back, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		s2, err := DecodeSweep(back)
		if err != nil {
			t.Fatalf("written back, it is refused: %v\n%s", err, back)
		}
		again, _ := json.Marshal(s2)
		if string(again) != string(back) {
			t.Fatalf("written back twice, it differs:\n%s\n%s", back, again)
		}
	})
}
