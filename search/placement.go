package search

import (
	"slices"
	"sort"
)

// place gives each stage its devices: ks[i] devices for stage i out of
// total, perNode to a node. The DP prices a stage of at most perNode devices
// as living inside one node (its all-reduce on the intra-node link), so the
// placement keeps such stages inside one node wherever the counts allow:
//
//  1. a stage of k ≥ perNode devices takes ⌊k/perNode⌋ whole nodes, lowest
//     first; its remainder waits for step 3;
//  2. stages of fewer than perNode devices, largest first (stage order on
//     ties), each go to the node with the fewest free devices that still
//     holds them (best fit, lowest node on ties);
//  3. the remainders and any small stage that found no node take the free
//     devices left, lowest first, in stage order.
//
// Every device goes to at most one stage; each stage's list is ascending.
// A chain of stages whose sizes fill nodes exactly gets the same devices as
// numbering them in order.
func place(ks []int, total, perNode int) [][]int { return placeNodes(ks, total, perNode, false) }

// placeSmallFirst is place with step 1 for the stages of whole nodes only
// (a multiple of perNode devices): a larger stage with a remainder waits
// for step 3, after the small stages found their nodes. Its all-reduce
// crosses nodes wherever its devices lie, while the nodes it would have
// taken whole may be what keeps a small stage inside one: DLRM at 32 v100
// (stages of 3, 3, 3, 3, 3, 3, 4 and 10) has its sixth 3 on three nodes
// under place, beside the 10's two whole nodes.
func placeSmallFirst(ks []int, total, perNode int) [][]int {
	return placeNodes(ks, total, perNode, true)
}

// placeNodes is place, and placeSmallFirst where smallFirst.
func placeNodes(ks []int, total, perNode int, smallFirst bool) [][]int {
	if perNode < 1 || perNode > total {
		perNode = total // one node of them all (and no overflow below)
	}
	nodes := (total + perNode - 1) / perNode
	free := make([][]int, nodes) // free devices per node, ascending
	for d := 0; d < total; d++ {
		free[d/perNode] = append(free[d/perNode], d)
	}
	out := make([][]int, len(ks))
	left := make([]int, len(ks)) // devices still to give
	copy(left, ks)
	take := func(s, n, count int) {
		out[s] = append(out[s], free[n][:count]...)
		free[n] = free[n][count:]
		left[s] -= count
	}
	for s, k := range ks { // 1: whole nodes
		if smallFirst && k%perNode != 0 {
			continue
		}
		for n := 0; n < nodes && left[s] >= perNode && k >= perNode; n++ {
			if len(free[n]) == perNode {
				take(s, n, perNode)
			}
		}
	}
	small := make([]int, 0, len(ks))
	for s, k := range ks {
		if k < perNode {
			small = append(small, s)
		}
	}
	sort.SliceStable(small, func(i, j int) bool { return ks[small[i]] > ks[small[j]] })
	for _, s := range small { // 2: best fit
		best := -1
		for n := range free {
			if len(free[n]) >= left[s] && (best < 0 || len(free[n]) < len(free[best])) {
				best = n
			}
		}
		if best >= 0 {
			take(s, best, left[s])
		}
	}
	for s := range ks { // 3: the rest, lowest devices first
		for n := 0; n < nodes && left[s] > 0; n++ {
			take(s, n, min(left[s], len(free[n])))
		}
		sort.Ints(out[s])
	}
	return out
}

// placements are the device assignments a plan is simulated with: stages
// numbered onto devices in order (what keeps a chain's neighbours together),
// and, each where it differs from those before it, place's node-aligned
// assignment and placeSmallFirst's.
func placements(ks []int, total, perNode int) [][][]int {
	inOrder := make([][]int, len(ks))
	next := 0
	for i, k := range ks {
		for d := 0; d < k; d++ {
			inOrder[i] = append(inOrder[i], next+d)
		}
		next += k
	}
	out := [][][]int{inOrder}
	for _, c := range [][][]int{place(ks, total, perNode), placeSmallFirst(ks, total, perNode)} {
		if !slices.ContainsFunc(out, func(o [][]int) bool { return slices.EqualFunc(o, c, slices.Equal[[]int]) }) {
			out = append(out, c)
		}
	}
	return out
}
