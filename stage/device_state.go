package stage

import (
	"fmt"
	"math"
	"unsafe"

	"github.com/graphpipe/graphpipe/stage/internal/kernel"
	"github.com/graphpipe/graphpipe/tensor/cuda"
)

// devTrain is the training state of a stage on the CUDA backend, on the
// device from the first step to the last (backend_cuda.go):
//
//   - the parameters, their gradients and the optimizer's state (SGD's
//     momentum buffers, Adam's exp_avg and exp_avg_sq) in flat buffers, one
//     per kind, laid out in parameter-name order (the all-reduce's), each
//     tensor at a multiple of align elements (so that a GEMM reads a
//     parameter at the alignment a buffer of its own would have); the
//     buffers (batch_norm's running statistics) in one more, in
//     buffer-name order, and their snapshot for a skipped step;
//   - the step's losses, and the gradients' squared norms, in one readback
//     buffer that comes to the host in one copy, once a step;
//   - the tables the norm kernels read (each block's place, each
//     parameter's first block), uploaded once.
//
// The host's Params and Buffers are copies, current after fetch; pending
// names what the host wrote since (LoadState, changed), uploaded before
// the device next reads the state (ready).
type devTrain struct {
	d       *cuda.Device
	e       *Executor
	pl, bl  layout      // parameters, buffers
	p, g, b cuda.Buffer // parameters, gradients, buffers
	bkeep   cuda.Buffer // the buffers as the step began (keepBuffers)
	opt     devOptim
	views   map[*Value[float32]]cuda.Buffer // each parameter's and buffer's place in p or b
	grads   map[*Value[float32]]cuda.Buffer // each parameter gradient's place in g
	byPtr   map[uint64]*Value[float32]      // the parameter whose view starts at a device address

	blocks, first cuda.Buffer // the squared norms' tables: blocks [2·nb] (start, length), first [np+1]
	nblocks       int
	tabled        *shardView  // the shard the tables were made for (nil: every parameter whole)
	parts         cuda.Buffer // each block's partial sum, float64
	rb            cuda.Buffer // the readback: squares [np] float64, then the step's losses (float32)
	lossCap       int         // losses rb holds
	nloss         int         // losses kept this step
	read          *readback   // the readback of the gradients as they are, once made (dropped when a pass or the clip changes them)
	allocated     bool

	pendingAll bool            // every host value is newer than the device's
	pending    map[string]bool // host values newer than the device's, by name
	hostStale  bool            // the device's parameters or buffers are newer than the host's
	arStage    cuda.Staging    // the gradients' pinned staging for an all-reduce (replicated stages)
	halves     map[*Value[float32]]*halfCopy
}

// align is the element boundary each tensor of a flat buffer starts at:
// 256 bytes, what the driver's allocations are aligned to.
const align = 64

// layout places named tensors end to end, each at a multiple of align.
type layout struct {
	names []string
	off   []int
	n     []int
	total int
}

func newLayout(names []string, vals map[string]*Value[float32]) layout {
	l := layout{names: names}
	for _, name := range names {
		k := len(vals[name].Data)
		l.off, l.n = append(l.off, l.total), append(l.n, k)
		l.total += (k + align - 1) / align * align
	}
	return l
}

// view is tensor k's place in buf.
func (l layout) view(buf cuda.Buffer, k int) cuda.Buffer {
	return cuda.Buffer{Ptr: buf.Ptr + uint64(4*l.off[k]), N: l.n[k]}
}

// halfCopy is a parameter rounded to bf16 for the step's matrix products
// (precision bf16): made once, rounded again after each update.
type halfCopy struct {
	buf   cuda.Buffer
	fresh bool
}

// readback is what the step brings to the host in one copy.
type readback struct {
	squares []float64 // by parameter, in layout order
	losses  []float32 // by slot
}

func newDevTrain(d *cuda.Device, e *Executor) *devTrain {
	t := &devTrain{d: d, e: e, pl: newLayout(e.ParamNames(), e.Params), bl: newLayout(e.BufferNames(), e.Buffers),
		pendingAll: true, halves: map[*Value[float32]]*halfCopy{}}
	return t
}

