package kernel

import (
	"math"
	"testing"
)

// model@2's tensor ops, for the finite-difference and float32 checks.
var tensorCases = []opCase{
	{"reshape", `{"name":"x","shape":[2,6],"dtype":"float32"}`, `"op":"reshape","inputs":["x"],"attrs":{"shape":[3,4]}`},
	{"transpose", `{"name":"x","shape":[2,3,4],"dtype":"float32"}`, `"op":"transpose","inputs":["x"],"attrs":{"perm":[2,0,1]}`},
	{"softmax-last", `{"name":"x","shape":[3,5],"dtype":"float32"}`, `"op":"softmax","inputs":["x"]`},
	{"softmax-first", `{"name":"x","shape":[4,3],"dtype":"float32"}`, `"op":"softmax","inputs":["x"],"attrs":{"axis":0}`},
	{"slice", `{"name":"x","shape":[3,7],"dtype":"float32"}`, `"op":"slice","inputs":["x"],"attrs":{"axis":1,"start":-6,"end":7,"step":2}`},
	{"pad", `{"name":"x","shape":[2,3],"dtype":"float32"}`, `"op":"pad","inputs":["x"],"attrs":{"pads":[1,0,0,2],"value":0.5}`},
	{"matmul-2", `{"name":"a","shape":[3,4],"dtype":"float32"},{"name":"b","shape":[4,2],"dtype":"float32"}`, `"op":"matmul","inputs":["a","b"]`},
	{"matmul-3", `{"name":"a","shape":[2,3,4],"dtype":"float32"},{"name":"b","shape":[2,4,5],"dtype":"float32"}`, `"op":"matmul","inputs":["a","b"]`},
	{"add-broadcast", `{"name":"x","shape":[2,3],"dtype":"float32"},{"name":"y","shape":[3],"dtype":"float32"}`, `"op":"add","inputs":["x","y"]`},
	{"add-three", `{"name":"x","shape":[2,1],"dtype":"float32"},{"name":"y","shape":[1,3],"dtype":"float32"},{"name":"z","shape":[3],"dtype":"float32"}`, `"op":"add","inputs":["x","y","z"]`},
	{"sub-broadcast", `{"name":"x","shape":[2,1],"dtype":"float32"},{"name":"y","shape":[1,3],"dtype":"float32"}`, `"op":"sub","inputs":["x","y"]`},
	{"mul-broadcast", `{"name":"x","shape":[3],"dtype":"float32"},{"name":"y","shape":[2,3],"dtype":"float32"}`, `"op":"mul","inputs":["x","y"]`},
	{"div-broadcast", `{"name":"x","shape":[2,3],"dtype":"float32"},{"name":"y","shape":[2,1],"dtype":"float32"}`, `"op":"div","inputs":["x","y"]`},
	{"add-scalar", `{"name":"x","shape":[4],"dtype":"float32"}`, `"op":"add","inputs":["x"],"attrs":{"scalar":1.5}`},
	{"mul-scalar", `{"name":"x","shape":[4],"dtype":"float32"}`, `"op":"mul","inputs":["x"],"attrs":{"scalar":-2}`},
	{"sub-scalar", `{"name":"x","shape":[4],"dtype":"float32"}`, `"op":"sub","inputs":["x"],"attrs":{"scalar":0.5}`},
	{"rsub-scalar", `{"name":"x","shape":[4],"dtype":"float32"}`, `"op":"sub","inputs":["x"],"attrs":{"scalar":1,"reverse":true}`},
	{"div-scalar", `{"name":"x","shape":[4],"dtype":"float32"}`, `"op":"div","inputs":["x"],"attrs":{"scalar":2.5}`},
	{"rdiv-scalar", `{"name":"x","shape":[4],"dtype":"float32"}`, `"op":"div","inputs":["x"],"attrs":{"scalar":3,"reverse":true}`},
	{"pow-2", `{"name":"x","shape":[4],"dtype":"float32"}`, `"op":"pow","inputs":["x"],"attrs":{"exponent":2}`},
	{"pow-3", `{"name":"x","shape":[4],"dtype":"float32"}`, `"op":"pow","inputs":["x"],"attrs":{"exponent":3}`},
	{"exp", `{"name":"x","shape":[4],"dtype":"float32"}`, `"op":"exp","inputs":["x"]`},
	{"neg", `{"name":"x","shape":[4],"dtype":"float32"}`, `"op":"neg","inputs":["x"]`},
	{"erf", `{"name":"x","shape":[4],"dtype":"float32"}`, `"op":"erf","inputs":["x"]`},
	{"reduce_mean", `{"name":"x","shape":[2,3,4],"dtype":"float32"}`, `"op":"reduce_mean","inputs":["x"],"attrs":{"axes":[0,2]}`},
	{"reduce_mean-keep", `{"name":"x","shape":[2,3],"dtype":"float32"}`, `"op":"reduce_mean","inputs":["x"],"attrs":{"axes":[-1],"keepdims":true}`},
	{"reduce_sum-all", `{"name":"x","shape":[2,3],"dtype":"float32"}`, `"op":"reduce_sum","inputs":["x"]`},
	{"dropout", `{"name":"x","shape":[3,4],"dtype":"float32"}`, `"op":"dropout","inputs":["x"],"attrs":{"p":0.3}`},
	// both regions of each: inputs are normal, the slope 0.5 puts the kinks at −1.5 and 0.5
	{"hard_sigmoid", `{"name":"x","shape":[8],"dtype":"float32"}`, `"op":"hard_sigmoid","inputs":["x"],"attrs":{"alpha":0.5,"beta":0.25}`},
	{"hard_swish", `{"name":"x","shape":[8],"dtype":"float32"}`, `"op":"hard_swish","inputs":["x"]`},
}

