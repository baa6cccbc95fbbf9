package runtime

import (
	"errors"
	"strings"
	"testing"
)

func TestCheckpointCheckOptimizer(t *testing.T) {
	for _, c := range []struct {
		have, want string
		ok         bool
		says       string
	}{
		{"adam", "adam", true, ""},
		{"", "sgd", true, ""}, // --init's checkpoint: no optimizer state
		{"adam", "sgd", false, "holds adam's optimizer state, and this run's --optimizer is sgd: resume with --optimizer adam"},
		{"sgd", "adamw", false, "resume with --optimizer sgd"},
		{"lion", "adam", false, `names optimizer "lion", which this build does not know`},
	} {
		t.Run(c.have+"-"+c.want, func(t *testing.T) {
			ck := &Checkpoint{Manifest: Manifest{Step: 8, Optimizer: c.have}}
			err := ck.CheckOptimizer("ck", c.want)
			if c.ok != (err == nil) {
				t.Fatalf("%s checkpoint, --optimizer %s: %v", c.have, c.want, err)
			}
			if err != nil && (!strings.Contains(err.Error(), c.says) || !strings.HasPrefix(err.Error(), "--resume ck: checkpoint step-8 ")) {
				t.Errorf("%q does not say %q", err, c.says)
			}
			var mm *OptimizerMismatchError
			if err != nil && c.have != "lion" && !errors.As(err, &mm) {
				t.Errorf("%T is not an OptimizerMismatchError", err)
			}
		})
	}
}
