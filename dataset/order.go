package dataset

import (
	"fmt"
	"sync"
)

// Order is which samples make each training step's batch: epochs of
// ⌊Samples/Batch⌋ steps over a permutation of the samples seeded by (Seed,
// epoch), or over the file order when Shuffle is off.
type Order struct {
	Samples, Batch int
	Seed           int64
	Shuffle        bool

	mu    sync.Mutex // guards epoch, perm
	epoch int
	perm  []int32
}

// NewOrder checks that an epoch holds at least one batch.
func NewOrder(samples, batch int, seed int64, shuffle bool) (*Order, error) {
	if batch < 1 {
		return nil, fmt.Errorf("batch of %d samples", batch)
	}
	if samples < batch {
		return nil, fmt.Errorf("%d samples do not make one batch of %d", samples, batch)
	}
	if samples > 1<<31-1 {
		return nil, fmt.Errorf("%d samples: at most 2³¹-1 are read", samples)
	}
	return &Order{Samples: samples, Batch: batch, Seed: seed, Shuffle: shuffle, epoch: -1}, nil
}

// StepsPerEpoch is the whole batches of an epoch.
func (o *Order) StepsPerEpoch() int { return o.Samples / o.Batch }

// Left is the samples an epoch leaves out (the last partial batch).
func (o *Order) Left() int { return o.Samples % o.Batch }

// Epoch is the epoch that step belongs to.
func (o *Order) Epoch(step int) int { return step / o.StepsPerEpoch() }

// Rows is the samples of step's batch, in batch order.
func (o *Order) Rows(step int) []int {
	k := o.StepsPerEpoch()
	epoch, at := step/k, (step%k)*o.Batch
	out := make([]int, o.Batch)
	if !o.Shuffle {
		for i := range out {
			out[i] = at + i
		}
		return out
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.epoch != epoch {
		o.perm, o.epoch = Permutation(o.Samples, o.Seed, epoch), epoch
	}
	for i := range out {
		out[i] = int(o.perm[at+i])
	}
	return out
}

// Permutation is epoch's order of n samples under seed: Fisher–Yates from
// the last position down, position i swapped with j = ⌊u·(i+1)⌋ where u is
// the next value of a SplitMix64 stream started at mix(seed ^ mix(epoch))
// taken as its top 53 bits · 2⁻⁵³.
func Permutation(n int, seed int64, epoch int) []int32 {
	p := make([]int32, n)
	for i := range p {
		p[i] = int32(i)
	}
	state := splitmix(uint64(seed) ^ splitmix(uint64(epoch)))
	for i := n - 1; i > 0; i-- {
		state += 0x9e3779b97f4a7c15
		u := float64(splitmix(state)>>11) * (1.0 / (1 << 53))
		j := int(u * float64(i+1))
		p[i], p[j] = p[j], p[i]
	}
	return p
}

// splitmix is SplitMix64's finaliser.
func splitmix(z uint64) uint64 {
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// EvalRows is the samples of evaluation batch k: the set in file order, in
// batches of batch, the last one partial.
func EvalRows(samples, batch, k int) []int {
	lo := k * batch
	hi := min(lo+batch, samples)
	out := make([]int, max(hi-lo, 0))
	for i := range out {
		out[i] = lo + i
	}
	return out
}

// EvalBatches is how many batches EvalRows makes of samples.
func EvalBatches(samples, batch int) int { return (samples + batch - 1) / batch }
