package microbatch

import (
	"fmt"
	"strings"
)

// ScheduleKind describes a schedule by what the code that builds, plans
// and tunes it branches on, so that those decisions read its properties,
// never its name. A schedule is one row of scheduleKinds; a new order of
// passes needs its builder too (New, Warmed), and a property that nothing
// here expresses needs a field and the code that reads it, as NoFlush
// did.
type ScheduleKind struct {
	// Name is how flags and the plan file spell the schedule.
	Name string
	// Split: the backward splits into B (the input gradient) and W (the
	// weight gradient), which may run later. The planner prices W on its
	// own; a stage cannot recompute its forward (that happens at B, and W
	// needs the stash after it).
	Split bool
	// AllForwardsFirst: every forward of an iteration runs before any
	// backward (GPipe), so every stage holds every micro-batch's stash at
	// once; otherwise a stage holds at most its warm-up count, at least its
	// depth (1F1B's order).
	AllForwardsFirst bool
	// Tunable: the stages' warm-up counts come from the durations (Warmup,
	// in NewTimed), and the planner's tuner may raise them (Warmed builds
	// the schedule for any counts).
	Tunable bool
	// Timed: only NewTimed builds it: the lists are played forward with
	// the durations.
	Timed bool
	// NoFlush: the pipeline is not flushed between iterations (2bw,
	// twobw.go): a stage updates its weights after its batch's last
	// backward while the next batch's first forwards are in flight, so
	// gradients are taken at weights one update stale (asynchronous: the
	// planner weighs it only when the user allows stale weights), and a
	// stage keeps two versions of its weights.
	NoFlush bool
}

// scheduleKinds are the schedules this package builds, in the order Names
// lists them (see the package doc): 1f1b, warmed up by Warmup when built by
// NewTimed; 1f1b-depth, each stage holding its depth (1 + its longest path
// to a sink: PipeDream-Flush's rule) however it is built; zb (ZeroBubble),
// which needs durations; gpipe; 2bw (TwoBW), 1F1B without a flush,
// warmed up as 1f1b. Nothing writes it.
var scheduleKinds = []ScheduleKind{
	{Name: "1f1b", Tunable: true},
	{Name: "1f1b-depth"},
	{Name: "zb", Split: true, Tunable: true, Timed: true},
	{Name: "gpipe", AllForwardsFirst: true},
	{Name: "2bw", Tunable: true, NoFlush: true},
}

// Names are the schedules New and NewTimed build, scheduleKinds' names.
var Names = kindNames()

func kindNames() []string {
	out := make([]string, len(scheduleKinds))
	for i, k := range scheduleKinds {
		out[i] = k.Name
	}
	return out
}

// Kinds are the schedules this package builds, in the order of Names.
func Kinds() []ScheduleKind { return append([]ScheduleKind(nil), scheduleKinds...) }

// UnknownScheduleError is a schedule name that is none of Names.
type UnknownScheduleError struct {
	Name string
}

func (e *UnknownScheduleError) Error() string {
	return fmt.Sprintf("unknown schedule %q (known: %s)", e.Name, strings.Join(kindNames(), ", "))
}

// KindOf is the named schedule's description, or an UnknownScheduleError.
func KindOf(name string) (ScheduleKind, error) {
	for _, k := range scheduleKinds {
		if k.Name == name {
			return k, nil
		}
	}
	return ScheduleKind{}, &UnknownScheduleError{Name: name}
}

// Splits says whether the named schedule splits the backward into B and W
// (ScheduleKind.Split; false for an unknown name).
func Splits(name string) bool {
	k, _ := KindOf(name)
	return k.Split
}

// Known says whether name is one of Names.
func Known(name string) bool {
	_, err := KindOf(name)
	return err == nil
}

// New builds the schedule without durations: GPipe's order, or 1F1B's with
// every stage warmed up to its depth (without a flush: TwoBW). A Timed
// schedule is refused.
func (k ScheduleKind) New(p Pipeline) (*Schedule, error) {
	switch {
	case k.Timed:
		return nil, fmt.Errorf("schedule %s is built from durations (NewTimed)", k.Name)
	case k.AllForwardsFirst:
		return GPipe(p)
	case k.NoFlush:
		return TwoBW(p)
	}
	return OneFOneB(p)
}

// NewTimed builds the schedule for these durations and a per-device memory
// limit in bytes (0: none): a Tunable one warmed up as Warmup says, the
// others as New builds them.
func (k ScheduleKind) NewTimed(p Pipeline, t Timing, limit int64) (*Schedule, error) {
	if !k.Tunable {
		return k.New(p)
	}
	warm, err := Warmup(p, t, limit)
	if err != nil {
		return nil, err
	}
	return k.Warmed(p, t, warm)
}

// Warmed builds a Tunable schedule in which stage s runs warm[s] forwards
// before its first backward: ZeroBubble where the backward splits (it
// needs the durations), TwoBWWarm without a flush, OneFOneBWarm otherwise.
func (k ScheduleKind) Warmed(p Pipeline, t Timing, warm []int) (*Schedule, error) {
	switch {
	case !k.Tunable:
		return nil, fmt.Errorf("schedule %s takes no warm-up counts", k.Name)
	case k.Split:
		return ZeroBubble(p, t, warm)
	case k.NoFlush:
		return TwoBWWarm(p, warm)
	}
	return OneFOneBWarm(p, warm)
}

// Rewarmed is Warmed(base.Pipe, t, warm) for a base schedule that Warmed
// (or this) built with baseWarm: where the lists allow (1F1B's), a stage
// whose count is the same keeps base's list (OneFOneBWarmFrom), so that a
// search trying many counts, a few stages at a time, builds only what
// changes; a split schedule's lists depend on every stage's, and it is
// built again whole.
func (k ScheduleKind) Rewarmed(base *Schedule, baseWarm, warm []int, t Timing) (*Schedule, error) {
	if k.Tunable && !k.Split && !k.NoFlush {
		return OneFOneBWarmFrom(base, baseWarm, warm)
	}
	return k.Warmed(base.Pipe, t, warm)
}
