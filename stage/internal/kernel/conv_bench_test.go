package kernel

import (
	"math/rand"
	"testing"

	"github.com/graphpipe/graphpipe/dag"
	"github.com/graphpipe/graphpipe/tensor"
)

// BenchmarkConv2D times a ResNet-50 3×3 convolution (64 → 64 channels on
// 56×56, batch 8) forward and backward, in GFLOP/s; BenchmarkConvSgemm
// times the GEMMs it lowers to (per sample [64, 576]·[576, 3136]) as the
// baseline of the same run.
func BenchmarkConv2D(b *testing.B) {
	a := dag.DefaultAttrs(dag.Conv2D)
	a.Out, a.Kernel, a.Padding = 64, dag.Shape{3, 3}, dag.Shape{1, 1, 1, 1}
	k := &conv2d[float32]{window: newWindow(dag.Shape{64, 56, 56}, dag.Shape{64, 56, 56}, a, a.Dilation), groups: 1, out: 64, bias: true}
	r := rand.New(rand.NewSource(1))
	x := NewValue[float32](8, 64, 56, 56)
	for i := range x.Data {
		x.Data[i] = float32(r.NormFloat64())
	}
	p := []*Value[float32]{NewValue[float32](64, 64, 3, 3), NewValue[float32](64)}
	for i := range p[0].Data {
		p[0].Data[i] = float32(r.NormFloat64()) * 0.05
	}
	flops := 2.0 * 8 * 64 * 56 * 56 * 64 * 9 // one pass
	b.Run("forward", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			k.Forward([]*Value[float32]{x}, p)
		}
		b.ReportMetric(flops*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
	})
	y, _, _ := k.Forward([]*Value[float32]{x}, p)
	gx, gp := []*Value[float32]{NewValue[float32](x.Shape...)}, []*Value[float32]{NewValue[float32](64, 64, 3, 3), NewValue[float32](64)}
	b.Run("backward", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			k.Backward(y, []*Value[float32]{x}, p, y, nil, gx, gp)
		}
		b.ReportMetric(2*flops*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
	})
}

func BenchmarkConvSgemm(b *testing.B) {
	m, n, kk := 64, 56*56, 64*9
	a, bb, c := make([]float32, m*kk), make([]float32, kk*n), make([]float32, m*n)
	for i := 0; i < b.N; i++ {
		for s := 0; s < 8; s++ {
			tensor.Sgemm(false, false, m, n, kk, 1, a, kk, bb, n, 0, c, n)
		}
	}
	b.ReportMetric(2*float64(m*n*kk)*8*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
}
