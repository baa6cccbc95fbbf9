package search

import (
	"math"

	"github.com/graphpipe/graphpipe/plan"
)

// kernel is the time of one kernel call doing work FLOPs and moving bytes:
// the slower of compute at the efficiency its size reaches and memory traffic.
func kernel(d plan.Device, work, bytes float64) float64 {
	if work <= 0 && bytes <= 0 {
		return 0
	}
	t := bytes / d.MemBW
	if work > 0 {
		eff := d.MaxEff * work / (work + d.HalfWork)
		t = math.Max(t, work/(d.PeakFLOPs*eff))
	}
	return d.Launch + t
}

// transfer is the time to move bytes between two stages on devices d, over
// the link the run will use (edgeLink).
func transfer(d plan.Device, bytes float64, inter bool) float64 {
	return edgeLink(d, inter).time(bytes)
}

// allReduce is a ring all-reduce of bytes over k devices, one ring.
func allReduce(d plan.Device, bytes float64, k int, inter bool) float64 {
	return flatRing(d, k, inter).allReduce(bytes)
}

// ring is a stage's ring as the cost model prices it: k members, each
// step of a half a hop of lat and its bytes at bw. A ring in two levels
// (plan.RingLayout; runtime's ringlayout.go) is priced as the one ring
// whose half takes what its two levels' halves take: within each node
// L−1 steps of S/L bytes over the node's link, then across N−1 steps of
// S/(L·N) over each device's own link out, L+N−2 hops in all.
type ring struct {
	k       int
	lat, bw float64
}

// flatRing is one ring of k over d's links between nodes (inter) or
// within one.
func flatRing(d plan.Device, k int, inter bool) ring {
	lat, bw := ringLink(d, inter)
	return ring{k, lat, bw}
}

// twoLevel is the ring of nodes of local replicas each.
func twoLevel(d plan.Device, nodes, local int) ring {
	li, bi := ringLink(d, false)
	le, be := ringLink(d, true)
	k := local + nodes - 1
	hops := float64(k - 1)
	perByte := float64(local-1)/(float64(local)*bi) + float64(nodes-1)/(float64(local*nodes)*be) // a half's seconds a byte of the whole
	return ring{k, (float64(local-1)*li + float64(nodes-1)*le) / hops, hops / float64(k) / perByte}
}

// allReduce is the ring's all-reduce of bytes: both halves.
func (r ring) allReduce(bytes float64) float64 {
	if r.k <= 1 || bytes <= 0 {
		return 0
	}
	return 2*float64(r.k-1)*r.lat + 2*float64(r.k-1)/float64(r.k)*bytes/r.bw
}

// half is one half of the ring's all-reduce of bytes: the reduce-scatter,
// or the all-gather.
func (r ring) half(bytes float64) float64 {
	if r.k <= 1 || bytes <= 0 {
		return 0
	}
	return float64(r.k-1) * (r.lat + bytes/float64(r.k)/r.bw)
}
