package plan

import "github.com/graphpipe/graphpipe/dag"

// IdealSamplesPerS is the ideal bound of devices of profile d computing in
// precision p: every device at its best efficiency (MaxEff) of its peak in
// p (Device.Peak) all the time, never idle, never waiting, nothing but the
// forward and backward FLOPs of each sample (flopsPerSample) to do. No plan
// on those devices is faster; how close a plan comes is what its bubble,
// its kernels below the best efficiency, its transfers and its all-reduces
// cost. 0 where d has no rate for p or a sample has no FLOPs.
func IdealSamplesPerS(d Device, p string, devices int, flopsPerSample float64) float64 {
	peak, ok := d.Peak(p)
	if !ok || flopsPerSample <= 0 {
		return 0
	}
	return float64(devices) * peak * d.MaxEff / flopsPerSample
}

// FLOPsPerSample is g's forward and backward FLOPs for one sample: the work
// the ideal bound divides the devices' rate by.
func FLOPsPerSample(g *dag.Graph) float64 {
	t := g.Total()
	return t.FwdFLOPs + t.BwdFLOPs()
}

// Ideal is the ideal bound of p's devices (IdealSamplesPerS) for g, p's
// model, in p's precision: on a cluster of several kinds, each kind's
// devices at its own rate, summed.
func (p *Plan) Ideal(g *dag.Graph) float64 {
	flops := FLOPsPerSample(g)
	if p.Cluster == nil {
		return IdealSamplesPerS(p.Device, p.PrecisionName(), p.Devices, flops)
	}
	var sum float64
	for _, k := range p.Cluster.Kinds {
		sum += IdealSamplesPerS(k.Device, p.PrecisionName(), k.Devices, flops)
	}
	return sum
}
