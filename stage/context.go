package stage

// Position places a micro-batch in training: the step, and the index in the
// step's batch of the micro-batch's first row (a data-parallel replica's
// rows start further in). Ops that draw random numbers (dropout) draw them
// from (seed, step, op, sample), so that every plan, micro-batch size,
// replica split and restart draws the same.
type Position struct {
	Step   int
	Sample int
	// Rows is the micro-batch's size (this replica's rows of it): what ops
	// without inputs (parameter, constant) make. 0: the rows of what Forward
	// is fed.
	Rows int
	// Eval runs the forward pass as evaluation does (PyTorch's eval mode):
	// batch_norm normalises by its running statistics and leaves them
	// alone, dropout passes its input through.
	Eval bool
}

// runCtx is what an executor tells its kernels about the pass they run:
// kernels that need it (dropout) keep a pointer to their executor's.
type runCtx struct {
	seed int64
	pos  Position
	// recomputing: the pass reruns a forward already run (Executor.Recompute):
	// batch_norm leaves its running statistics alone
	recomputing bool
}

// dropKey is the key of op's dropout masks at step: mix(mix(mix(seed) ^
// fnv(op)) ^ step), docs/model-format.md, mix being SplitMix64's finaliser
// (splitmix) and fnv 64-bit FNV-1a.
func dropKey(seed int64, op string, step int) uint64 {
	return splitmix(splitmix(splitmix(uint64(seed))^fnvString(op)) ^ uint64(step))
}

// dropped says whether element elem of sample is zeroed, at rate p, under
// key k: (mix(mix(k ^ sample) ^ elem) >> 11) · 2⁻⁵³ < p.
func dropped(k, sample, elem uint64, p float64) bool {
	h := splitmix(splitmix(k^sample) ^ elem)
	return float64(h>>11)*(1.0/(1<<53)) < p
}
