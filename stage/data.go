package stage

import (
	"fmt"
	"math"
	"math/bits"
	"os"
	"sort"
	"strings"

	"github.com/graphpipe/graphpipe/dag"
	"github.com/graphpipe/graphpipe/stage/internal/kernel"
)

// teacherSeed separates the teacher's draws from the inputs' and the
// parameters'.
const teacherSeed = 0x7eac4e

// teacherWidth is the number of random features the teacher reads;
// teacherTaps the most values of one input per sample that feed them (fixed
// random positions), so that labelling stays cheap beside the model on wide
// inputs (labelling from every value cost DLRM's wide dense inputs about a
// second per batch: bench/history.md).
const (
	teacherWidth = 32
	teacherTaps  = 64
)

// Dataset is a model's default synthetic data, reproducible from (seed,
// step): float inputs close to N(0, 1) (normalAt), int32 inputs uniform in
// their range, and the loss's target input produced by a teacher, so that
// the loss can really fall. The teacher is a random-feature model of every other input:
// each input contributes the values at up to teacherTaps fixed random
// positions of a sample, a float value x at tap j adding x·R[j]/√taps (R a
// fixed Gaussian matrix of teacherWidth columns), an int32 value adding a
// fixed random vector per (input, value) over √taps; the sum passes through
// tanh and a fixed random linear map to the prediction's shape:
// softmax_cross_entropy gets its argmax, mse the values, bce_with_logits 1
// where a value is positive.
//
// The teacher costs teacherWidth multiply-adds per tap and per output value
// of a sample, spread over the cores, far below a forward pass of the model:
// an earlier teacher, the model itself with other parameters, made the stage
// that holds the loss run a forward pass of the whole model per batch
// besides its share.
type Dataset struct {
	g      *dag.Graph
	seed   int64
	target string    // the model input the teacher labels, "" if none
	out    int       // per-sample values of the prediction
	w      []float32 // [out, teacherWidth] output map
	taps   []teacherTap
	poison poisoning // the test hook's (PoisonEnv), read when the dataset is made
}

// teacherTap is what the teacher reads of one input.
type teacherTap struct {
	per   int       // values per sample
	pos   []int     // the positions read, at most teacherTaps
	r     []float32 // float input: [len(pos), teacherWidth] Gaussian
	key   uint64    // int32 input: its hash key
	rng   *[2]int64 // int32 input: its range
	data  uint64    // the input's data key (dataKey)
	scale float64   // 1/√len(pos)
}

// NewDataset prepares the data of g.
func NewDataset(g *dag.Graph) (*Dataset, error) {
	d := &Dataset{g: g, seed: g.Seed(), poison: poisonFrom(os.Getenv(PoisonEnv))}
	loss := g.OpInputs(g.Loss())
	if t := loss[1]; t.Producer < 0 {
		d.target = t.Name
		d.out = kernel.SizeOf(kernel.IntShape(loss[0].Shape))
		d.w = gaussian(kernel.RNG(d.seed^teacherSeed, "teacher", "out"), d.out*teacherWidth, 1/math.Sqrt(teacherWidth))
		for _, in := range g.Inputs() {
			if in.Name != d.target {
				d.taps = append(d.taps, d.tap(in))
			}
		}
	}
	return d, nil
}

// tap chooses input in's positions (all of them when there are few) and
// draws its float features.
func (d *Dataset) tap(in dag.Input) teacherTap {
	per := kernel.SizeOf(kernel.IntShape(in.Shape))
	r := kernel.RNG(d.seed^teacherSeed, "teacher", in.Name)
	pos := make([]int, per)
	for i := range pos {
		pos[i] = i
	}
	if per > teacherTaps {
		r.Shuffle(per, func(i, j int) { pos[i], pos[j] = pos[j], pos[i] })
		pos = pos[:teacherTaps]
		sort.Ints(pos)
	}
	t := teacherTap{per: per, pos: pos, key: kernel.Splitmix(uint64(d.seed)^teacherSeed) ^ kernel.FNV(in.Name), rng: in.Range, data: d.dataKey(in.Name),
		scale: 1 / math.Sqrt(float64(max(len(pos), 1)))}
	if in.DType != dag.Int32 {
		t.r = gaussian(r, len(pos)*teacherWidth, 1)
	}
	return t
}

// Batch is step's batch of n samples, every model input by name.
func (d *Dataset) Batch(step, n int) (map[string]*Value[float32], error) {
	return d.Inputs(step, n, nil)
}

// Inputs is step's batch of n samples of the named inputs only (nil: all).
// Each value depends on (seed, step, input name, index) alone (a counter-
// based generator, filled over the cores), so a stage makes just the inputs
// it reads, and the stage that reads the target computes the teacher's
// taps of the others without making them whole.
func (d *Dataset) Inputs(step, n int, names map[string]bool) (map[string]*Value[float32], error) {
	out := map[string]*Value[float32]{}
	for _, in := range d.g.Inputs() {
		if names != nil && !names[in.Name] {
			continue
		}
		shape := append([]int{n}, kernel.IntShape(in.Shape)...)
		base := stepBase(d.dataKey(in.Name), step)
		v := &Value[float32]{Shape: shape}
		if in.DType == dag.Int32 {
			v.Ints = make([]int32, kernel.SizeOf(shape))
			kernel.EachSpan(len(v.Ints), func(lo, hi int) {
				for i := lo; i < hi; i++ {
					v.Ints[i] = intAt(base, i, in.Range)
				}
			})
		} else {
			v.Data = make([]float32, kernel.SizeOf(shape))
			kernel.EachSpan(len(v.Data), func(lo, hi int) {
				for i := lo; i < hi; i++ {
					v.Data[i] = normalAt(base, i)
				}
			})
		}
		out[in.Name] = v
	}
	if d.target != "" && out[d.target] != nil {
		d.label(out[d.target], step, n)
	}
	d.poison.apply(out, step)
	return out, nil
}

