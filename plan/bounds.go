package plan

import (
	"fmt"
	"math"
)

// Bounds on the numbers a device profile, a cluster file and op times give
// the cost model. Each is far past any real device's (an H100 does 6.7e13
// FLOP/s and moves 3e12 bytes/s; an op call, a message or a launch takes
// microseconds to seconds), and near enough that every time the cost model
// derives from them, summed over the largest plan, stays finite: a profile
// or an op time of 1e308 passed the finite checks, and its sums overflowed
// to +Inf, which search and run could not write (json: unsupported value)
// and sim printed.
const (
	// MinRate and MaxRate bound a rate: FLOP/s, bytes/s. A byte over a
	// link of 1e-300 bytes/s takes +Inf seconds; a rate past 1e30 (what a
	// fit of measured times gives only when it sees no cost per byte) is
	// multiplied by device counts. Between them every product and
	// quotient the cost model makes is finite.
	MinRate = 1.0
	MaxRate = 1e30
	// MaxSeconds bounds a time: one op call, a latency, a launch, a
	// worker's fixed cost.
	MaxSeconds = 1e6
	// MaxHalfWork bounds half_work, FLOPs: a kernel's time is (work +
	// half_work) / (peak · max_eff).
	MaxHalfWork = 1e18
	// MinMaxEff bounds max_eff from below (at most 1).
	MinMaxEff = 1e-6
	// MaxSlowdown bounds a core slowdown (and 1/MaxSlowdown from below).
	MaxSlowdown = 1e6
	// MaxHostCores bounds host_cores.
	MaxHostCores = 1 << 20
	// MaxStored bounds a number a plan stores (a stage's seconds, an
	// edge's): far past anything search derives from bounded inputs
	// (about 1e40 at worst), near enough that a simulation's sums of them
	// are finite.
	MaxStored = 1e100
)

// rate checks a required rate: in [MinRate, MaxRate].
func rate(name string, v float64) error {
	if !(v >= MinRate && v <= MaxRate) {
		return fmt.Errorf("%s: must be a rate between %g and %g per second, got %g", name, MinRate, MaxRate, v)
	}
	return nil
}

// optionalRate checks a rate that 0 leaves unmeasured.
func optionalRate(name string, v float64) error {
	if v == 0 {
		return nil
	}
	return rate(name, v)
}

// seconds checks a time: in [0, MaxSeconds].
func seconds(name string, v float64) error {
	if !(v >= 0 && v <= MaxSeconds) {
		return fmt.Errorf("%s: must be between 0 and %g seconds, got %g", name, float64(MaxSeconds), v)
	}
	return nil
}

// within checks a number in [lo, hi].
func within(name string, v, lo, hi float64) error {
	if !(v >= lo && v <= hi) || math.IsNaN(v) {
		return fmt.Errorf("%s: must be between %g and %g, got %g", name, lo, hi, v)
	}
	return nil
}

// firstErr is the first error of checks.
func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
