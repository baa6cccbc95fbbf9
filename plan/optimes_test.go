package plan

import (
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"
)

func TestDecodeOpTimesErrors(t *testing.T) {
	good := `{"format":"graphpipe/optimes@1","model":"m","model_sha256":"ab","device":"cpu","ops":{"x":{"micro_batch":[1,2],"forward_s":[1,2],"input_grad_s":[1,2],"weight_grad_s":[0,0]}}}`
	if _, err := DecodeOpTimes([]byte(good)); err != nil {
		t.Fatalf("a good file: %v", err)
	}
	for _, c := range []struct{ name, from, to, field string }{
		{"format", `optimes@1`, `optimes@2`, "format"},
		{"hash", `"ab"`, `""`, "model_sha256"},
		{"no ops", `"ops":{"x":{"micro_batch":[1,2],"forward_s":[1,2],"input_grad_s":[1,2],"weight_grad_s":[0,0]}}`, `"ops":{}`, "ops"},
		{"descending", `[1,2],"f`, `[2,1],"f`, "ops.x"},
		{"zero size", `[1,2],"f`, `[0,2],"f`, "ops.x"},
		{"short", `"forward_s":[1,2]`, `"forward_s":[1]`, "ops.x"},
		{"negative", `"weight_grad_s":[0,0]`, `"weight_grad_s":[0,-1]`, "ops.x"},
		{"unknown field", `"device":"cpu"`, `"device":"cpu","extra":1`, "file"},
		{"trailing", `}}}`, `}}}{}`, "file"},
		{"not json", good, `[`, "file"},
		{"inputs without a batch", `"device":"cpu"`, `"device":"cpu","input_s":{"x":1}`, "input_batch"},
		{"negative input", `"device":"cpu"`, `"device":"cpu","input_s":{"x":-1},"input_batch":4`, "input_s.x"},
	} {
		t.Run(c.name, func(t *testing.T) {
			bad := strings.Replace(good, c.from, c.to, 1)
			if bad == good {
				t.Fatal("the case changes nothing")
			}
			_, err := DecodeOpTimes([]byte(bad))
			var oe *OpTimesError
			if !errors.As(err, &oe) || oe.Field != c.field {
				t.Fatalf("got %v, want an error in %s", err, c.field)
			}
		})
	}
}

func FuzzDecodeOpTimes(f *testing.F) {
	f.Add([]byte(`{"format":"graphpipe/optimes@1","model":"m","model_sha256":"ab","device":"cpu","ops":{"x":{"micro_batch":[1,2],"forward_s":[1,2],"input_grad_s":[1,2],"weight_grad_s":[0,0]}}}`))
	f.Add([]byte(`{"format":"graphpipe/optimes@1","ops":{}}`))
	f.Add([]byte(`{"format":"graphpipe/optimes@1","model":"m","model_sha256":"ab","device":"cpu","ops":{"x":{"micro_batch":[1],"forward_s":[1],"input_grad_s":[1],"weight_grad_s":[0]}},"input_s":{"a":1e-4},"input_batch":8}`))
	f.Add([]byte(`{"format":"graphpipe/optimes@1","model":"m","model_sha256":"ab","device":"cpu","ops":{"x":{"micro_batch":[1],"forward_s":[1e308],"input_grad_s":[1e308],"weight_grad_s":[1e308]}}}`))
	f.Add([]byte(`{"format":"graphpipe/optimes@1","model":"m","model_sha256":"ab","device":"cpu","ops":{"x":{"micro_batch":[1],"forward_s":[1],"input_grad_s":[1],"weight_grad_s":[0]}},"input_s":{"a":1e308,"b":1e308},"input_batch":1}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		ot, err := DecodeOpTimes(data)
		if err != nil {
			return
		}
		sum := 0.0 // every time, as many times as a plan has actions
		for _, s := range ot.Ops {
			for _, v := range [][]float64{s.Forward, s.InputGrad, s.WeightGrad} {
				for _, x := range v {
					sum += x
				}
			}
		}
		for _, x := range ot.Inputs {
			sum += x
		}
		if sum *= 1 << 24; math.IsInf(sum, 0) || math.IsNaN(sum) {
			t.Fatalf("accepted times sum to %g", sum)
		}
		enc, err := ot.Encode()
		if err != nil {
			t.Fatalf("a decoded file does not encode: %v", err)
		}
		back, err := DecodeOpTimes(enc)
		if err != nil || !reflect.DeepEqual(back, ot) {
			t.Fatalf("round trip: %v\n%+v\n%+v", err, back, ot)
		}
	})
}

// TestInputSeconds: making inputs costs their measured seconds, in
// proportion to the batch; files without input times (all written before
// them) cost nothing.
func TestInputSeconds(t *testing.T) {
	ot := &OpTimes{Inputs: map[string]float64{"a": 1e-4, "b": 3e-4}, InputBatch: 8}
	for _, c := range []struct {
		names []string
		batch int64
		want  float64
	}{{[]string{"a"}, 8, 1e-4}, {[]string{"a", "b"}, 16, 8e-4}, {[]string{"b", "c"}, 4, 1.5e-4}, {nil, 8, 0}} {
		if got := ot.InputSeconds(c.names, c.batch); got < c.want*(1-1e-12) || got > c.want*(1+1e-12) {
			t.Errorf("%v at %d: %g s, want %g", c.names, c.batch, got, c.want)
		}
	}
	var none *OpTimes
	if none.InputSeconds([]string{"a"}, 8) != 0 || (&OpTimes{}).InputSeconds([]string{"a"}, 8) != 0 {
		t.Error("no input times, and yet a cost")
	}
}
