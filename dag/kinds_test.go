package dag

import "testing"

// TestKindTable: every row is complete and consistent with the spec's
// rules: a format version of 1 or 2, inference and a cost, an arity, each
// attribute once, with a field in Attrs, of a format version this package
// knows, and a loss of a prediction and a target.
func TestKindTable(t *testing.T) {
	for k, s := range kinds {
		if s.since != 1 && s.since != 2 {
			t.Errorf("%s: since %d, want 1 or 2", k, s.since)
		}
		if s.infer == nil || s.cost == nil {
			t.Errorf("%s: no inference or no cost", k)
		}
		if s.minIn < 0 || s.maxIn >= 0 && s.maxIn < s.minIn {
			t.Errorf("%s: inputs %d to %d", k, s.minIn, s.maxIn)
		}
		if s.loss && (s.minIn != 2 || s.maxIn != 2) {
			t.Errorf("%s: a loss takes a prediction and a target", k)
		}
		seen := map[string]bool{}
		for _, a := range s.attrs {
			if seen[a.name] || a.since > 2 {
				t.Errorf("%s: attribute %s twice, or of format version %d", k, a.name, a.since)
			}
			seen[a.name] = true
			_ = new(Attrs).field(a) // panics for an attribute Attrs has no field for
		}
	}
}
