package search

import (
	"cmp"
	"errors"
	"testing"

	"github.com/graphpipe/graphpipe/microbatch"
	"github.com/graphpipe/graphpipe/plan"
)

// TestOptionsScheduleKind: withDefaults looks the schedule up once, and the
// search decides by its description: every known name gives KindOf's, no
// name 1f1b's; and the schedule's errors read as they always have, those
// recomputation fits listed from the descriptions.
func TestOptionsScheduleKind(t *testing.T) {
	t.Parallel()
	for _, name := range append([]string{""}, microbatch.Names...) {
		o, err := Options{Device: plan.Profiles["cpu"], Devices: 2, Schedule: name}.withDefaults(8)
		want, _ := microbatch.KindOf(cmp.Or(name, "1f1b"))
		if err != nil || o.sched != want || o.Schedule != want.Name {
			t.Errorf("schedule %q: %+v (%q), %v; want %+v", name, o.sched, o.Schedule, err, want)
		}
		if o.mayRecompute() == want.Split {
			t.Errorf("schedule %q: may recompute %v, splitting %v", name, o.mayRecompute(), want.Split)
		}
	}
	for _, tc := range []struct {
		o          Options
		flag, want string
	}{
		{Options{Schedule: "zb-h2"}, "schedule", `--schedule: unknown schedule "zb-h2" (known: 1f1b, 1f1b-depth, zb, gpipe, 2bw)`},
		{Options{Schedule: "zb", Recompute: "all"}, "recompute",
			"--recompute: schedule zb defers weight gradients past the backward, which recomputation does not fit: use 1f1b, 1f1b-depth, gpipe or 2bw"},
	} {
		tc.o.Device, tc.o.Devices = plan.Profiles["cpu"], 2
		_, err := tc.o.withDefaults(8)
		var oe *OptionError
		if !errors.As(err, &oe) || oe.Flag != tc.flag || err.Error() != tc.want {
			t.Errorf("%+v: %v, want %q", tc.o, err, tc.want)
		}
	}
}
