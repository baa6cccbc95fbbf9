package dag

import "math/bits"

// Section is a place where the model runs branches side by side: the ops
// between two ops that every other op comes before or after (or the start
// or end of the graph), split into pieces that share no edge.
type Section struct {
	After    string   // the last op before the branches that all ops come after; "" at the start
	Join     string   // the first op after the branches that all ops come before; "" at the end
	Branches []Branch // at least two
}

// Branch is one connected piece of a Section.
type Branch struct {
	First, Last string // in topological order
	Ops         int
	FwdFLOPs    float64
	Params      int64
}

// Branches finds the parallel sections of the graph. An op is on the spine if
// every other op is its ancestor or descendant; the rest, split into weakly
// connected pieces, are the branches. A sequential model has no sections.
func (g *Graph) Branches() []Section {
	n := len(g.m.Ops)
	pos := make([]int, n)
	for k, i := range g.order {
		pos[i] = k
	}
	spine := g.spine()
	comp := g.components(spine)
	// group pieces by the spine ops around them
	type key struct{ after, join int }
	sections := map[key]*Section{}
	var keys []key
	seen := map[int]bool{}
	lastSpine := -1
	for _, i := range g.order {
		if spine[i] {
			lastSpine = i
			continue
		}
		if seen[comp[i]] {
			continue
		}
		seen[comp[i]] = true
		k := key{lastSpine, g.nextSpine(i, spine, pos)}
		if sections[k] == nil {
			sections[k] = &Section{After: g.name(k.after), Join: g.name(k.join)}
			keys = append(keys, k)
		}
		sections[k].Branches = append(sections[k].Branches, g.branch(comp, comp[i]))
	}
	var out []Section
	for _, k := range keys {
		if len(sections[k].Branches) > 1 {
			out = append(out, *sections[k])
		}
	}
	return out
}

func (g *Graph) name(i int) string {
	if i < 0 {
		return ""
	}
	return g.m.Ops[i].Name
}

// nextSpine is the first spine op, in order, after op i; -1 if none.
func (g *Graph) nextSpine(i int, spine []bool, pos []int) int {
	for _, j := range g.order[pos[i]+1:] {
		if spine[j] {
			return j
		}
	}
	return -1
}

func (g *Graph) branch(comp []int, c int) Branch {
	var b Branch
	for _, i := range g.order {
		if comp[i] != c {
			continue
		}
		if b.Ops == 0 {
			b.First = g.m.Ops[i].Name
		}
		b.Last = g.m.Ops[i].Name
		b.Ops++
		b.FwdFLOPs += g.costs[i].FwdFLOPs
		b.Params += g.costs[i].Params
	}
	return b
}

// spine marks the ops comparable to every other op, from ancestor and
// descendant sets kept as bitsets.
func (g *Graph) spine() []bool {
	n := len(g.m.Ops)
	words := (n + 63) / 64
	anc := make([][]uint64, n)
	desc := make([][]uint64, n)
	for _, i := range g.order {
		anc[i] = make([]uint64, words)
		for _, p := range g.Producers(i) {
			or(anc[i], anc[p])
			anc[i][p/64] |= 1 << (p % 64)
		}
	}
	for k := n - 1; k >= 0; k-- {
		i := g.order[k]
		desc[i] = make([]uint64, words)
		for _, s := range g.consumers[i] {
			or(desc[i], desc[s])
			desc[i][s/64] |= 1 << (s % 64)
		}
	}
	spine := make([]bool, n)
	for i := range spine {
		spine[i] = count(anc[i])+count(desc[i])+1 == n
	}
	return spine
}

func or(dst, src []uint64) {
	for w := range dst {
		dst[w] |= src[w]
	}
}

func count(s []uint64) int {
	c := 0
	for _, w := range s {
		c += bits.OnesCount64(w)
	}
	return c
}

// components labels the weakly connected pieces of the ops off the spine.
func (g *Graph) components(spine []bool) []int {
	n := len(g.m.Ops)
	comp := make([]int, n)
	for i := range comp {
		comp[i] = -1
	}
	next := 0
	for _, start := range g.order {
		if spine[start] || comp[start] >= 0 {
			continue
		}
		stack := []int{start}
		comp[start] = next
		for len(stack) > 0 {
			u := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			for _, v := range append(g.Producers(u), g.consumers[u]...) {
				if !spine[v] && comp[v] < 0 {
					comp[v] = next
					stack = append(stack, v)
				}
			}
		}
		next++
	}
	return comp
}