// ready allocates the state on its first call, and uploads what the host
// wrote since the last call. Every piece that reads the device's state
// calls it first.
func (t *devTrain) ready(s *kernel.Scope) {
	if !t.allocated && s.Err() == nil {
		t.allocate(s)
	}
	if s.Err() != nil || !t.pendingAll && len(t.pending) == 0 {
		return
	}
	write := func(l layout, buf cuda.Buffer, vals map[string]*Value[float32]) {
		for k, name := range l.names {
			if t.pendingAll || t.pending[name] {
				s.Write(l.view(buf, k), vals[name].Data)
			}
		}
	}
	write(t.pl, t.p, t.e.Params)
	write(t.bl, t.b, t.e.Buffers)
	if t.pendingAll {
		t.hostStale = false // the host's copies are the state
	}
	t.pendingAll, t.pending = false, nil
	t.stale()
}

// allocate makes the flat buffers (the gradients zeroed), the views and
// the norm tables.
func (t *devTrain) allocate(s *kernel.Scope) {
	t.p, t.g, t.b = s.Hold(t.pl.total), s.Hold(t.pl.total), s.Hold(t.bl.total)
	if s.Err() == nil && t.pl.total > 0 {
		s.Fail(t.d.Memset(t.g))
	}
	t.views, t.grads, t.byPtr = map[*Value[float32]]cuda.Buffer{}, map[*Value[float32]]cuda.Buffer{}, map[uint64]*Value[float32]{}
	for k, name := range t.pl.names {
		v := t.pl.view(t.p, k)
		t.views[t.e.Params[name]], t.grads[t.e.Grads[name]] = v, t.pl.view(t.g, k)
		t.byPtr[v.Ptr] = t.e.Params[name]
	}
	for k, name := range t.bl.names {
		t.views[t.e.Buffers[name]] = t.bl.view(t.b, k)
	}
	t.normTables(s)
	t.growLosses(s, 8)
	t.allocated = s.Err() == nil
}

// normTables makes the squared norms' tables for the parameters the step
// reads (units: every one whole, or a shard's pieces), again where the
// executor was sharded since they were made.
func (t *devTrain) normTables(s *kernel.Scope) {
	if s.Err() != nil {
		return
	}
	for _, b := range []cuda.Buffer{t.blocks, t.first, t.parts} {
		if b.Ptr != 0 {
			s.Fail(t.d.Free(b))
		}
	}
	var blocks, first []int64
	units := t.units()
	for k := range t.pl.names {
		first = append(first, int64(len(blocks)/2))
		for _, u := range units {
			if u.k != k {
				continue
			}
			for lo := u.lo; lo < u.hi; lo += normBlock {
				blocks = append(blocks, int64(t.pl.off[k]+lo), int64(min(normBlock, u.hi-lo)))
			}
		}
	}
	first = append(first, int64(len(blocks)/2))
	t.nblocks = len(blocks) / 2
	t.blocks, t.first = s.UpLongs(blocks), s.UpLongs(first)
	t.parts = s.Hold(2 * max(t.nblocks, 1))
	t.tabled = t.e.shard
}

// growLosses makes room in the readback buffer for at least n losses,
// keeping those kept so far.
func (t *devTrain) growLosses(s *kernel.Scope, n int) {
	if n <= t.lossCap || s.Err() != nil {
		return
	}
	n = max(n, 2*t.lossCap)
	rb := s.Hold(2*len(t.pl.names) + n)
	if t.lossCap > 0 {
		np := 2 * len(t.pl.names)
		if t.nloss > 0 {
			s.Fail(t.d.Copy(rb.Offset(np), t.rb.Offset(np), t.nloss))
		}
		s.Fail(t.d.Free(t.rb))
	}
	t.rb, t.lossCap = rb, n
}

// stale says the parameters changed on the device: the host's copies and
// the bf16 copies are behind.
func (t *devTrain) stale() {
	for _, h := range t.halves {
		h.fresh = false
	}
}

