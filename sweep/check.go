package sweep

import (
	"fmt"
	"math"
	"slices"
)

// Check says what is wrong with s as a schedule of p, nil when nothing is:
// one slot per job, on one of its choices (devices and duration), on a
// block of devices a job of that size may take, after the jobs it waits
// for, its ready time and its devices' free times; no two jobs on one
// device at once; the makespan the last end.
func (s *Schedule) Check(p Problem) error {
	if len(s.Slots) != len(p.Jobs) {
		return fmt.Errorf("%d slots for %d jobs", len(s.Slots), len(p.Jobs))
	}
	end := 0.0
	for j, sl := range s.Slots {
		if err := p.checkSlot(j, sl, s.Slots); err != nil {
			return err
		}
		end = max(end, sl.End)
	}
	for i, a := range s.Slots {
		for _, b := range s.Slots[i+1:] {
			if a.overlaps(b) {
				return fmt.Errorf("jobs %d and %d share a device from %g s", a.Job, b.Job, max(a.Start, b.Start))
			}
		}
	}
	if math.Abs(end-s.Makespan) > 1e-9*(1+end) {
		return fmt.Errorf("makespan %g s, but the last job ends at %g s", s.Makespan, end)
	}
	return nil
}

// checkSlot checks job j's slot against its job and the slots it waits for.
func (p *Problem) checkSlot(j int, sl Slot, slots []Slot) error {
	job := p.Jobs[j]
	i := slices.IndexFunc(job.Choices, func(c Choice) bool { return c.Devices == sl.Devices })
	switch {
	case sl.Job != j:
		return fmt.Errorf("slot %d holds job %d", j, sl.Job)
	case i < 0:
		return fmt.Errorf("job %q on %d devices: no choice of its", job.Name, sl.Devices)
	case math.Abs(sl.End-sl.Start-job.Choices[i].Seconds) > 1e-9*(1+sl.End):
		return fmt.Errorf("job %q on %d devices takes %g s, not its %g s", job.Name, sl.Devices, sl.End-sl.Start, job.Choices[i].Seconds)
	case !slices.Contains(p.blocks(sl.Devices), sl.First):
		return fmt.Errorf("job %q on devices %d..%d: no block a job of %d devices may take", job.Name, sl.First, sl.First+sl.Devices-1, sl.Devices)
	case before(sl.Start, p.ready(j)):
		return fmt.Errorf("job %q starts at %g s, before it is ready at %g s", job.Name, sl.Start, p.ready(j))
	}
	for _, a := range job.After {
		if before(sl.Start, slots[a].End) {
			return fmt.Errorf("job %q starts at %g s, before job %q it waits for ends at %g s", job.Name, sl.Start, p.Jobs[a].Name, slots[a].End)
		}
	}
	for d := sl.First; d < sl.First+sl.Devices; d++ {
		if before(sl.Start, p.free(d)) {
			return fmt.Errorf("job %q starts at %g s on device %d, busy until %g s", job.Name, sl.Start, d, p.free(d))
		}
	}
	return nil
}

// Peak is the most devices the schedule's jobs hold at any moment.
func (s *Schedule) Peak() int {
	peak := 0
	for _, a := range s.Slots {
		n := 0 // the jobs running as a starts
		for _, b := range s.Slots {
			if !before(a.Start, b.Start) && before(a.Start, b.End) {
				n += b.Devices
			}
		}
		peak = max(peak, n)
	}
	return peak
}
