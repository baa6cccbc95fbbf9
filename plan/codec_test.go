package plan

import (
	"math"
	"strings"
	"testing"

	"github.com/graphpipe/graphpipe/dag"
)

// TestPlanRefusals: edits that break a plan file are refused, each with an
// error naming what is at fault, and so are files that are not plans.
func TestPlanRefusals(t *testing.T) {
	g, data := caseStudy(t)
	good := string(data)
	for _, tc := range []struct{ old, new, want string }{
		{`"format": "graphpipe/plan@1"`, `"format": "graphpipe/plan@9"`, "format"},
		{`"micro_batches": `, `"micro_batches": 1`, "do not agree"},
		{`"devices": [`, `"devices": [99, `, "not one of"},
		{`"format"`, `"extra": 1, "format"`, "unknown field"},
		{`"0F"`, `"0X"`, "action"},
		{"\"sequential\": {\n      \"samples_per_s\": ", "\"sequential\": {\n      \"samples_per_s\": -", "search.sequential"},
		{`"format"`, `"backprop_fraction": 1.5, "format"`, "backprop_fraction"},
		{`"transfer_s"`, `"grad_transfer_s": -1, "transfer_s"`, "grad_transfer_s"},
	} {
		bad := strings.Replace(good, tc.old, tc.new, 1)
		if bad == good {
			t.Fatalf("edit %q did nothing", tc.old)
		}
		if _, err := DecodePlan([]byte(bad)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want %q", tc.want, err, tc.want)
		}
	}
	for _, tc := range []struct{ data, want string }{
		{"", "not a plan: the file is empty"},
		{" \n", "not a plan: the file is empty"},
		{string(dag.Write(g.Model())), "not a plan but a model file (graphpipe/model@1)"},
		{"{}", `format: required ("graphpipe/plan@1")`},
	} {
		if _, err := DecodePlan([]byte(tc.data)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%.20q: got %v, want %q", tc.data, err, tc.want)
		}
	}
}

// FuzzDecodePlan: a plan file (the seeds: the files of testdata/plans,
// plans search wrote) is refused or decodes to a plan that simulates;
// reading it, its action lists included, allocates no more than its size
// calls for.
func FuzzDecodePlan(f *testing.F) {
	f.Add([]byte(`{"format": "graphpipe/plan@1"}`))
	addFiles(f, "testdata/plans/*.json")
	_, study := caseStudy(f)
	for _, edit := range [][2]string{{`"forward_s": 0.000544608`, `"forward_s": 1e308`}, {`"launch_s": 0.000002`, `"launch_s": 1e308`}} {
		if seed := strings.Replace(string(study), edit[0], edit[1], 1); seed != string(study) {
			f.Add([]byte(seed)) // finite, and overflowing before the bounds
		} else {
			f.Fatalf("the stored plan has no %s to edit", edit[0])
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var q *Plan
		var err error
		if n := allocated(func() { q, err = DecodePlan(data) }); n > decodeBudget(len(data)) {
			t.Fatalf("%d bytes allocated for a plan of %d", n, len(data))
		}
		if err != nil {
			return
		}
		r, err := q.Simulate()
		if err != nil {
			t.Fatalf("a plan that decodes does not simulate: %v", err)
		}
		if math.IsInf(r.Iteration, 0) || math.IsNaN(r.Iteration) || math.IsNaN(r.Bubble) {
			t.Fatalf("a plan that decodes simulates to iteration %g, bubble %g", r.Iteration, r.Bubble)
		}
	})
}