// changed notes host values newer than the device's: names, or all (nil).
func (t *devTrain) changed(names []string) {
	if names == nil {
		t.pendingAll, t.pending = true, nil
		return
	}
	if t.pending == nil {
		t.pending = map[string]bool{}
	}
	for _, n := range names {
		t.pending[n] = true
	}
}

// fetch brings the parameters and buffers to the host, when the device's
// are newer.
func (t *devTrain) fetch(s *kernel.Scope) {
	t.ready(s)
	if !t.hostStale || s.Err() != nil {
		return
	}
	for k, name := range t.pl.names {
		s.Down(t.e.Params[name].Data, t.pl.view(t.p, k))
	}
	for k, name := range t.bl.names {
		s.Down(t.e.Buffers[name].Data, t.bl.view(t.b, k))
	}
	if s.Err() == nil {
		t.hostStale = false
	}
}

// fetchGrads brings the gradients to the host's Grads (the slow path of
// the finite check, and tests).
func (t *devTrain) fetchGrads(s *kernel.Scope) {
	t.ready(s)
	for k, name := range t.pl.names {
		s.Down(t.e.Grads[name].Data, t.pl.view(t.g, k))
	}
}

// keepLoss copies a training Forward's loss (its device copy in r, the
// micro-batch's residency, or its host value) into the step's slot.
func (t *devTrain) keepLoss(s *kernel.Scope, r *residency, slot int, v *Value[float32]) {
	t.ready(s)
	t.growLosses(s, slot+1)
	if s.Err() != nil {
		return
	}
	dst := t.rb.Offset(2*len(t.pl.names) + slot)
	switch {
	case v.Data != nil:
		s.Fail(t.d.CopyIn(dst, v.Data[:1]))
	case r != nil && r.vals[v].Ptr != 0:
		s.Fail(t.d.Copy(dst, r.vals[v], 1))
	default:
		s.Fail(fmt.Errorf("the loss has neither host data nor a device copy"))
	}
	t.nloss = max(t.nloss, slot+1)
}

// readStep computes each gradient's squared norm on the device (blocks of
// normBlock elements summed in float64 in order, then each parameter's
// blocks in order: SquaredNorms's numbers; of a sharded stage, over its
// shard's pieces) and brings them down with the step's losses: one copy
// and one wait.
func (t *devTrain) readStep(s *kernel.Scope) *readback {
	if t.read != nil {
		return t.read
	}
	t.ready(s)
	if t.tabled != t.e.shard {
		t.normTables(s)
	}
	np := len(t.pl.names)
	if np > 0 {
		s.Launch("gp_sumsq_blocks", t.nblocks, t.g, t.blocks, t.parts, t.nblocks)
		s.Launch("gp_sumsq_fold", np, t.parts, t.first, t.rb, np)
	}
	n := 2*np + t.nloss
	if s.Err() != nil || n == 0 {
		return &readback{losses: []float32{}}
	}
	st, err := t.d.Stage(4 * n)
	if err != nil {
		s.Fail(err)
		return nil
	}
	defer func() { s.Fail(t.d.Unstage(st)) }()
	s.Fail(t.d.DownloadStaged(st, cuda.Buffer{Ptr: t.rb.Ptr, N: n}))
	s.Wait()
	if s.Err() != nil {
		return nil
	}
	words := st.Float32s()
	r := &readback{squares: make([]float64, np), losses: append([]float32(nil), words[2*np:n]...)}
	if np > 0 {
		copy(r.squares, unsafe.Slice((*float64)(unsafe.Pointer(&words[0])), np))
	}
	t.read = r
	return r
}

// scale multiplies every gradient by c (a readback made before is stale).
func (t *devTrain) scale(s *kernel.Scope, c float32) {
	t.ready(s)
	t.read = nil
	if t.pl.total > 0 {
		s.Launch("gp_scale", t.pl.total, t.g, c, t.pl.total)
	}
}

// clear zeroes the gradients (one memset) and ends the step's readback.
func (t *devTrain) clear(s *kernel.Scope) {
	t.ready(s)
	if t.pl.total > 0 && s.Err() == nil {
		s.Fail(t.d.Memset(t.g))
	}
	t.read, t.nloss = nil, 0
}

