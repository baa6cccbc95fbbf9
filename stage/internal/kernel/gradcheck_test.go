package kernel

import (
	"fmt"
	"math"
	"math/rand"
	"strings"
	"testing"

	"github.com/graphpipe/graphpipe/dag"
	"github.com/graphpipe/graphpipe/tensor"
)

// opCase is a one-op model: its inputs and the op, named "t".
type opCase struct {
	name   string
	inputs string
	op     string
}

var opCases = []opCase{
	{"linear", `{"name":"x","shape":[3,4],"dtype":"float32"}`, `"op":"linear","inputs":["x"],"attrs":{"out":5}`},
	{"linear-nobias", `{"name":"x","shape":[4],"dtype":"float32"}`, `"op":"linear","inputs":["x"],"attrs":{"out":2,"bias":false}`},
	{"relu", `{"name":"x","shape":[2,3],"dtype":"float32"}`, `"op":"relu","inputs":["x"]`},
	{"gelu", `{"name":"x","shape":[5],"dtype":"float32"}`, `"op":"gelu","inputs":["x"]`},
	{"tanh", `{"name":"x","shape":[5],"dtype":"float32"}`, `"op":"tanh","inputs":["x"]`},
	{"sigmoid", `{"name":"x","shape":[5],"dtype":"float32"}`, `"op":"sigmoid","inputs":["x"]`},
	{"layer_norm", `{"name":"x","shape":[3,6],"dtype":"float32"}`, `"op":"layer_norm","inputs":["x"]`},
	{"add", `{"name":"x","shape":[4],"dtype":"float32"},{"name":"y","shape":[4],"dtype":"float32"},{"name":"z","shape":[4],"dtype":"float32"}`, `"op":"add","inputs":["x","y","z"]`},
	{"add-same", `{"name":"x","shape":[4],"dtype":"float32"}`, `"op":"add","inputs":["x","x"]`},
	{"mul", `{"name":"x","shape":[2,2],"dtype":"float32"},{"name":"y","shape":[2,2],"dtype":"float32"}`, `"op":"mul","inputs":["x","y"]`},
	{"concat-first", `{"name":"x","shape":[2,3],"dtype":"float32"},{"name":"y","shape":[1,3],"dtype":"float32"}`, `"op":"concat","inputs":["x","y"],"attrs":{"axis":0}`},
	{"concat-last", `{"name":"x","shape":[2,3],"dtype":"float32"},{"name":"y","shape":[2,1],"dtype":"float32"}`, `"op":"concat","inputs":["x","y"]`},
	{"mean-first", `{"name":"x","shape":[3,4],"dtype":"float32"}`, `"op":"mean","inputs":["x"],"attrs":{"axis":0}`},
	{"mean-last", `{"name":"x","shape":[3,4],"dtype":"float32"}`, `"op":"mean","inputs":["x"],"attrs":{"axis":-1}`},
	{"flatten", `{"name":"x","shape":[2,3],"dtype":"float32"}`, `"op":"flatten","inputs":["x"]`},
	{"embedding", `{"name":"i","shape":[3],"dtype":"int32","range":[0,5]}`, `"op":"embedding","inputs":["i"],"attrs":{"num":5,"dim":4}`},
	{"embedding_bag-sum", `{"name":"i","shape":[4],"dtype":"int32","range":[0,6]}`, `"op":"embedding_bag","inputs":["i"],"attrs":{"num":6,"dim":3,"mode":"sum"}`},
	{"embedding_bag-mean", `{"name":"i","shape":[4],"dtype":"int32","range":[0,6]}`, `"op":"embedding_bag","inputs":["i"],"attrs":{"num":6,"dim":3}`},
	{"attention", `{"name":"x","shape":[4,6],"dtype":"float32"}`, `"op":"attention","inputs":["x"],"attrs":{"heads":2}`},
	{"attention-causal", `{"name":"x","shape":[3,4],"dtype":"float32"}`, `"op":"attention","inputs":["x"],"attrs":{"heads":1,"causal":true}`},
	{"dot_interaction", `{"name":"x","shape":[4],"dtype":"float32"},{"name":"y","shape":[4],"dtype":"float32"},{"name":"z","shape":[4],"dtype":"float32"}`, `"op":"dot_interaction","inputs":["x","y","z"]`},
	{"softmax_cross_entropy", `{"name":"x","shape":[5],"dtype":"float32"},{"name":"l","shape":[],"dtype":"int32","range":[0,5]}`, `"op":"softmax_cross_entropy","inputs":["x","l"]`},
	{"mse", `{"name":"x","shape":[3],"dtype":"float32"},{"name":"y","shape":[3],"dtype":"float32"}`, `"op":"mse","inputs":["x","y"]`},
	{"bce_with_logits", `{"name":"x","shape":[3],"dtype":"float32"},{"name":"y","shape":[3],"dtype":"float32"}`, `"op":"bce_with_logits","inputs":["x","y"]`},
}