// PoisonEnv is a test hook: "step:input" puts a NaN in the first value of
// that float input in that step's batch (a batch gone bad), wherever the
// batch is made (a stage that reads it, or graphpipe train), so that the
// loss and the gradients downstream of it are not finite.
const PoisonEnv = "GRAPHPIPE_TEST_POISON"

// poisoning is PoisonEnv's step and input; input "" for none.
type poisoning struct {
	step  int
	input string
}

// poisonFrom reads PoisonEnv's value; anything but "step:input" is none.
func poisonFrom(spec string) poisoning {
	var p poisoning
	if c, _ := fmt.Sscanf(strings.Replace(spec, ":", " ", 1), "%d %s", &p.step, &p.input); c != 2 {
		return poisoning{}
	}
	return p
}

// apply puts the NaN into step's batch where the hook asks for one.
func (p poisoning) apply(batch map[string]*Value[float32], step int) {
	if p.input == "" || p.step != step {
		return
	}
	if v := batch[p.input]; v != nil && len(v.Data) > 0 {
		v.Data[0] = float32(math.NaN())
	}
}

// dataKey separates the inputs' streams.
func (d *Dataset) dataKey(name string) uint64 {
	return kernel.Splitmix(uint64(d.seed)) ^ kernel.FNV("data\x00"+name)
}

// stepBase is the generator state of one input's values at step.
func stepBase(key uint64, step int) uint64 {
	return kernel.Splitmix(key ^ kernel.Splitmix(uint64(step)))
}

// word is the i-th word of a SplitMix64 stream from base: counter-based, so
// any value is made without the ones before it.
func word(base uint64, i int) uint64 { return kernel.Splitmix(base + uint64(i)*0x9e3779b97f4a7c15) }

// normalAt is value i of base's stream, close to N(0, 1): the sum of the
// four 16-bit uniforms of word i, centred and scaled to variance 1 (its
// range is ±2√3; a Box-Muller normal cost 3× as much to make, and synthetic
// data has no use for the tails).
func normalAt(base uint64, i int) float32 {
	w := word(base, i)
	sum := float32(w&0xffff) + float32(w>>16&0xffff) + float32(w>>32&0xffff) + float32(w>>48) + 2 // 4 × (h + 0.5)
	return (sum/65536 - 2) * 1.7320508
}

// intAt is value i of base's stream, uniform in [rng[0], rng[1]).
func intAt(base uint64, i int, rng *[2]int64) int32 {
	hi, _ := bits.Mul64(word(base, i), uint64(rng[1]-rng[0]))
	return int32(rng[0] + int64(hi))
}

// label replaces the target input of a batch of n samples by the teacher's
// answer, the samples split over the cores (each label is its sample's
// alone, so the split changes nothing).
func (d *Dataset) label(tgt *Value[float32], step, n int) {
	write := kernel.Label(d.g.Op(d.g.Loss()).Kind)
	work := teacherWidth * (d.out + len(d.taps)*teacherTaps)
	kernel.EachItem(n, work, func(s int) {
		feat := make([]float64, teacherWidth)
		z := make([]float64, d.out)
		d.features(step, s, feat)
		for o := range z {
			var acc float64
			for f, h := range feat {
				acc += float64(d.w[o*teacherWidth+f]) * h
			}
			z[o] = acc
		}
		write(z, tgt, s)
	})
}

// features is tanh of the sum of every input's random features for sample
// s of step, into feat. It reads the tapped values from the generator, so
// the inputs need not be made.
func (d *Dataset) features(step, s int, feat []float64) {
	clear(feat)
	for _, t := range d.taps {
		base := stepBase(t.data, step)
		for k, j := range t.pos {
			i := s*t.per + j
			if t.r == nil {
				addIntFeatures(feat, t.key, intAt(base, i, t.rng), t.scale)
				continue
			}
			r := t.r[k*teacherWidth : (k+1)*teacherWidth]
			x := t.scale * float64(normalAt(base, i))
			for f := range feat {
				feat[f] += float64(r[f]) * x
			}
		}
	}
	for f := range feat {
		feat[f] = math.Tanh(feat[f])
	}
}

func gaussian(r interface{ NormFloat64() float64 }, n int, scale float64) []float32 {
	out := make([]float32, n)
	for i := range out {
		out[i] = float32(scale * r.NormFloat64())
	}
	return out
}

// addIntFeatures adds scale times int value x's fixed random vector to
// feat: teacherWidth values uniform in [−√3, √3) (unit variance), four from
// each 64-bit word, without a table as large as the input's range.
func addIntFeatures(feat []float64, key uint64, x int32, scale float64) {
	base := kernel.Splitmix(key ^ kernel.Splitmix(uint64(int64(x))))
	for f := 0; f < len(feat); f += 4 {
		w := word(base, f)
		for q := 0; q < 4 && f+q < len(feat); q++ {
			u := (float64(w>>(16*q)&0xffff) + 0.5) / 65536
			feat[f+q] += scale * (2*u - 1) * math.Sqrt(3)
		}
	}
}
