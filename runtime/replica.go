package runtime

import (
	"github.com/graphpipe/graphpipe/plan"
	"github.com/graphpipe/graphpipe/runtime/wire"
)

// A stage on k devices runs as k replicas; replica r of a stage takes rows
// [r·b/k, (r+1)·b/k) of every micro-batch of b samples.

// maxReplicas bounds the replicas of one stage; wire keys pack (edge, replica).
const maxReplicas = 4096

// ringEdge is the edge key of a stage's gradient all-reduce (allreduce.go),
// above every stage edge's.
const ringEdge = 1 << 30

// rowRange is replica r of k's rows of a micro-batch of b.
func rowRange(b, k, r int) (lo, hi int) { return r * b / k, (r + 1) * b / k }

// replicas is a plan's worker layout: worker ids are assigned stage by stage.
type replicas struct {
	offset []int // per stage, the id of its replica 0
	count  []int // per stage, its replicas
	total  int
}

func layout(plan *plan.Plan) replicas {
	var l replicas
	for _, s := range plan.Stages {
		l.offset = append(l.offset, l.total)
		l.count = append(l.count, len(s.Devices))
		l.total += len(s.Devices)
	}
	return l
}

// id is the worker id of replica r of stage s.
func (l replicas) id(s, r int) int32 { return int32(l.offset[s] + r) }

// othersThan is the worker ids of every stage but st, in order.
func (l replicas) othersThan(st int) []int32 {
	var out []int32
	for s := range l.offset {
		if s == st {
			continue
		}
		for r := 0; r < l.count[s]; r++ {
			out = append(out, l.id(s, r))
		}
	}
	return out
}

// where is the (stage, replica) of worker id.
func (l replicas) where(id int) (int, int) {
	for s := range l.offset {
		if id < l.offset[s]+l.count[s] {
			return s, id - l.offset[s]
		}
	}
	return -1, -1
}

// edgeKey packs an edge and the sending replica into a wire edge field.
func edgeKey(edge, replica int) int32 { return int32(edge*maxReplicas + replica) }

// msgKey names a message on the wire: iteration, micro-batch, edge field
// (edgeKey, or a control or ring edge) and direction.
func msgKey(iter int64, mb, edge int32, dir uint8) wire.Key {
	return wire.Key{Iter: iter, MB: mb, Edge: edge, Dir: dir}
}