// oneOp loads the case as a valid model: non-loss ops feed flatten and mse.
func oneOp(t testing.TB, c opCase) (*dag.Graph, int) {
	loss := strings.Contains(c.op, "softmax_cross_entropy") || strings.Contains(c.op, `"mse"`) || strings.Contains(c.op, "bce_with_logits")
	ops := `{"name":"t",` + c.op + `}`
	inputs := c.inputs
	if !loss {
		sep := "," // parameter and constant have no inputs
		if inputs == "" {
			sep = ""
		}
		probe, err := dag.Load([]byte(fmt.Sprintf(`{"format":"graphpipe/model@2","batch_size":1,"inputs":[%s%s{"name":"tgt","shape":[],"dtype":"float32"}],"ops":[%s,{"name":"f","op":"flatten","inputs":["t"]},{"name":"m","op":"mean","inputs":["f"],"attrs":{"axis":0}},{"name":"loss","op":"mse","inputs":["m","tgt"]}]}`, inputs, sep, ops)))
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		i, _ := probe.OpIndex("t")
		w := probe.Out(i).Shape.Elems()
		inputs += fmt.Sprintf(`%s{"name":"tgt","shape":[%d],"dtype":"float32"}`, sep, w)
		ops += `,{"name":"f","op":"flatten","inputs":["t"]},{"name":"loss","op":"mse","inputs":["f","tgt"]}`
	}
	g, err := dag.Load([]byte(fmt.Sprintf(`{"format":"graphpipe/model@2","batch_size":1,"inputs":[%s],"ops":[%s]}`, inputs, ops)))
	if err != nil {
		t.Fatalf("%s: %v", c.name, err)
	}
	i, _ := g.OpIndex("t")
	return g, i
}

// randomValues makes a batch of n for each input of op i, and its
// parameters, then its buffers (running means near 0, variances near 1).
func randomValues(g *dag.Graph, i, n int, r *rand.Rand) (x, p []*Value[float64]) {
	for _, in := range g.OpInputs(i) {
		shape := append([]int{n}, toInts(in.Shape)...)
		v := &Value[float64]{Shape: shape}
		if in.DType == dag.Int32 {
			v.Ints = make([]int32, tensor.Size(shape))
			for j := range v.Ints {
				v.Ints[j] = int32(in.Range[0] + r.Int63n(in.Range[1]-in.Range[0]))
			}
		} else {
			v.Data = make([]float64, tensor.Size(shape))
			for j := range v.Data {
				v.Data[j] = r.NormFloat64()
			}
		}
		x = append(x, v)
	}
	for _, prm := range g.Params(i) {
		v := NewValue[float64](toInts(prm.Shape)...)
		for j := range v.Data {
			v.Data[j] = r.NormFloat64()
		}
		p = append(p, v)
	}
	for _, b := range g.Buffers(i) {
		v := NewValue[float64](toInts(b.Shape)...)
		for j := range v.Data {
			v.Data[j] = 0.1 * r.NormFloat64()
			if b.Name == "running_var" {
				v.Data[j] = 1 + 0.1*r.Float64()
			}
		}
		p = append(p, v)
	}
	return x, p
}

// paramGrads gives a gradient buffer per parameter of op i in p, nil for
// its buffers.
func paramGrads[T Num](g *dag.Graph, i int, p []*Value[T]) []*Value[T] {
	out := make([]*Value[T], len(p))
	for j := range g.Params(i) {
		out[j] = NewValue[T](p[j].Shape...)
	}
	return out
}

func toInts(s dag.Shape) []int {
	out := make([]int, len(s))
	for i, d := range s {
		out[i] = int(d)
	}
	return out
}

