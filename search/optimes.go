package search

import (
	"fmt"
	"sort"

	"github.com/graphpipe/graphpipe/dag"
	"github.com/graphpipe/graphpipe/plan"
)

// seriesAt is the op's time per call at per-device micro-batch m: linear between
// the measured sizes around m, and in proportion to m beyond them (below the
// smallest, the smallest's time: a call costs at least that).
func seriesAt(s *plan.OpSeries, m int64) opTime {
	ms := s.MicroBatch
	n := len(ms)
	pick := func(v []float64) float64 {
		j := sort.Search(n, func(j int) bool { return ms[j] >= m })
		switch {
		case j == n:
			return v[n-1] * float64(m) / float64(ms[n-1])
		case ms[j] == m || j == 0:
			return v[j]
		}
		f := float64(m-ms[j-1]) / float64(ms[j]-ms[j-1])
		return v[j-1] + f*(v[j]-v[j-1])
	}
	return opTime{f: pick(s.Forward), bi: pick(s.InputGrad), bw: pick(s.WeightGrad)}
}

// resolveOpTimes indexes t by g's ops, after checking that t was measured on g's
// ops (OpsHash) and times every op of it.
func resolveOpTimes(t *plan.OpTimes, g *dag.Graph) ([]*plan.OpSeries, error) {
	if h := plan.OpsHash(g); t.SHA256 != h {
		return nil, &OptionError{"op-times", fmt.Sprintf("measured on model %q (sha256 %.12s…), not on this one (%.12s…): measure it with graphpipe profile --model", t.Model, t.SHA256, h)}
	}
	out := make([]*plan.OpSeries, g.NumOps())
	for i := range out {
		s, ok := t.Ops[g.Op(i).Name]
		if !ok {
			return nil, &OptionError{"op-times", fmt.Sprintf("op %q is not timed", g.Op(i).Name)}
		}
		out[i] = &s
	}
	return out, nil
}
