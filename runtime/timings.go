package runtime

import (
	"time"
)

// Timings say how a run tells the living from the lost. Heartbeats are
// plain publishes (a lost one is made up by the next), every
// HeartbeatEvery; silence for HeartbeatTimeout means the other side is
// gone. A zero field means its default (WithDefaults). The coordinator's
// are sent to its workers with their stages, so one run keeps one set.
type Timings struct {
	HeartbeatEvery   time.Duration `json:"heartbeat_every,omitempty"`
	HeartbeatTimeout time.Duration `json:"heartbeat_timeout,omitempty"`
	// HangTimeout: a worker computing one action for longer than this (or
	// than ten times its stage's planned compute, if more) says it hangs.
	HangTimeout time.Duration `json:"hang_timeout,omitempty"`
	// WarmupHangTimeout replaces HangTimeout in a worker's first
	// iteration, which also pays for what runs once: a GPU's kernels
	// compiled, its libraries' code loaded, pools filled.
	WarmupHangTimeout time.Duration `json:"warmup_hang_timeout,omitempty"`
	// ConfirmTimeout is how long a coordinator waits for an agent of a
	// pool to confirm an offer before it takes the agent for dead.
	ConfirmTimeout time.Duration `json:"confirm_timeout,omitempty"`
}

// The default timings.
const (
	DefaultHeartbeatEvery    = 500 * time.Millisecond
	DefaultHeartbeatTimeout  = 4 * time.Second // detection within 5 s: this, a beat and a check
	DefaultHangTimeout       = 4 * time.Second
	DefaultWarmupHangTimeout = 60 * time.Second
	DefaultConfirmTimeout    = 2 * time.Second
)

// WithDefaults is tm with every zero field its default.
func (tm Timings) WithDefaults() Timings {
	or := func(d *time.Duration, def time.Duration) {
		if *d == 0 {
			*d = def
		}
	}
	or(&tm.HeartbeatEvery, DefaultHeartbeatEvery)
	or(&tm.HeartbeatTimeout, DefaultHeartbeatTimeout)
	or(&tm.HangTimeout, DefaultHangTimeout)
	or(&tm.WarmupHangTimeout, DefaultWarmupHangTimeout)
	or(&tm.ConfirmTimeout, DefaultConfirmTimeout)
	return tm
}

// check refuses timings no run can keep: a negative one, or a heartbeat
// timeout shorter than two heartbeats (one late beat would lose a peer).
// field prefixes the field named in the *JobError.
func (tm Timings) check(field string) error {
	for _, f := range []struct {
		name string
		d    time.Duration
	}{{"HeartbeatEvery", tm.HeartbeatEvery}, {"HeartbeatTimeout", tm.HeartbeatTimeout}, {"HangTimeout", tm.HangTimeout},
		{"WarmupHangTimeout", tm.WarmupHangTimeout}, {"ConfirmTimeout", tm.ConfirmTimeout}} {
		if f.d < 0 {
			return jobErr(field+f.name, "must be at least 0, got %v", f.d)
		}
	}
	d := tm.WithDefaults()
	if d.HeartbeatTimeout < 2*d.HeartbeatEvery {
		return jobErr(field+"HeartbeatTimeout", "must be at least %v (two heartbeats), got %v", 2*d.HeartbeatEvery, d.HeartbeatTimeout)
	}
	return nil
}
