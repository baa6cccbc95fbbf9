package plan

import (
	"strings"
	"testing"
)

// TestDeviceMemoryAsNumber: a profile's memory may be written in any JSON
// number form that is a whole number of bytes; a fraction, a number past
// int64 and an unknown field are refused, in a profile and in a plan.
func TestDeviceMemoryAsNumber(t *testing.T) {
	base := `{"name": "g", "peak_flops": 1e13, "max_eff": 0.8, "half_work": 1e8, "mem_bw": 9e11, "intra_bw": 5e10, "inter_bw": 1e10, `
	for _, tc := range []struct {
		memory string
		want   int64
		err    string
	}{
		{`1e10`, 1e10, ""}, {`16e9`, 16e9, ""}, {`10000000000`, 1e10, ""}, {`1.0e3`, 1000, ""},
		{`1.5e9`, 1.5e9, ""},
		{`1.5`, 0, "not a whole number"}, {`1e30`, 0, "not a whole number"}, {`"8e9"`, 0, "not a number of bytes"}, {`[1]`, 0, "not a number"},
	} {
		d, err := ParseDevice([]byte(base + `"memory": ` + tc.memory + `}`))
		switch {
		case tc.err == "" && (err != nil || d.Memory != tc.want):
			t.Errorf("memory %s: %d, %v; want %d", tc.memory, d.Memory, err, tc.want)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("memory %s: %v, want an error saying %q", tc.memory, err, tc.err)
		}
	}
	if _, err := ParseDevice([]byte(base + `"memory": 1e10, "colour": "red"}`)); err == nil || !strings.Contains(err.Error(), `unknown field "colour"`) {
		t.Errorf("an unknown field: %v", err)
	}
	_, data := caseStudy(t)
	edited := strings.Replace(string(data), `"memory": 8000000000,`, `"memory": 8e9, "colour": "red",`, 1)
	if edited == string(data) {
		t.Fatal("the stored plan's device has no memory of 8000000000 to edit")
	}
	if _, err := DecodePlan([]byte(edited)); err == nil || !strings.Contains(err.Error(), `unknown field "colour"`) {
		t.Errorf("a plan whose device has an unknown field: %v", err)
	}
}