// positiveCases need positive inputs (log, sqrt, fractional powers): the
// finite-difference check runs them on |x| + 0.5.
var positiveCases = []opCase{
	{"log", `{"name":"x","shape":[4],"dtype":"float32"}`, `"op":"log","inputs":["x"]`},
	{"sqrt", `{"name":"x","shape":[4],"dtype":"float32"}`, `"op":"sqrt","inputs":["x"]`},
	{"pow-half", `{"name":"x","shape":[4],"dtype":"float32"}`, `"op":"pow","inputs":["x"],"attrs":{"exponent":0.5}`},
}

func init() {
	opCases = append(opCases, tensorCases...)
	opCases = append(opCases, positiveCases...)
	for _, c := range positiveCases {
		positiveInputs[c.name] = true
	}
}

// positiveInputs names the cases whose inputs must be positive.
var positiveInputs = map[string]bool{}

// TestParameterAndConstant: a parameter is the same for every sample and
// its gradient sums the batch's; a constant fills int32 or float values.
func TestParameterAndConstant(t *testing.T) {
	ctx := &Pass{Pos: Position{Rows: 3}}
	p := &Value[float64]{Shape: []int{2}, Data: []float64{1, 2}}
	k := &parameter[float64]{ctx: ctx}
	y, _, err := k.Forward(nil, []*Value[float64]{p})
	if err != nil || len(y.Data) != 6 || y.Data[4] != 1 || y.Data[5] != 2 {
		t.Fatalf("parameter forward %v, %v", y, err)
	}
	gp := []*Value[float64]{NewValue[float64](2)}
	k.Backward(&Value[float64]{Shape: []int{3, 2}, Data: []float64{1, 2, 3, 4, 5, 6}}, nil, []*Value[float64]{p}, y, nil, nil, gp)
	if gp[0].Data[0] != 9 || gp[0].Data[1] != 12 {
		t.Fatalf("parameter gradient %v, want [9 12]", gp[0].Data)
	}
	c := &constant[float32]{shape: []int{2}, values: []float64{4, 7}, ints: true, ctx: ctx}
	cy, _, _ := c.Forward(nil, nil)
	if len(cy.Ints) != 6 || cy.Ints[3] != 7 || cy.Data != nil {
		t.Fatalf("int constant %+v", cy)
	}
}

// TestDropoutMask: the mask is a function of (seed, step, op, sample,
// element): the same batch split into two micro-batches draws the same; a
// new step draws another; about 1−p is kept, scaled by 1/(1−p).
func TestDropoutMask(t *testing.T) {
	const n, per, p = 8, 5000, 0.3
	x := NewValue[float32](n, per)
	for i := range x.Data {
		x.Data[i] = 1
	}
	run := func(step, sample int, v *Value[float32]) []float32 {
		k := &dropout[float32]{op: "drop", p: p, ctx: &Pass{Seed: 7, Pos: Position{Step: step, Sample: sample}}}
		y, _, _ := k.Forward([]*Value[float32]{v}, nil)
		return y.Data
	}
	whole := run(3, 0, x)
	half := append(run(3, 0, SliceRows(x, 0, 4)), run(3, 4, SliceRows(x, 4, 8))...)
	kept := 0
	for i := range whole {
		if whole[i] != half[i] {
			t.Fatalf("element %d: %v as one micro-batch, %v as two", i, whole[i], half[i])
		}
		if whole[i] != 0 {
			kept++
			if math.Abs(float64(whole[i])-1/(1-p)) > 1e-6 {
				t.Fatalf("kept value %v, want %v", whole[i], 1/(1-p))
			}
		}
	}
	if frac := float64(kept) / float64(len(whole)); math.Abs(frac-(1-p)) > 0.01 {
		t.Fatalf("kept %.4f of the elements, want %.2f", frac, 1-p)
	}
	other := run(4, 0, x)
	same := 0
	for i := range whole {
		if (whole[i] == 0) == (other[i] == 0) {
			same++
		}
	}
	if same == len(whole) {
		t.Fatal("step 4 drew step 3's mask")
	}
}
