package plan

import (
	"strings"
	"testing"

	"github.com/graphpipe/graphpipe/dag"
)

// TestPrecisionRates: a device's products run at its rate for each
// precision it has; one it lacks is an error naming both; the efficiency
// curve's half-work point grows with the rate.
func TestPrecisionRates(t *testing.T) {
	h100, v100 := Profiles["h100"], Profiles["v100"]
	for _, tc := range []struct {
		dev  Device
		prec string
		peak float64
		err  string
	}{
		{h100, "", 67e12, ""},
		{h100, "fp32", 67e12, ""},
		{h100, "tf32", 495e12, ""},
		{h100, "bf16", 989e12, ""},
		{Profiles["a100"], "bf16", 312e12, ""},
		{v100, "fp32", 15.7e12, ""},
		{v100, "bf16", 0, "device v100 has no bf16 rate (it has fp32)"},
		{v100, "tf32", 0, "device v100 has no tf32 rate (it has fp32)"},
		{h100, "fp8", 0, `unknown precision "fp8" (known: fp32, tf32, bf16)`},
	} {
		d, err := tc.dev.InPrecision(tc.prec)
		if tc.err != "" {
			if err == nil || err.Error() != tc.err {
				t.Errorf("%s in %q: %v, want %q", tc.dev.Name, tc.prec, err, tc.err)
			}
			continue
		}
		if err != nil || d.PeakFLOPs != tc.peak {
			t.Errorf("%s in %q: peak %g (%v), want %g", tc.dev.Name, tc.prec, d.PeakFLOPs, err, tc.peak)
		}
		if want := tc.dev.HalfWork * tc.peak / tc.dev.PeakFLOPs; d.HalfWork != want {
			t.Errorf("%s in %q: half work %g, want %g", tc.dev.Name, tc.prec, d.HalfWork, want)
		}
	}
	if got := strings.Join(h100.Has(), " "); got != "fp32 tf32 bf16" {
		t.Errorf("h100 has %s", got)
	}
}

// TestPrecisionBytes: what a precision stores an activation and a weight
// copy in, and a tensor's bytes (an int32 one keeps 4 an element).
func TestPrecisionBytes(t *testing.T) {
	f := &dag.Tensor{Shape: dag.Shape{3, 5}, DType: dag.Float32}
	i := &dag.Tensor{Shape: dag.Shape{7}, DType: dag.Int32}
	for _, tc := range []struct {
		prec              string
		act, copy, fb, ib int64
	}{{"fp32", 4, 0, 60, 28}, {"tf32", 4, 0, 60, 28}, {"bf16", 2, 2, 30, 28}} {
		if a, c, fb, ib := ActivationBytes(tc.prec), WeightCopyBytes(tc.prec), TensorBytes(f, tc.prec), TensorBytes(i, tc.prec); a != tc.act || c != tc.copy || fb != tc.fb || ib != tc.ib {
			t.Errorf("%s: activation %d, copy %d, tensors %d and %d; want %d, %d, %d, %d", tc.prec, a, c, fb, ib, tc.act, tc.copy, tc.fb, tc.ib)
		}
	}
}

// TestParseDeviceRates: a profile file's rates read, and bad ones refused
// naming the field.
func TestParseDeviceRates(t *testing.T) {
	base := `{"name":"x","peak_flops":1e12,"max_eff":0.8,"half_work":1e8,"mem_bw":1e11,"memory":1e9,"intra_bw":1e10,"inter_bw":1e9%s}`
	d, err := ParseDevice([]byte(strings.Replace(base, "%s", `,"rates":{"bf16":8e12}`, 1)))
	if err != nil {
		t.Fatal(err)
	}
	if p, ok := d.Peak("bf16"); !ok || p != 8e12 {
		t.Errorf("bf16 rate %g %v", p, ok)
	}
	if _, ok := d.Peak("tf32"); ok {
		t.Error("a tf32 rate the file does not give")
	}
	for rates, want := range map[string]string{
		`,"rates":{"bf16":-1}`:    "rates.bf16: must be a positive number",
		`,"rates":{"bf16":1e300}`: "rates.bf16: must be a positive number",
		`,"rates":{"fp8":1e12}`:   `unknown field "fp8"`,
	} {
		if _, err := ParseDevice([]byte(strings.Replace(base, "%s", rates, 1))); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", rates, err, want)
		}
	}
}
