package supervise

import (
	"errors"
	"strings"
	"testing"
)

// TestMatchingRefusesAnotherDevice: a pool takes for a plan's slots only
// agents of the plan's device (plan.SameDevice: a measured CPU profile is
// a CPU, a measured H100's long name an h100) with the memory its stages
// need; enough agents of another device, or too small, are refused in one
// line naming the plan's device and the agents'.
func TestMatchingRefusesAnotherDevice(t *testing.T) {
	slots := func(profile string, memory ...int64) []Slot {
		var out []Slot
		for i, m := range memory {
			out = append(out, Slot{Worker: i, Profile: profile, Memory: m})
		}
		return out
	}
	agents := func(profile string, memory int64, n int) []Advert {
		var out []Advert
		for i := 0; i < n; i++ {
			out = append(out, Advert{Agent: string(rune('a' + i)), Host: "h", Profile: profile, Memory: memory})
		}
		return out
	}
	for _, tc := range []struct {
		name   string
		slots  []Slot
		agents []Advert
		match  int
		refuse []string // what the refusal names; none: no refusal
	}{
		{"cpu plan, cpu agents", slots("cpu", 1e6, 1e6), agents("cpu", 24e9, 3), 3, nil},
		{"measured cpu plan, cpu agents", slots("cpu (measured)", 1e6), agents("cpu", 24e9, 1), 1, nil},
		{"h100 plan, measured h100 agents", slots("h100", 40e9, 40e9), agents("NVIDIA H100 80GB HBM3 sm_90 (measured)", 80e9, 2), 2, nil},
		{"agents that do not say their memory", slots("h100", 40e9), agents("h100", 0, 1), 1, nil},
		{"h100 plan, cpu agents", slots("h100", 40e9, 40e9, 40e9), agents("cpu", 24e9, 3), 0, []string{"h100 devices", "3 × cpu (24 GB)", "--device-profile h100"}},
		{"h100 plan, a100 agents", slots("h100", 1e9), agents("a100", 80e9, 2), 0, []string{"h100 devices", "2 × a100 (80 GB)"}},
		{"too little memory", slots("h100", 1e9, 60e9), agents("h100", 40e9, 2), 0, []string{"up to 60 GB a worker", "2 × h100 (40 GB)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := matching("p", tc.slots, tc.agents)
			if len(got) != tc.match {
				t.Errorf("%d agents match, want %d", len(got), tc.match)
			}
			var de *DeviceError
			switch {
			case tc.refuse == nil && err != nil:
				t.Errorf("refused: %v", err)
			case tc.refuse != nil && !errors.As(err, &de):
				t.Errorf("not refused with a DeviceError: %v", err)
			case tc.refuse != nil:
				msg := err.Error()
				if strings.Contains(msg, "\n") || !strings.HasPrefix(msg, "pool p: ") {
					t.Errorf("not one line about pool p: %q", msg)
				}
				for _, w := range tc.refuse {
					if !strings.Contains(msg, w) {
						t.Errorf("%q does not say %q", msg, w)
					}
				}
				if !Final(err) {
					t.Error("a restart would meet the same agents: the refusal must be final")
				}
			}
		})
	}
}
