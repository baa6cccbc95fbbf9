package kernel

import (
	"math"
	"math/rand"
	"strings"
	"testing"
)

// model@2's convolutions, normalisation and pools.
var convCases = []opCase{
	{"conv2d", `{"name":"x","shape":[2,5,4],"dtype":"float32"}`, `"op":"conv2d","inputs":["x"],"attrs":{"out":3,"kernel":[3,2]}`},
	{"conv2d-stride-pad", `{"name":"x","shape":[2,5,6],"dtype":"float32"}`, `"op":"conv2d","inputs":["x"],"attrs":{"out":2,"kernel":[3,3],"stride":[2,2],"padding":[1,0,2,1]}`},
	{"conv2d-dilated", `{"name":"x","shape":[1,6,6],"dtype":"float32"}`, `"op":"conv2d","inputs":["x"],"attrs":{"out":2,"kernel":[2,2],"dilation":[2,3],"bias":false}`},
	{"conv2d-groups", `{"name":"x","shape":[4,4,4],"dtype":"float32"}`, `"op":"conv2d","inputs":["x"],"attrs":{"out":6,"kernel":[2,2],"groups":2}`},
	{"conv2d-depthwise", `{"name":"x","shape":[3,4,4],"dtype":"float32"}`, `"op":"conv2d","inputs":["x"],"attrs":{"out":3,"kernel":[3,3],"padding":[1,1,1,1],"groups":3}`},
	{"conv2d-1x1", `{"name":"x","shape":[3,2,3],"dtype":"float32"}`, `"op":"conv2d","inputs":["x"],"attrs":{"out":4,"kernel":[1,1]}`},
	{"batch_norm-c", `{"name":"x","shape":[4],"dtype":"float32"}`, `"op":"batch_norm","inputs":["x"]`},
	{"batch_norm-cl", `{"name":"x","shape":[3,5],"dtype":"float32"}`, `"op":"batch_norm","inputs":["x"],"attrs":{"eps":0.001,"momentum":0.3}`},
	{"batch_norm-chw", `{"name":"x","shape":[2,3,3],"dtype":"float32"}`, `"op":"batch_norm","inputs":["x"]`},
	{"max_pool2d", `{"name":"x","shape":[2,5,5],"dtype":"float32"}`, `"op":"max_pool2d","inputs":["x"],"attrs":{"kernel":[2,2]}`},
	{"max_pool2d-ceil-pad", `{"name":"x","shape":[1,5,6],"dtype":"float32"}`, `"op":"max_pool2d","inputs":["x"],"attrs":{"kernel":[3,3],"stride":[2,2],"padding":[1,1,1,1],"ceil_mode":true}`},
	{"max_pool2d-dilated", `{"name":"x","shape":[1,6,6],"dtype":"float32"}`, `"op":"max_pool2d","inputs":["x"],"attrs":{"kernel":[2,2],"stride":[1,1],"dilation":[2,2]}`},
	{"avg_pool2d", `{"name":"x","shape":[2,4,4],"dtype":"float32"}`, `"op":"avg_pool2d","inputs":["x"],"attrs":{"kernel":[2,2]}`},
	{"avg_pool2d-pad-include", `{"name":"x","shape":[1,5,5],"dtype":"float32"}`, `"op":"avg_pool2d","inputs":["x"],"attrs":{"kernel":[3,3],"stride":[2,2],"padding":[1,1,1,1],"ceil_mode":true}`},
	{"avg_pool2d-pad-exclude", `{"name":"x","shape":[1,5,5],"dtype":"float32"}`, `"op":"avg_pool2d","inputs":["x"],"attrs":{"kernel":[3,3],"stride":[1,1],"padding":[1,0,1,2],"count_include_pad":false}`},
	{"global_avg_pool", `{"name":"x","shape":[3,2,4],"dtype":"float32"}`, `"op":"global_avg_pool","inputs":["x"]`},
	{"global_avg_pool-1d", `{"name":"x","shape":[3,5],"dtype":"float32"}`, `"op":"global_avg_pool","inputs":["x"]`},
}

func init() { opCases = append(opCases, convCases...) }

// TestBatchNormRunningStats: three micro-batches' forwards move the running
// statistics as PyTorch's update does, computed here in float64 from the
// batches themselves; a micro-batch of one value per channel is refused.
func TestBatchNormRunningStats(t *testing.T) {
	k := &batchNorm[float64]{op: "bn", eps: 1e-5, momentum: 0.1}
	c := 3
	p := []*Value[float64]{{Shape: []int{c}, Data: []float64{1, 1, 1}}, {Shape: []int{c}, Data: []float64{0, 0, 0}},
		{Shape: []int{c}, Data: []float64{0, 0, 0}}, {Shape: []int{c}, Data: []float64{1, 1, 1}}}
	wantMean, wantVar := []float64{0, 0, 0}, []float64{1, 1, 1}
	r := rand.New(rand.NewSource(4))
	for mb := 0; mb < 3; mb++ {
		x := NewValue[float64](2, c, 5) // 2 samples, 5 values per channel each
		for i := range x.Data {
			x.Data[i] = r.NormFloat64()*float64(mb+1) + float64(mb)
		}
		if _, _, err := k.Forward([]*Value[float64]{x}, p); err != nil {
			t.Fatal(err)
		}
		for ch := 0; ch < c; ch++ {
			var vals []float64
			for b := 0; b < 2; b++ {
				vals = append(vals, x.Data[(b*c+ch)*5:(b*c+ch+1)*5]...)
			}
			mu, ss := 0.0, 0.0
			for _, v := range vals {
				mu += v
			}
			mu /= float64(len(vals))
			for _, v := range vals {
				ss += (v - mu) * (v - mu)
			}
			wantMean[ch] = 0.9*wantMean[ch] + 0.1*mu
			wantVar[ch] = 0.9*wantVar[ch] + 0.1*ss/float64(len(vals)-1)
		}
	}
	for ch := 0; ch < c; ch++ {
		if math.Abs(p[2].Data[ch]-wantMean[ch]) > 1e-12 || math.Abs(p[3].Data[ch]-wantVar[ch]) > 1e-12 {
			t.Fatalf("channel %d: running mean %v, var %v; want %v, %v", ch, p[2].Data[ch], p[3].Data[ch], wantMean[ch], wantVar[ch])
		}
	}
	one := NewValue[float64](1, c)
	if _, _, err := k.Forward([]*Value[float64]{one}, p); err == nil || !strings.Contains(err.Error(), "more than one value per channel") {
		t.Fatalf("a single value per channel: %v", err)
	}
}