// keepBuffers copies the buffers into their snapshot; restoreBuffers puts
// it back.
func (t *devTrain) keepBuffers(s *kernel.Scope) {
	t.ready(s)
	if t.bl.total == 0 || s.Err() != nil {
		return
	}
	if t.bkeep.Ptr == 0 {
		t.bkeep = s.Hold(t.bl.total)
	}
	if s.Err() == nil {
		s.Fail(t.d.Copy(t.bkeep, t.b, t.bl.total))
	}
}

func (t *devTrain) restoreBuffers(s *kernel.Scope) {
	t.ready(s)
	if t.bl.total == 0 || t.bkeep.Ptr == 0 || s.Err() != nil {
		return
	}
	s.Fail(t.d.Copy(t.b, t.bkeep, t.bl.total))
	t.hostStale = true
}

// downForRing brings the gradients to pinned staging (one copy, one wait)
// and returns them as per-parameter values in parameter-name order (views
// of the staging, so the ring chunks them as it does a CPU stage's); nil
// for a stage without parameters. The ring runs after, the device free
// for the other workers that share it (cudaBackend.allReduce); upSums
// queues the sums back.
func (t *devTrain) downForRing(s *kernel.Scope) []*Value[float32] {
	t.ready(s)
	if s.Err() != nil || t.pl.total == 0 || !t.staging(s) {
		return nil
	}
	s.Fail(t.d.DownloadStaged(t.arStage, t.g))
	s.Wait()
	if s.Err() != nil {
		return nil
	}
	return t.stagedViews(t.e.Params)
}

// upSums queues the ring's sums up from the staging: in one copy where the
// whole staging came down (downForRing) and every sum is the stage's; else
// piece by piece, a sharded stage's shard alone (the rest stays partial),
// and never the padding between tensors, which a bucket never brought.
func (t *devTrain) upSums(s *kernel.Scope, whole bool) {
	if s.Err() != nil || t.pl.total == 0 {
		return
	}
	if whole && t.e.shard == nil {
		s.Fail(t.d.UploadStaged(t.g, t.arStage))
		return
	}
	for _, u := range t.units() {
		t.upPiece(s, t.g, u)
	}
}

// staging makes the pinned staging of the state's size, once.
func (t *devTrain) staging(s *kernel.Scope) bool {
	if t.arStage.Bytes() == nil && s.Err() == nil {
		st, err := t.d.Stage(4 * t.pl.total)
		if err != nil {
			s.Fail(err)
			return false
		}
		t.arStage = st
	}
	return s.Err() == nil
}

// stagedViews are the staging's places of every parameter (or gradient),
// as values in parameter-name order with the parameters' shapes: what the
// ring reads and writes.
func (t *devTrain) stagedViews(params map[string]*Value[float32]) []*Value[float32] {
	all := t.arStage.Float32s()
	out := make([]*Value[float32], len(t.pl.names))
	for k, name := range t.pl.names {
		out[k] = &Value[float32]{Shape: params[name].Shape, Data: all[t.pl.off[k] : t.pl.off[k]+t.pl.n[k]]}
	}
	return out
}

// upPiece queues piece u of buf (t.p or t.g) up from its place in the
// staging; downPiece queues it down there.
func (t *devTrain) upPiece(s *kernel.Scope, buf cuda.Buffer, u piece) {
	if n := u.hi - u.lo; n > 0 && s.Err() == nil {
		off := t.pl.off[u.k] + u.lo
		s.Fail(t.d.UploadStaged(cuda.Buffer{Ptr: buf.Ptr + uint64(4*off), N: n}, t.arStage.Slice(4*off, 4*n)))
	}
}

func (t *devTrain) downPiece(s *kernel.Scope, buf cuda.Buffer, u piece) {
	if n := u.hi - u.lo; n > 0 && s.Err() == nil {
		off := t.pl.off[u.k] + u.lo
		s.Fail(t.d.DownloadStaged(t.arStage.Slice(4*off, 4*n), cuda.Buffer{Ptr: buf.Ptr + uint64(4*off), N: n}))
	}
}

