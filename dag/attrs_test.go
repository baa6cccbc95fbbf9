package dag

import (
	"errors"
	"os"
	"strings"
	"testing"
)

// TestWindowAttrsRefused: a model file whose convolution or pool has a
// stride, dilation or kernel of 0 is refused naming the op and the
// attribute, never divided by.
func TestWindowAttrsRefused(t *testing.T) {
	data, err := os.ReadFile("testdata/valid/all-ops-v2.json")
	if err != nil {
		t.Fatal(err)
	}
	conv := `"attrs": {"out": 4, "kernel": [3, 3], "padding": [1, 1, 1, 1]}`
	avg := `"attrs": {"kernel": [3, 3], "stride": [1, 1], "padding": [1, 1, 1, 1], "ceil_mode": true}`
	cases := []struct{ name, old, new, op, field string }{
		{"conv stride 0", conv, `"attrs": {"out": 4, "kernel": [3, 3], "stride": [0, 1], "padding": [1, 1, 1, 1]}`, "conv", "attrs.stride"},
		{"conv dilation 0", conv, `"attrs": {"out": 4, "kernel": [3, 3], "dilation": [1, 0], "padding": [1, 1, 1, 1]}`, "conv", "attrs.dilation"},
		{"conv kernel 0", conv, `"attrs": {"out": 4, "kernel": [0, 3], "padding": [0, 0, 0, 0]}`, "conv", "attrs.kernel"},
		{"avg pool stride 0", avg, `"attrs": {"kernel": [3, 3], "stride": [0, 0], "padding": [1, 1, 1, 1], "ceil_mode": true}`, "ap", "attrs.stride"},
		{"max pool kernel 0", `"attrs": {"kernel": [2, 2]}`, `"attrs": {"kernel": [2, 0], "stride": [2, 2]}`, "mp", "attrs.kernel"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			doc := edit(t, string(data), tc.old, tc.new)
			_, err := Load([]byte(doc))
			var es Errors
			if !errors.As(err, &es) || es[0].Name != tc.op || es[0].Field != tc.field {
				t.Fatalf("got %v, want op %q field %s", err, tc.op, tc.field)
			}
			m, perr := Parse([]byte(doc))
			if perr != nil {
				t.Fatal(perr)
			}
			for i := range m.Ops {
				if m.Ops[i].Name != tc.op {
					continue
				}
				err := CheckAttrs(&m.Ops[i])
				if !errors.As(err, &es) || es[0].Field != tc.field || !strings.Contains(es[0].Msg, "positive") {
					t.Fatalf("CheckAttrs: %v, want %s must be positive", err, tc.field)
				}
			}
		})
	}
}

// TestCheckAttrsValid: the attributes of every op of a valid model pass.
func TestCheckAttrsValid(t *testing.T) {
	data, err := os.ReadFile("testdata/valid/all-ops-v2.json")
	if err != nil {
		t.Fatal(err)
	}
	m, err := Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	for i := range m.Ops {
		if err := CheckAttrs(&m.Ops[i]); err != nil {
			t.Errorf("%s: %v", m.Ops[i].Name, err)
		}
	}
	if err := CheckAttrs(&Op{Name: "x", Kind: "nope"}); err == nil {
		t.Error("an unknown kind passed")
	}
}
