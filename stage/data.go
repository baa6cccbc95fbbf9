package stage

import (
	"fmt"
	"hash/fnv"
	"math"

	"github.com/graphpipe/graphpipe/dag"
)

// teacherSeed separates the teacher's draws from the inputs' and the
// parameters'.
const teacherSeed = 0x7eac4e

// teacherWidth is the number of random features the teacher reads.
const teacherWidth = 32

// Dataset is a model's default synthetic data, reproducible from (seed,
// step): float inputs ~ N(0, 1), int32 inputs uniform in their range, and
// the loss's target input produced by a teacher, so that the loss can
// really fall. The teacher is a random-feature model of every other input:
// a float input x of n values adds R·x/√n (R a fixed Gaussian matrix of
// teacherWidth rows), an int32 input of n values adds the mean of a fixed
// random vector per (input, value); the sum passes through tanh and a fixed
// random linear map to the prediction's shape: softmax_cross_entropy gets
// its argmax, mse the values, bce_with_logits 1 where a value is positive.
//
// The teacher costs about teacherWidth multiply-adds per input value and per
// output value, far below a forward pass of the model: an earlier teacher,
// the model itself with other parameters, made the stage that holds the
// loss run a forward pass of the whole model per batch besides its share.
type Dataset struct {
	g      *dag.Graph
	seed   int64
	target string    // the model input the teacher labels, "" if none
	out    int       // per-sample values of the prediction
	w      []float32 // [out, teacherWidth] output map
	tables map[string][]float32
}

// NewDataset prepares the data of g.
func NewDataset(g *dag.Graph) (*Dataset, error) {
	d := &Dataset{g: g, seed: g.Seed(), tables: map[string][]float32{}}
	loss := g.OpInputs(g.Loss())
	if t := loss[1]; t.Producer < 0 {
		d.target = t.Name
		d.out = sizeOf(toIntsShape(loss[0].Shape))
		d.w = gaussian(rng(d.seed^teacherSeed, "teacher", "out"), d.out*teacherWidth, 1/math.Sqrt(teacherWidth))
	}
	return d, nil
}

// Batch is step's batch of n samples, every model input by name.
func (d *Dataset) Batch(step, n int) (map[string]*Value[float32], error) {
	return d.Inputs(step, n, nil)
}

// Inputs is step's batch of n samples of the named inputs only (nil: all).
// Each input depends on (seed, step, name) alone, so a stage can make just
// the ones it reads; only a stage that reads the target runs the teacher.
func (d *Dataset) Inputs(step, n int, names map[string]bool) (map[string]*Value[float32], error) {
	if names != nil && d.target != "" && names[d.target] {
		names = nil // the teacher reads every input
	}
	out := map[string]*Value[float32]{}
	for _, in := range d.g.Inputs() {
		if names != nil && !names[in.Name] {
			continue
		}
		shape := append([]int{n}, toIntsShape(in.Shape)...)
		r := rng(d.seed, "data", fmt.Sprint(step), in.Name)
		v := &Value[float32]{Shape: shape}
		if in.DType == dag.Int32 {
			v.Ints = make([]int32, sizeOf(shape))
			for i := range v.Ints {
				v.Ints[i] = int32(in.Range[0] + r.Int64N(in.Range[1]-in.Range[0]))
			}
		} else {
			v.Data = make([]float32, sizeOf(shape))
			for i := range v.Data {
				v.Data[i] = float32(r.NormFloat64())
			}
		}
		out[in.Name] = v
	}
	if d.target != "" && out[d.target] != nil {
		d.label(out, n)
	}
	return out, nil
}

func sizeOf(shape []int) int {
	n := 1
	for _, s := range shape {
		n *= s
	}
	return n
}

// label replaces the target input of a batch of n samples by the teacher's
// answer.
func (d *Dataset) label(batch map[string]*Value[float32], n int) {
	tgt := batch[d.target]
	kind := d.g.Op(d.g.Loss()).Kind
	feat := make([]float64, teacherWidth)
	z := make([]float64, d.out)
	for s := 0; s < n; s++ {
		d.features(batch, s, feat)
		for o := range z {
			var acc float64
			for f, h := range feat {
				acc += float64(d.w[o*teacherWidth+f]) * h
			}
			z[o] = acc
		}
		switch kind {
		case dag.SoftmaxCrossEntropy:
			best := 0
			for o := range z {
				if z[o] > z[best] {
					best = o
				}
			}
			tgt.Ints[s] = int32(best)
		case dag.MSE:
			for o, v := range z {
				tgt.Data[s*d.out+o] = float32(v)
			}
		case dag.BCEWithLogits:
			for o, v := range z {
				tgt.Data[s*d.out+o] = 0
				if v > 0 {
					tgt.Data[s*d.out+o] = 1
				}
			}
		}
	}
}

// features is tanh of the sum of every input's random features for sample
// s, into feat.
func (d *Dataset) features(batch map[string]*Value[float32], s int, feat []float64) {
	clear(feat)
	for _, in := range d.g.Inputs() {
		if in.Name == d.target {
			continue
		}
		v := batch[in.Name]
		per := sizeOf(toIntsShape(in.Shape))
		scale := 1 / math.Sqrt(float64(max(per, 1)))
		if v.Ints != nil {
			key := fnvString(in.Name)
			for _, x := range v.Ints[s*per : (s+1)*per] {
				for f := range feat {
					feat[f] += scale * hashUnit(uint64(d.seed)^teacherSeed, key, uint64(int64(x)), uint64(f))
				}
			}
			continue
		}
		r := d.table(in.Name, per)
		for j, x := range v.Data[s*per : (s+1)*per] {
			row := r[j*teacherWidth : (j+1)*teacherWidth]
			for f := range feat {
				feat[f] += scale * float64(row[f]) * float64(x)
			}
		}
	}
	for f := range feat {
		feat[f] = math.Tanh(feat[f])
	}
}

// table is float input name's fixed Gaussian feature matrix, [per, width].
func (d *Dataset) table(name string, per int) []float32 {
	if t, ok := d.tables[name]; ok {
		return t
	}
	t := gaussian(rng(d.seed^teacherSeed, "teacher", name), per*teacherWidth, 1)
	d.tables[name] = t
	return t
}

func gaussian(r interface{ NormFloat64() float64 }, n int, scale float64) []float32 {
	out := make([]float32, n)
	for i := range out {
		out[i] = float32(scale * r.NormFloat64())
	}
	return out
}

func fnvString(s string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(s))
	return h.Sum64()
}

// hashUnit is a fixed pseudo-random value in [−√3, √3) (unit variance) for
// (seed, key, value, feature): an int32 input's random vector per value,
// without a table as large as its range.
func hashUnit(seed, key, value, f uint64) float64 {
	x := splitmix(seed ^ splitmix(key^splitmix(value^splitmix(f))))
	return (float64(x>>11)/(1<<53)*2 - 1) * math.Sqrt(3)
}

// splitmix is SplitMix64's finaliser.
func splitmix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}