// downShard is a sharded stage's first part of its all-gather after the
// update: its shard's pieces of the parameters down to the staging (one
// wait), returned as the staging's views for the ring (nil: no
// parameters); upGathered then queues the other replicas' pieces up.
func (t *devTrain) downShard(s *kernel.Scope) []*Value[float32] {
	t.ready(s)
	if t.pl.total == 0 || !t.staging(s) {
		return nil
	}
	for _, u := range t.units() {
		t.downPiece(s, t.p, u)
	}
	s.Wait()
	if s.Err() != nil {
		return nil
	}
	return t.stagedViews(t.e.Params)
}

func (t *devTrain) upGathered(s *kernel.Scope) {
	if s.Err() != nil || t.pl.total == 0 {
		return
	}
	names := t.e.ParamNames()
	sizes := append([]int(nil), t.pl.n...)
	sh := t.e.shard.s
	for j := 0; j < sh.Count; j++ {
		if j == sh.Index {
			continue
		}
		for _, u := range shardPieces(names, sizes, Shard{j, sh.Count}) {
			t.upPiece(s, t.p, u)
		}
	}
	t.hostStale = true
	t.stale()
}

// upSpans queues up the parts of spans (of the ring's layout: the
// parameters in name order laid end to end) that other replicas updated,
// from the staging, as upGathered does for all of them, and marks the
// bf16 copies of the parameters they touch stale.
func (t *devTrain) upSpans(s *kernel.Scope, spans [][2]int64) {
	if s.Err() != nil || t.pl.total == 0 {
		return
	}
	total := 0
	for _, n := range t.pl.n {
		total += n
	}
	own0, own1 := t.e.shard.s.Span(total)
	up := func(a, z int) { // [a, z) of the layout, tensor by tensor
		base := 0
		for k, n := range t.pl.n {
			if lo, hi := max(a, base), min(z, base+n); lo < hi {
				t.upPiece(s, t.p, piece{k: k, name: t.pl.names[k], lo: lo - base, hi: hi - base})
				if h := t.halves[t.e.Params[t.pl.names[k]]]; h != nil {
					h.fresh = false
				}
			}
			base += n
		}
	}
	for _, sp := range spans {
		a, z := int(sp[0]), int(sp[1])
		up(a, min(z, own0))
		up(max(a, own1), z)
	}
	t.hostStale = true
}

// units are the pieces of the parameters the step updates, with their
// places in the optimizer's state: every parameter whole, at its place in
// the layout; or a sharded stage's shard's pieces, end to end.
func (t *devTrain) units() []piece {
	if v := t.e.shard; v != nil {
		return v.pieces
	}
	out := make([]piece, len(t.pl.names))
	for k, name := range t.pl.names {
		out[k] = piece{k: k, name: name, hi: t.pl.n[k], at: t.pl.off[k]}
	}
	return out
}

// stateSize is the elements each optimizer state buffer holds: the
// layout's, or a shard's.
func (t *devTrain) stateSize() int {
	if v := t.e.shard; v != nil {
		return v.size()
	}
	return t.pl.total
}

// free gives back every buffer the state holds.
func (t *devTrain) free(s *kernel.Scope) {
	if !t.allocated && t.p.Ptr == 0 {
		return
	}
	for _, b := range []cuda.Buffer{t.p, t.g, t.b, t.bkeep, t.opt.m, t.opt.v, t.blocks, t.first, t.parts, t.rb} {
		if b.Ptr != 0 {
			s.Fail(t.d.Free(b))
		}
	}
	for _, h := range t.halves {
		s.Fail(t.d.Free(h.buf))
	}
	if t.arStage.Bytes() != nil {
		s.Fail(t.d.Unstage(t.arStage))
	}
	*t = devTrain{d: t.d, e: t.e, pl: t.pl, bl: t.bl, pendingAll: true, halves: map[*Value[float32]]*halfCopy{}, opt: devOptim{spec: t.opt.spec}}
}

