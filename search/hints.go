package search

import "sync"

// hints remember where the least bottlenecks of a Search's DPs lay, so
// that the next DP's bisection (leastT) looks there first: a bisection's
// first solve, unbounded, costs the most, and one just above the least T
// bounds every later one tightly. Only where a bisection looks depends on
// them, never what it finds. A search on fewer devices looks where the
// last search found the least T at the same micro-batch (the bottleneck
// is often one op or stage that more devices do not split); a size looks
// where a size searched before it found it, scaled by the sizes' ratio
// (a stage's time per micro-batch grows with the micro-batch).
type hints struct {
	mu sync.Mutex
	at map[hintKey]float64
}

type hintKey struct {
	sp      *space
	devices int
	b       int64
}

// guess is where a DP of space sp on devices at micro-batch b may look
// first: 0 for nowhere. The DPs look only where tuning.hintsOn.
func (h *hints) guess(sp *space, devices int, b int64) float64 {
	if h == nil {
		return 0
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	same, sameD := 0.0, 0        // the same size on the fewest more devices
	near, nearB := 0.0, int64(0) // another size on these devices, the nearest (the smaller on ties)
	for k, T := range h.at {
		switch {
		case k.sp != sp:
		case k.b == b && k.devices > devices && (sameD == 0 || k.devices < sameD):
			same, sameD = T, k.devices
		case k.devices == devices && k.b != b:
			if nearB == 0 || closer(k.b, nearB, b) {
				near, nearB = T*float64(b)/float64(k.b), k.b
			}
		}
	}
	if sameD > 0 {
		return same
	}
	return near
}

// found records the least T a DP of space sp found on every one of devices
// at micro-batch b.
func (h *hints) found(sp *space, devices int, b int64, T float64) {
	if h == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.at == nil {
		h.at = map[hintKey]float64{}
	}
	h.at[hintKey{sp, devices, b}] = T
}

// closer says whether size a is nearer b than size c is, in doublings
// (the smaller on ties).
func closer(a, c, b int64) bool {
	da, dc := sizeDistance(a, b), sizeDistance(c, b)
	return da < dc || da == dc && a < c
}

// sizeDistance is how far apart two sizes are, in doublings (at least 1).
func sizeDistance(a, b int64) int {
	d := 0
	for a < b {
		a, d = a*2, d+1
	}
	for b < a {
		b, d = b*2, d+1
	}
	return max(d, 1)
}
