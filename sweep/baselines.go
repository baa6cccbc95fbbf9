package sweep

// OneAtATime is the sweep run one job after another, each on its fastest
// choice (every device, or fewer where the planner found more no faster),
// in the file's order as far as the jobs' waits allow: the practice of
// giving each job the whole cluster in turn.
func OneAtATime(p Problem) *Schedule {
	order, _ := p.topo()
	s := &Schedule{Slots: make([]Slot, len(p.Jobs))}
	t := 0.0
	for d := 0; d < p.Devices; d++ {
		t = max(t, p.free(d))
	}
	for _, j := range order {
		c := p.Jobs[j].Choices[fastest(p.Jobs[j])]
		t = max(t, p.ready(j))
		s.Slots[j] = Slot{Job: j, Devices: c.Devices, First: p.blocks(c.Devices)[0], Start: t, End: t + c.Seconds}
		t += c.Seconds
	}
	s.Makespan = t
	return s
}

// fastest is the index of job's shortest choice (the fewest devices on a tie).
func fastest(job Job) int {
	f := 0
	for c, ch := range job.Choices {
		if ch.Seconds < job.Choices[f].Seconds {
			f = c
		}
	}
	return f
}

// EqualSplit is the sweep on equal shares of the cluster: each job on the
// most devices of its choices within a share (the devices over the jobs,
// at least one; a job whose every choice is larger takes its smallest),
// started in the file's order as shares free up: the practice of cutting
// the cluster evenly among the jobs.
func EqualSplit(p Problem) *Schedule {
	share := max(1, p.Devices/len(p.Jobs))
	alloc := make([]int, len(p.Jobs))
	for j, job := range p.Jobs {
		for c, ch := range job.Choices {
			if ch.Devices <= share {
				alloc[j] = c
			}
		}
	}
	file := make([]float64, len(p.Jobs))
	for j := range file {
		file[j] = float64(len(p.Jobs) - j)
	}
	return p.place(p.order(file), alloc)
}
