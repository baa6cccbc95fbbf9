package search

import "math"

// Device sets: the DP counts a subproblem's devices as one integer. For
// devices of one kind it is their count (in groups, dpGroup); for a cluster
// of several kinds (plan.Cluster) it is a vector of counts, one per kind,
// read as a number in mixed radix (kind t's count is digit t, of base its
// groups + 1). A first part of a subproblem takes some of its devices and
// leaves the rest: as numbers, rest = set − part, since no digit borrows.
// A stage's devices are of one kind (its set has one nonzero digit); a part
// planned on its own (a kid of the SP tree) may take devices of several.
// With one kind every set is a count and every loop over first parts is
// the loop over counts it always was.

// devSets are the device sets of one DP: the kinds' groups and how sets
// are numbered and listed.
type devSets struct {
	counts []int // per kind: its devices, in groups
	g      []int // per kind: devices per group
	kmax   []int // per kind: the most groups a stage of it takes (min(counts, b/g))
	stride []int // per kind: the value of one group of it in a set's number
	off    []int // per kind: its first column in prices.fit
	w      int   // columns per block in prices.fit
	total  int   // every kind's groups: the most stages after a subproblem
	n      int   // sets: the product of counts+1
	full   int   // the set of every device
	// col, per set of one kind, is its column in prices.fit (off+count),
	// -1 for the empty set, sets of several kinds and over kmax
	col []int32
	ids []int32 // 0..n-1: the lists for one kind are its slices
	// need, per set, is the fewest stages its devices make, each taking at
	// most kmax groups of one kind (math.MaxInt32 where a kind's kmax is 0)
	need []int32
	// parts and capped, per set (several kinds only), are the first parts
	// it may give, ascending: every nonempty proper subset; those with at
	// most kmax of each kind
	parts, capped [][]int32
}

// maxDeviceSets bounds the sets of a cluster of several kinds: the DP's
// tables grow with them, and its splits with their square. Past it, the
// kinds' devices go in larger groups.
const maxDeviceSets = 1200

// newDevSets numbers the sets of devices[t] devices of each kind t at
// micro-batch b, each kind in groups past most devices (dpGroup).
func newDevSets(devices []int, b int64, most int) devSets {
	k := len(devices)
	s := devSets{counts: make([]int, k), g: make([]int, k), kmax: make([]int, k), stride: make([]int, k), off: make([]int, k)}
	for t, n := range devices {
		s.g[t] = dpGroup(n, most)
	}
	for k > 1 { // coarser groups, the kind with the most first, until the sets are few enough
		n := 1
		for t, d := range devices {
			n *= d/s.g[t] + 1
		}
		if n <= maxDeviceSets {
			break
		}
		most := 0
		for t, d := range devices {
			if d/s.g[t] > devices[most]/s.g[most] {
				most = t
			}
		}
		s.g[most]++
		for devices[most]%s.g[most] != 0 && s.g[most] < devices[most] {
			s.g[most]++
		}
	}
	s.n = 1
	for t, d := range devices {
		s.counts[t] = d / s.g[t]
		s.kmax[t] = int(min(int64(s.counts[t]), b/int64(s.g[t]))) // a micro-batch split over no more devices than samples
		s.stride[t] = s.n
		s.n *= s.counts[t] + 1
		s.off[t] = s.w
		s.w += s.kmax[t] + 1
		s.total += s.counts[t]
		s.full += s.counts[t] * s.stride[t]
	}
	s.col = make([]int32, s.n)
	s.ids = make([]int32, s.n)
	for v := range s.col {
		s.col[v], s.ids[v] = -1, int32(v)
	}
	for t := range devices {
		for c := 1; c <= s.kmax[t]; c++ {
			s.col[c*s.stride[t]] = int32(s.off[t] + c)
		}
	}
	s.need = make([]int32, s.n)
	for v := range s.need {
		for t := range devices {
			switch c := s.digit(v, t); {
			case c == 0:
			case s.kmax[t] == 0:
				s.need[v] = math.MaxInt32
			case s.need[v] < math.MaxInt32:
				s.need[v] += int32((c + s.kmax[t] - 1) / s.kmax[t])
			}
		}
	}
	if k > 1 {
		s.parts, s.capped = make([][]int32, s.n), make([][]int32, s.n)
		for v := 1; v < s.n; v++ {
			for u := 1; u < v; u++ {
				if !s.within(u, v) {
					continue
				}
				s.parts[v] = append(s.parts[v], int32(u))
				if s.underKmax(u) {
					s.capped[v] = append(s.capped[v], int32(u))
				}
			}
		}
	}
	return s
}

// digit is set v's groups of kind t.
func (s *devSets) digit(v, t int) int { return v / s.stride[t] % (s.counts[t] + 1) }

// within says whether set u is a subset of set v.
func (s *devSets) within(u, v int) bool {
	for t := range s.counts {
		if s.digit(u, t) > s.digit(v, t) {
			return false
		}
	}
	return true
}

// underKmax says whether set u has at most kmax groups of each kind.
func (s *devSets) underKmax(u int) bool {
	for t := range s.counts {
		if s.digit(u, t) > s.kmax[t] {
			return false
		}
	}
	return true
}

// part is the kind and groups of a set of one kind (of fit's columns).
func (s *devSets) part(v int) (t, k int) {
	for t := len(s.counts) - 1; t >= 0; t-- {
		if v >= s.stride[t] {
			return t, v / s.stride[t]
		}
	}
	return 0, 0
}

// firstParts are the first parts set v may give when others follow (the
// rest nonempty), ascending: capped, only those with at most kmax groups of
// each kind.
func (s *devSets) firstParts(v int, capped bool) []int32 {
	if len(s.counts) > 1 {
		if capped {
			return s.capped[v]
		}
		return s.parts[v]
	}
	n := v - 1
	if capped {
		n = min(n, s.kmax[0])
	}
	return s.ids[1 : 1+max(n, 0)]
}

// kRange is the first parts of set v: all of it when the part is the last
// (takes every device left), else firstParts, uncapped.
func (s *devSets) kRange(last bool, v int) []int32 {
	if last {
		return s.ids[v : v+1]
	}
	return s.firstParts(v, false)
}

// overfull says whether set k has more devices than units i.. of n can
// use: the stages they make hold a leaf each (n.most), fewer than the
// set's devices need (need). Every subproblem on k's devices exactly is
// then inf, without a look at its options.
func (s *devSets) overfull(n *snode, i, k int) bool {
	return k > 0 && int(s.need[k]) > n.most[i]
}

// kinds is how many device kinds there are.
func (s *devSets) kinds() int { return len(s.counts) }
