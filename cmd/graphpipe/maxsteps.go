package main

import (
	"fmt"
	"io"
	"os"
	"strconv"
)

// maxStepsEnv, when set to N, stops every train and run after N steps from
// where it starts: for trying the README's commands quickly (make readme
// sets it), not for training.
const maxStepsEnv = "GRAPHPIPE_MAX_STEPS"

// capSteps applies maxStepsEnv to a run of steps that starts at step from,
// saying so on log when it shortens the run; a value that is not a positive
// integer is a usage error.
func capSteps(log io.Writer, steps, from int) (int, error) {
	v, set := os.LookupEnv(maxStepsEnv)
	if !set || v == "" {
		return steps, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		return 0, usagef("%s: must be a positive number of steps, got %q", maxStepsEnv, v)
	}
	if from+n >= steps {
		return steps, nil
	}
	fmt.Fprintf(log, "graphpipe: %s=%d: training steps %d to %d of %d\n", maxStepsEnv, n, from+1, from+n, steps)
	return from + n, nil
}

// capCheckpoints keeps a run that capSteps shortened checkpointing: an
// interval longer than the steps it now trains becomes that many steps.
func capCheckpoints(every, steps, from int) int {
	if every > steps-from {
		return steps - from
	}
	return every
}
