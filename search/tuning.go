package search

// tuning is how a search runs, as opposed to what it is asked (Options):
// the speedups that change how fast the planners find their plans, never
// which plans they find, and the limits on the DP's device counts and on
// the frontier's work. Tests turn each speedup off and check that every
// plan stays the same byte for byte; a speedup is therefore a field, not a
// package variable, so that such tests run side by side.
//
// A Search takes defaultTuning; its spaces carry it, and its cost models
// and the DPs' prices hold a copy, which nothing writes during a search.
type tuning struct {
	// deviceBounds turns on what the DP knows from device counts alone:
	// overfull subproblems, and that a chain on k devices holds at least
	// the stages they need.
	deviceBounds bool
	// valueBisection makes minT and minTOnMost bisect the candidates'
	// values (leastT) rather than their sorted list (minTBelow).
	valueBisection bool
	// midFirst makes an uncapped bisection solve first at its middle
	// candidate and at the top only when nothing fits there: the top's
	// solve, where every stage meets T and every tail may be absorbed, is
	// the costliest of the bisection, its bounds the loosest, and the least
	// T lies mostly in the lower half of the candidates. The least T is the
	// same in either order (the DP's value never grows with T); a capped
	// bisection (the frontier's) keeps its order, in which its budget is
	// spent.
	midFirst bool
	// reuseProbe lets a bisection take the values the memo holds at its
	// first candidate instead of solving it again: a frontier's bisection
	// starts at the candidate its probe (depthAt) has just solved.
	reuseProbe bool
	// shareFeeds lets groupHost's answers with no tail left to place be
	// shared by every tail.
	shareFeeds bool
	// boundedBisection turns the bisection's bounds on (dpmemo.go).
	boundedBisection bool
	// hintsOn has a DP's bisection look first where earlier ones found
	// their least T (hints.go).
	hintsOn bool
	// eagerRecFit prices recFit with fit and scans it (recomputeMayHelp)
	// instead of pricing it only where a DP lets stages recompute; off by
	// default, it is the simple thing that recHelp is checked against.
	eagerRecFit bool
	// refuseFirst turns the refusals before any search on (refuse.go).
	refuseFirst bool
	// fewerDevices turns Search's tries on fewer devices on.
	fewerDevices bool
	// restFloor lets Search weigh untuned the plans no tuning could make
	// as fast as their planner's fastest.
	restFloor bool
	// frontierWindow makes the frontier sort only the candidates it may
	// probe. Its bisections count candidates from where they start, so
	// that the window's indices, offset from the whole list's, pick the
	// same ones.
	frontierWindow bool
	// tuneFloor lets tune stop at iterationFloor.
	tuneFloor bool

	// maxDPDevices is the most device counts the DP tells apart: its
	// tables grow with the square of them and its splits with the cube.
	// Past it, devices go in groups (dpGroup), each stage on a whole number
	// of groups (BENCHMARKS.md, "Planner history", has what groups cost and
	// saved).
	maxDPDevices int

	// shallowerPlans is how many plans past the least bottleneck the
	// frontier offers at each micro-batch size (0: no frontier), at the
	// frontierSizes most promising, from frontierProbes probes in at most
	// frontierSolves solves of the DP each (a solve of the DP on a large
	// graph over 64 devices takes tens of milliseconds). Four sizes, not
	// two: a model's best shallower plan can lie at the fourth size (dlrm
	// on 32 v100), for a longer search on wide graphs (bench/history.md).
	shallowerPlans, frontierSizes, frontierSolves, frontierProbes int
}

// defaultTuning is how every Search runs: each speedup on but eagerRecFit
// (the slower way, kept as the check on the faster).
func defaultTuning() tuning {
	return tuning{
		deviceBounds:     true,
		valueBisection:   true,
		midFirst:         true,
		reuseProbe:       true,
		shareFeeds:       true,
		boundedBisection: true,
		hintsOn:          true,
		refuseFirst:      true,
		fewerDevices:     true,
		restFloor:        true,
		frontierWindow:   true,
		tuneFloor:        true,
		maxDPDevices:     64,
		shallowerPlans:   3,
		frontierSizes:    4,
		frontierSolves:   12,
		frontierProbes:   6,
	}
}