// half is the bf16 copy of the parameter whose view is b (all of it), for
// the step's matrix products: rounded once after each change.
func (t *devTrain) half(s *kernel.Scope, b cuda.Buffer) cuda.Buffer {
	v, ok := t.byPtr[b.Ptr]
	if !ok || b.N != t.views[v].N || s.Err() != nil {
		return cuda.Buffer{}
	}
	h := t.halves[v]
	if h == nil {
		buf, err := t.d.Round(b, cuda.BF16)
		if err != nil {
			s.Fail(err)
			return cuda.Buffer{}
		}
		h = &halfCopy{buf: buf, fresh: true}
		t.halves[v] = h
	}
	if !h.fresh {
		s.Fail(t.d.RoundInto(h.buf, b, cuda.BF16))
		h.fresh = true
	}
	return h.buf
}

// devOptim is the optimizer on the device: the catalogue's hyperparameters
// (spec: an *SGD or *Adam, whose own state stays empty) and the state.
type devOptim struct {
	spec Optimizer
	m, v cuda.Buffer // momentum_buffer or exp_avg; exp_avg_sq
	t    int         // Adam's step count
	has  []bool      // per parameter: its state exists (SGD: a momentum buffer; Adam: exp_avg and exp_avg_sq)
}

// slots are the optimizer's state tensors per parameter, by PyTorch's names.
func (o *devOptim) slots() []string {
	switch spec := o.spec.(type) {
	case *SGD:
		if spec.Momentum != 0 {
			return []string{"momentum_buffer"}
		}
	case *Adam:
		return []string{"exp_avg", "exp_avg_sq"}
	}
	return nil
}

// state makes the state's buffers (zeros) on first use.
func (t *devTrain) state(s *kernel.Scope) {
	o := &t.opt
	if o.has == nil {
		o.has = make([]bool, len(t.pl.names))
	}
	for k, b := range []*cuda.Buffer{&o.m, &o.v} {
		if k < len(o.slots()) && b.Ptr == 0 && s.Err() == nil && t.stateSize() > 0 {
			*b = s.Hold(t.stateSize())
			if s.Err() == nil {
				s.Fail(t.d.Memset(*b))
			}
		}
	}
}

// update steps the optimizer at rate: one kernel per parameter, in the
// host optimizer's arithmetic (kernels.cu's gp_sgd_step, gp_adam_step),
// which also writes the parameter's bf16 copy where it has one (fresh
// after the step, without a rounding kernel of its own).
func (t *devTrain) update(s *kernel.Scope, rate float64) {
	t.ready(s)
	t.state(s)
	t.stale()
	var written []*halfCopy
	half := func(u piece) cuda.Buffer { // the copy the kernel writes, if any: the unit's place in it
		h := t.halves[t.e.Params[u.name]]
		if h == nil {
			return cuda.Buffer{}
		}
		if u.lo == 0 && u.hi == t.pl.n[u.k] { // a shard's piece leaves the rest of the copy stale
			written = append(written, h)
		}
		return cuda.Buffer{Ptr: h.buf.Ptr + uint64(2*u.lo), N: u.hi - u.lo, Half: true}
	}
	defer func() {
		for _, h := range written {
			h.fresh = s.Err() == nil
		}
	}()
	o := &t.opt
	switch spec := o.spec.(type) {
	case *SGD:
		for _, u := range t.units() {
			k, n := u.k, u.hi-u.lo
			wd := float32(decay(spec.WeightDecay, spec.MatricesOnly, t.e.Params[u.name]))
			var buf cuda.Buffer
			first := int32(0)
			if spec.Momentum != 0 {
				buf = u.state(o.m)
				if !o.has[k] {
					first = 1
				}
				o.has[k] = true
			}
			if n > 0 {
				s.Launch("gp_sgd_step", n, t.unitView(t.p, u), t.unitView(t.g, u), buf, half(u), float32(rate), wd, spec.Momentum, first, kernel.BoolInt(spec.Nesterov), n)
			}
		}
	case *Adam:
		o.t++
		bc1 := 1 - math.Pow(float64(spec.Beta1), float64(o.t))
		bc2 := 1 - math.Pow(float64(spec.Beta2), float64(o.t))
		step := float32(rate / bc1)
		sqrtBC2 := float32(math.Sqrt(bc2))
		omb1, omb2 := 1-spec.Beta1, 1-spec.Beta2
		for _, u := range t.units() {
			n := u.hi - u.lo
			wd := decay(spec.WeightDecay, spec.MatricesOnly, t.e.Params[u.name])
			var coupled, shrink float32 = 0, 1
			if spec.Decoupled {
				shrink = float32(1 - rate*wd)
			} else {
				coupled = float32(wd)
			}
			o.has[u.k] = true
			if n > 0 {
				s.Launch("gp_adam_step", n, t.unitView(t.p, u), t.unitView(t.g, u), u.state(o.m), u.state(o.v), half(u),
					step, sqrtBC2, spec.Beta1, spec.Beta2, omb1, omb2, spec.Eps, coupled, shrink, n)
			}
		}
	default:
		s.Fail(fmt.Errorf("the CUDA backend has no device step for optimizer %T", o.spec))
	}
	t.hostStale = true
}