// TestGradientsAgainstFiniteDifferences checks every op's input and parameter
// gradients against central differences of L = Σ w ⊙ y in float64.
func TestGradientsAgainstFiniteDifferences(t *testing.T) {
	for _, c := range opCases {
		t.Run(c.name, func(t *testing.T) {
			g, i := oneOp(t, c)
			k, err := New[float64](g, i, &Pass{Pos: Position{Rows: 3}})
			if err != nil {
				t.Fatal(err)
			}
			r := rand.New(rand.NewSource(int64(len(c.name))))
			x, p := randomValues(g, i, 3, r)
			positive(c, x)
			y, st, err := k.Forward(x, p)
			if err != nil {
				t.Fatal(err)
			}
			w := make([]float64, len(y.Data))
			for j := range w {
				w[j] = r.NormFloat64()
			}
			loss := func() float64 {
				yy, _, err := k.Forward(x, p)
				if err != nil {
					t.Fatal(err)
				}
				s := 0.0
				for j, v := range yy.Data {
					s += w[j] * v
				}
				return s
			}
			gx, gp := grads(x), paramGrads(g, i, p)
			k.Backward(&Value[float64]{Shape: y.Shape, Data: w}, x, p, y, st, gx, gp)
			check := func(what string, vals []float64, analytic []float64) {
				for j := range vals {
					old := vals[j]
					h := 1e-6 * math.Max(1, math.Abs(old))
					vals[j] = old + h
					up := loss()
					vals[j] = old - h
					down := loss()
					vals[j] = old
					num := (up - down) / (2 * h)
					if math.Abs(num-analytic[j]) > 1e-6+1e-5*math.Abs(num) {
						t.Fatalf("%s[%d]: analytic %.10g, finite difference %.10g", what, j, analytic[j], num)
					}
				}
			}
			for j, v := range x {
				if v.Data != nil {
					check(fmt.Sprintf("input %d", j), v.Data, gx[j].Data)
				}
			}
			for j, prm := range g.Params(i) {
				check(prm.Name, p[j].Data, gp[j].Data)
			}
		})
	}
}

func grads(vs []*Value[float64]) []*Value[float64] {
	out := make([]*Value[float64], len(vs))
	for i, v := range vs {
		if v.Data != nil {
			out[i] = NewValue[float64](v.Shape...)
		}
	}
	return out
}

// TestFloat32MatchesFloat64 runs every op's float32 path (Sgemm, strided
// sub-matrices) against the float64 one on the same values.
func TestFloat32MatchesFloat64(t *testing.T) {
	for _, c := range opCases {
		t.Run(c.name, func(t *testing.T) {
			g, i := oneOp(t, c)
			k64, _ := New[float64](g, i, &Pass{Pos: Position{Rows: 3}})
			k32, _ := New[float32](g, i, &Pass{Pos: Position{Rows: 3}})
			x, p := randomValues(g, i, 3, rand.New(rand.NewSource(9)))
			positive(c, x)
			x32, p32 := narrow(x), narrow(p)
			y64, st64, _ := k64.Forward(x, p)
			y32, st32, err := k32.Forward(x32, p32)
			if err != nil {
				t.Fatal(err)
			}
			near(t, "y", y32.Data, y64.Data)
			gy := NewValue[float64](y64.Shape...)
			for j := range gy.Data {
				gy.Data[j] = float64(j%7) - 3
			}
			gx64, gp64 := grads(x), paramGrads(g, i, p)
			gx32, gp32 := narrow(gx64), narrow(gp64)
			k64.Backward(gy, x, p, y64, st64, gx64, gp64)
			k32.Backward(narrow([]*Value[float64]{gy})[0], x32, p32, y32, st32, gx32, gp32)
			for j := range gx64 {
				if gx64[j] != nil {
					near(t, fmt.Sprint("gx", j), gx32[j].Data, gx64[j].Data)
				}
			}
			for j := range g.Params(i) {
				near(t, fmt.Sprint("gp", j), gp32[j].Data, gp64[j].Data)
			}
		})
	}
}

func narrow(vs []*Value[float64]) []*Value[float32] {
	out := make([]*Value[float32], len(vs))
	for i, v := range vs {
		if v == nil {
			continue
		}
		w := &Value[float32]{Shape: v.Shape, Ints: v.Ints}
		if v.Data != nil {
			w.Data = make([]float32, len(v.Data))
			for j, f := range v.Data {
				w.Data[j] = float32(f)
			}
		}
		out[i] = w
	}
	return out
}

func near(t *testing.T, what string, got []float32, want []float64) {
	t.Helper()
	for j := range want {
		if math.Abs(float64(got[j])-want[j]) > 1e-4*(1+math.Abs(want[j])) {
			t.Fatalf("%s[%d]: float32 %v, float64 %v", what, j, got[j], want[j])
		}
	}
}

func init() {
	opCases = append(opCases, opCase{"linear-in_out", `{"name":"x","shape":[3,4],"dtype":"float32"}`, `"op":"linear","inputs":["x"],"attrs":{"out":5,"weight_layout":"in_out"}`})
}

// positive makes a case's float inputs positive (|x| + 0.5) where its op
// needs them so (log, sqrt, fractional powers).
func positive(c opCase, x []*Value[float64]) {
	if !positiveInputs[c.name] {
		return
	}
	for _, v := range x {
		for j := range v.Data {
			v.Data[j] = math.Abs(v.Data[j]) + 0.5
		}
	}
}
