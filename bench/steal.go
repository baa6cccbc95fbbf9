package bench

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// cpuTimes is the host's CPU time so far in clock ticks, all of it and
// what the hypervisor stole (/proc/stat's cpu line: the time a virtual
// CPU was ready to run while the host ran something else); ok is false
// where the file is not there or says no such thing.
func cpuTimes() (total, steal uint64, ok bool) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0, false
	}
	line, _, _ := strings.Cut(string(b), "\n")
	return parseCPULine(line)
}

// parseCPULine reads the aggregate "cpu" line of /proc/stat: user nice
// system idle iowait irq softirq steal ..., in ticks.
func parseCPULine(line string) (total, steal uint64, ok bool) {
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return 0, 0, false
	}
	for i, s := range f[1:] {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return 0, 0, false
		}
		if i < 8 { // guest time is counted in user time already
			total += v
		}
		if i == 7 {
			steal = v
		}
	}
	return total, steal, true
}

// stealMeter says what share of the host's CPU time the hypervisor stole
// between start and stop.
type stealMeter struct {
	total, steal uint64
	ok           bool
}

func startSteal() stealMeter {
	t, s, ok := cpuTimes()
	return stealMeter{t, s, ok}
}

// share is the stolen share since start, as "12%", or "unknown".
func (m stealMeter) share() string {
	t, s, ok := cpuTimes()
	if !ok || !m.ok || t <= m.total {
		return "unknown"
	}
	return fmt.Sprintf("%.0f%%", 100*float64(s-m.steal)/float64(t-m.total))
}
