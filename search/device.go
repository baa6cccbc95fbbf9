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

// allReduce is a ring all-reduce of bytes over k devices.
func allReduce(d plan.Device, bytes float64, k int, inter bool) float64 {
	if k <= 1 || bytes <= 0 {
		return 0
	}
	lat, bw := ringLink(d, inter)
	return 2*float64(k-1)*lat + 2*float64(k-1)/float64(k)*bytes/bw
}
