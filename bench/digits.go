package bench

import (
	"compress/gzip"
	"encoding/csv"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"strconv"

	"github.com/graphpipe/graphpipe/tensor"
)

// scikit-learn's handwritten digits (UCI's optdigits test set: 1797 8×8
// images of 0-9, each pixel a count 0..16), as Debian's python3-sklearn
// ships them: real data nobody here wrote, for the selective backprop
// section.

// DigitsPaths are where Debian's and pip's scikit-learn keep the digits.
var DigitsPaths = []string{
	"/usr/lib/python3/dist-packages/sklearn/datasets/data/digits.csv.gz",
	"/usr/local/lib/python3/dist-packages/sklearn/datasets/data/digits.csv.gz",
}

// digits is the dataset: pixels scaled to [0, 1], labels.
type digits struct {
	x []float32 // [n, 64]
	y []int32   // [n]
}

const digitPixels = 64

// findDigits is the first of DigitsPaths there, "" for none.
func findDigits() string {
	for _, p := range DigitsPaths {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return ""
}

// loadDigits reads digits.csv.gz: a row per image, 64 pixel counts and the
// label.
func loadDigits(path string) (*digits, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	z, err := gzip.NewReader(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	r := csv.NewReader(z)
	r.FieldsPerRecord = digitPixels + 1
	d := &digits{}
	for {
		rec, err := r.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		for i, s := range rec {
			v, err := strconv.ParseFloat(s, 64)
			if err != nil || v < 0 || i < digitPixels && v > 16 || i == digitPixels && (v > 9 || v != float64(int(v))) {
				return nil, fmt.Errorf("%s: line %d: field %d is %q", path, len(d.y)+1, i+1, s)
			}
			if i < digitPixels {
				d.x = append(d.x, float32(v/16))
			} else {
				d.y = append(d.y, int32(v))
			}
		}
	}
	if len(d.y) == 0 {
		return nil, fmt.Errorf("%s: no images", path)
	}
	return d, nil
}

// split shuffles the images by seed and returns the first train of them
// and the rest.
func (d *digits) split(seed uint64, train int) (*digits, *digits) {
	order := rand.New(rand.NewPCG(seed, 0)).Perm(len(d.y))
	a, b := &digits{}, &digits{}
	for k, i := range order {
		to := a
		if k >= train {
			to = b
		}
		to.x = append(to.x, d.x[i*digitPixels:(i+1)*digitPixels]...)
		to.y = append(to.y, d.y[i])
	}
	return a, b
}

// write writes the images as a dataset graphpipe's --data reads: x and
// label, samples on the first axis.
func (d *digits) write(path string) error {
	data, err := tensor.EncodeSafetensors([]tensor.Named{
		{Name: "x", Shape: []int{len(d.y), digitPixels}, F32: d.x},
		{Name: "label", Shape: []int{len(d.y)}, I32: d.y},
	}, nil)
	if err != nil {
		return err
	}
	return os.WriteFile(path, data, 0o644)
}

// digitsMLP is a classifier of the digits: layers linear+relu layers of
// width hidden and a linear head, trained at batch: a model whose backward
// (two products a layer) outweighs its forward.
func digitsMLP(layers, hidden, batch int) string {
	s := fmt.Sprintf(`{"format":"graphpipe/model@1","name":"digits-mlp","batch_size":%d,"seed":1,
 "inputs":[{"name":"x","shape":[64],"dtype":"float32"},{"name":"label","shape":[],"dtype":"int32","range":[0,10]}],
 "ops":[`, batch)
	in := "x"
	for l := 0; l < layers; l++ {
		s += fmt.Sprintf(`{"name":"fc%d","op":"linear","inputs":[%q],"attrs":{"out":%d}},{"name":"relu%d","op":"relu","inputs":["fc%d"]},`, l, in, hidden, l, l)
		in = fmt.Sprintf("relu%d", l)
	}
	return s + fmt.Sprintf(`{"name":"head","op":"linear","inputs":[%q],"attrs":{"out":10}},{"name":"loss","op":"softmax_cross_entropy","inputs":["head","label"]}]}`, in)
}
