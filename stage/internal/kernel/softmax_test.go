package kernel

import (
	"fmt"
	"math"
	"math/rand"
	"testing"
	"time"

	"github.com/graphpipe/graphpipe/tensor/cuda"
	"github.com/graphpipe/graphpipe/tensor/cuda/cudatest"
)

// timeSoftmaxKernels times softmaxLanes and softmaxRows alone on rows ×
// cols scores on d, forward and backward (in gy's place, as attention
// runs it), and fails where their results differ.
func timeSoftmaxKernels(t *testing.T, d *cuda.Device, rows, cols, reps int) {
	n := rows * cols
	r := rand.New(rand.NewSource(1))
	x, gy, gx0 := make([]float32, n), make([]float32, n), make([]float32, n)
	for i := range x {
		x[i], gy[i] = float32(8*r.NormFloat64()), float32(r.NormFloat64())
	}
	const scale = 0.125
	yw, _, gw := runSoftmax(t, d, softmaxRows, x, gy, gx0, rows, cols, scale, 0)
	yg, _, gg := runSoftmax(t, d, softmaxLanes, x, gy, gx0, rows, cols, scale, 0)
	for i := range yw {
		if math.Abs(float64(yg[i]-yw[i])) > 2e-6*math.Abs(float64(yw[i])) || math.Abs(float64(gg[i]-gw[i])) > 1e-5*(1+math.Abs(float64(gw[i]))) {
			t.Fatalf("element %d: lanes y %g, gx %g; rows y %g, gx %g", i, yg[i], gg[i], yw[i], gw[i])
		}
	}
	for _, v := range []struct {
		name string
		sm   softmaxKernels
	}{{"rows (before)", softmaxRows}, {"lanes", softmaxLanes}} {
		var fwd, bwd time.Duration
		err := OnDevice(d, nil, func(s *Scope) {
			xb, gb := s.Up(x), s.Up(gy)
			s.Fail(d.Sync())
			t0 := time.Now()
			for range reps {
				v.sm.fwd(s, xb, xb, rows, cols, scale, 0)
			}
			s.Fail(d.Sync())
			t1 := time.Now()
			for range reps {
				v.sm.bwd(s, xb, gb, gb, rows, cols, scale, 0)
			}
			s.Fail(d.Sync())
			fwd, bwd = t1.Sub(t0), time.Since(t1)
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("softmax of %d rows of %d in %s: forward %.3f ms, backward %.3f ms (mean of %d)",
			rows, cols, v.name, 1e3*fwd.Seconds()/float64(reps), 1e3*bwd.Seconds()/float64(reps), reps)
	}
}

// runSoftmax runs sm's forward on x [rows, cols] and its backward on that
// y and gy, into gx0 (acc 1) and in gy's place (acc 0), on d; it returns y,
// the accumulated gradient and the written one.
func runSoftmax(t *testing.T, d *cuda.Device, sm softmaxKernels, x, gy, gx0 []float32, rows, cols int, scale float32, causal int32) (y, acc, inPlace []float32) {
	t.Helper()
	y, acc, inPlace = make([]float32, len(x)), make([]float32, len(x)), make([]float32, len(x))
	err := OnDevice(d, nil, func(s *Scope) {
		xb, yb, gb, ab := s.Up(x), s.Scratch(len(x)), s.Up(gy), s.Up(gx0)
		sm.fwd(s, xb, yb, rows, cols, scale, causal)
		sm.bwd(s, yb, gb, ab, rows, cols, scale, 1)
		s.Down(y, yb)
		s.Down(acc, ab)
		sm.bwd(s, yb, gb, gb, rows, cols, scale, 0)
		s.Down(inPlace, gb)
	})
	if err != nil {
		t.Fatal(err)
	}
	return y, acc, inPlace
}

// TestSoftmaxLanesEmulated: attention's softmax in lanes (the kernels a
// step runs) computes what the simple thread per row computes, forward
// (within 2e-6 relative: only the order of the sum differs; exactly 0
// where causal hides a column) and backward (accumulating and in place),
// at rows shorter than the lanes, one lane's width, between and well past.
func TestSoftmaxLanesEmulated(t *testing.T) {
	d := cudatest.Emulator(t)
	r := rand.New(rand.NewSource(7))
	for _, c := range []struct{ rows, cols int }{{3, 1}, {10, 5}, {64, 31}, {64, 32}, {99, 33}, {140, 70}, {512, 256}} {
		for _, causal := range []int32{0, 1} {
			name := fmt.Sprintf("%dx%d causal %d", c.rows, c.cols, causal)
			n := c.rows * c.cols
			x, gy, gx0 := make([]float32, n), make([]float32, n), make([]float32, n)
			for i := range x {
				x[i], gy[i], gx0[i] = float32(8*r.NormFloat64()), float32(r.NormFloat64()), 0.25
			}
			const scale = 0.125
			yw, aw, pw := runSoftmax(t, d, softmaxRows, x, gy, gx0, c.rows, c.cols, scale, causal)
			yg, ag, pg := runSoftmax(t, d, softmaxLanes, x, gy, gx0, c.rows, c.cols, scale, causal)
			for i := range yw {
				if yw[i] == 0 && yg[i] != 0 || math.Abs(float64(yg[i]-yw[i])) > 2e-6*math.Abs(float64(yw[i])) {
					t.Fatalf("%s: y[%d] = %g in lanes, %g a row per thread", name, i, yg[i], yw[i])
				}
			}
			for i := range aw {
				if math.Abs(float64(ag[i]-aw[i])) > 1e-5*(1+math.Abs(float64(aw[i]))) {
					t.Fatalf("%s: accumulated gx[%d] = %g in lanes, %g a row per thread", name, i, ag[i], aw[i])
				}
				if math.Abs(float64(pg[i]-pw[i])) > 1e-5*(1+math.Abs(float64(pw[i]))) {
					t.Fatalf("%s: gx[%d] in gy's place = %g in lanes, %g a row per thread", name, i, pg[i], pw[i])
				}
			}
		}
	}
}

// TestAttentionLaunchesDry: one layer of the paper's MMT (16 samples of 256
// tokens, width 1024, 16 heads), counted on a dry device: the softmax in
// lanes costs 2 launches more each way than a thread per row (the fold and
// the element-wise pass), 6 forward and 9 backward in all, and the same 4
// and 8 cuBLAS calls.
func TestAttentionLaunchesDry(t *testing.T) {
	dev, err := cuda.OpenDry()
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	fwd, bwd := attentionCounts(t, dev, 16, 256, 1024, 16, false)
	t.Logf("MMT attention, a micro-batch of 16: forward %d launches, %d GEMMs; backward %d launches, %d GEMMs",
		fwd.Launches, fwd.GEMMs, bwd.Launches, bwd.GEMMs)
	if fwd.Launches != 6 || bwd.Launches != 9 || fwd.GEMMs != 4 || bwd.GEMMs != 8 {
		t.Errorf("forward %d launches and %d GEMMs, backward %d and %d: want 6 and 4, 9 and 8",
			fwd.Launches, fwd.GEMMs, bwd.Launches, bwd.GEMMs)
	}
}

// TestSoftmaxTimesOnGPU times attention's softmax kernels alone on the
// paper's MMT layer's 65536 rows of 256 (16 samples of 16 heads of 256
// queries), in lanes (what a step runs) and a thread per row (before),
// and fails where their results differ. bench/gpu/run.sh runs it with the
// other OnGPU tests.
func TestSoftmaxTimesOnGPU(t *testing.T) { timeSoftmaxKernels(t, cudatest.GPU(t), 16*16*256, 256, 20) }

// TestSoftmaxTimesEmulated runs TestSoftmaxTimesOnGPU's code on the
// emulator at a small shape.
func TestSoftmaxTimesEmulated(t *testing.T) {
	timeSoftmaxKernels(t, cudatest.Emulator(t), 2*2*40, 40, 1)
}