// unitView is unit u's place in buf (t.p or t.g).
func (t *devTrain) unitView(buf cuda.Buffer, u piece) cuda.Buffer {
	return cuda.Buffer{Ptr: buf.Ptr + uint64(4*(t.pl.off[u.k]+u.lo)), N: u.hi - u.lo}
}

// state is the unit's place in an optimizer state buffer.
func (u piece) state(buf cuda.Buffer) cuda.Buffer {
	return cuda.Buffer{Ptr: buf.Ptr + uint64(4*u.at), N: u.hi - u.lo}
}

// optimizerState brings the optimizer's state to the host, as Stateful's
// State keys it.
func (t *devTrain) optimizerState(s *kernel.Scope) (map[string][]float32, int) {
	t.ready(s)
	o := &t.opt
	out := map[string][]float32{}
	for _, u := range t.units() { // of a sharded stage, the shard's pieces
		if o.has == nil || !o.has[u.k] {
			continue
		}
		for j, slot := range o.slots() {
			buf := []cuda.Buffer{o.m, o.v}[j]
			h := make([]float32, u.hi-u.lo)
			s.Down(h, u.state(buf))
			out[u.name+"."+slot] = h
		}
	}
	if _, adam := o.spec.(*Adam); adam {
		return out, o.t
	}
	return out, 0
}

// loadOptimizerState puts st (Stateful's State keys, whole parameters')
// on the device, of a sharded stage its shard's pieces, with the checks
// and words of the host optimizers' LoadState.
func (t *devTrain) loadOptimizerState(s *kernel.Scope, st map[string][]float32, step int) error {
	o := &t.opt
	has := make([]bool, len(t.pl.names))
	_, adam := o.spec.(*Adam)
	units := t.units()
	for _, u := range units {
		k, name, n := u.k, u.name, t.pl.n[u.k]
		switch {
		case adam:
			m, okM := st[name+".exp_avg"]
			v, okV := st[name+".exp_avg_sq"]
			if !okM && !okV && step == 0 {
				continue
			}
			if !okM || !okV || len(m) != n || len(v) != n {
				return fmt.Errorf("optimizer state for %s is missing or the wrong size", name)
			}
			has[k] = true
		case len(o.slots()) > 0:
			if b, ok := st[name+".momentum_buffer"]; ok {
				if len(b) != n {
					return fmt.Errorf("optimizer state %s.momentum_buffer has %d values, the parameter %d", name, len(b), n)
				}
				has[k] = true
			}
		}
	}
	t.ready(s)
	t.state(s)
	for _, u := range units {
		for j, slot := range o.slots() {
			buf := u.state([]cuda.Buffer{o.m, o.v}[j])
			if has[u.k] {
				s.Write(buf, st[u.name+"."+slot][u.lo:u.hi])
			} else if buf.N > 0 && s.Err() == nil {
				s.Fail(t.d.Memset(buf))
			}
		}
	}
	o.has = has
	if adam {
		o.t = step
	}
	return nil
}
