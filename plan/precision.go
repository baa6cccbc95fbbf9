package plan

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/graphpipe/graphpipe/dag"
)

// Precisions are what a plan can be priced and trained in: the matrix
// products' arithmetic, and with it the bytes of the activations, stashes
// and tensors that cross stages.
//
//   - fp32: float32 everywhere (the default).
//   - tf32: float32 storage, matrix products on TF32 tensor cores
//     (PyTorch's allow_tf32).
//   - bf16: autocast's mixed precision: matrix products on bf16 operands
//     with float32 accumulation, activations, stashes and stage edges in
//     bf16 (2 bytes); master weights, gradients and optimizer state in
//     float32, and a bf16 copy of the weights made once a step.
var Precisions = []string{"fp32", "tf32", "bf16"}

// ActivationBytes is the bytes an activation element takes in precision p
// (bf16: 2; fp32 and tf32 store float32).
func ActivationBytes(p string) int64 {
	if p == "bf16" {
		return 2
	}
	return 4
}

// TensorBytes is t's bytes per sample in precision p: a float tensor's
// elements in ActivationBytes, an int32 tensor's (indices, labels) in 4.
func TensorBytes(t *dag.Tensor, p string) int64 {
	if t.DType != dag.Float32 {
		return t.Bytes()
	}
	return t.Shape.Elems() * ActivationBytes(p)
}

// WeightCopyBytes is the bytes per parameter a stage keeps beyond its
// float32 weights and gradients to compute in precision p: the bf16 copy
// of the weights its products read (bf16), none otherwise.
func WeightCopyBytes(p string) int64 {
	if p == "bf16" {
		return 2
	}
	return 0
}

// Rates are a device's peak FLOP/s for matrix products in the precisions
// beyond fp32 (datasheet dense rates for the built-in profiles); 0: the
// device has no such rate (a V100 has neither).
type Rates struct {
	TF32 float64 `json:"tf32,omitempty"`
	BF16 float64 `json:"bf16,omitempty"`
}

// of is the rate for precision p, 0 for none.
func (r Rates) of(p string) float64 {
	switch p {
	case "tf32":
		return r.TF32
	case "bf16":
		return r.BF16
	}
	return 0
}

// Peak is the device's peak FLOP/s for matrix products in precision p
// ("" is fp32: PeakFLOPs), and false where it has no rate for p.
func (d Device) Peak(p string) (float64, bool) {
	if p == "" || p == "fp32" {
		return d.PeakFLOPs, true
	}
	r := d.Rates.of(p)
	return r, r > 0
}

// Has lists the precisions d has a rate for, fp32 first.
func (d Device) Has() []string {
	out := []string{"fp32"}
	for _, p := range Precisions[1:] {
		if _, ok := d.Peak(p); ok {
			out = append(out, p)
		}
	}
	return out
}

// InPrecision is d as its matrix products run in precision p: the peak
// that precision's, and the work at which a kernel reaches half its best
// efficiency grown with it (a kernel's fixed overhead is time, not work).
func (d Device) InPrecision(p string) (Device, error) {
	r, ok := d.Peak(p)
	if !ok {
		return d, &PrecisionError{Device: d.Name, Precision: p, Has: d.Has()}
	}
	if r != d.PeakFLOPs {
		d.HalfWork *= r / d.PeakFLOPs
		d.PeakFLOPs = r
	}
	return d, nil
}

// PrecisionError is a precision a device has no rate for, or no
// precision at all.
type PrecisionError struct {
	Device, Precision string
	Has               []string // the precisions the device has
}

func (e *PrecisionError) Error() string {
	if !slices.Contains(Precisions, e.Precision) {
		return fmt.Sprintf("unknown precision %q (known: %s)", e.Precision, strings.Join(Precisions, ", "))
	}
	return fmt.Sprintf("device %s has no %s rate (it has %s)", e.Device, e.Precision, strings.Join(e.Has, ", "))
}

// CheckPrecision refuses a precision that is not one of Precisions.
func CheckPrecision(p string) error {
	if p == "" || slices.Contains(Precisions, p) {
		return nil
	}
	return &PrecisionError{Precision: p}
}

// validateRates refuses a rate that is not a number of FLOP/s: negative,
// not finite, or absurd (an unknown precision the decoder refuses as an
// unknown field).
func (d Device) validateRates() error {
	for _, p := range Precisions[1:] {
		if r := d.Rates.of(p); !(r >= 0) || math.IsInf(r, 0) || r > maxRate {
			return fmt.Errorf("device profile %q: rates.%s: must be a positive number of FLOP/s up to %g (or absent), got %g", d.Name, p, maxRate, r)
		}
	}
	return nil
}

// maxRate bounds a precision's rate: a million times an H100's bf16 rate,
// far past any device and far from overflowing the sums it enters.
const maxRate = 1e21

// PrecisionName is the precision the plan was priced in: fp32 where the
// plan names none (plans made before precisions were part of plans).
func (p *Plan) PrecisionName() string {
	if p.Precision == "" {
		return "fp32"
	}
	return p.Precision
}

// How attention runs on the device (Options.Attention, Plan.Attention):
// Unfused, its products as GEMMs and its s × s scores stored for the
// backward; or Fused, the scores computed in registers by one kernel (on
// the CUDA cores) and again in the backward, never stored.
const (
	Unfused = "unfused"
	Fused   = "fused"
)

// Attentions are the ways attention can run.
var Attentions = []string{Unfused, Fused}

// CheckAttention refuses what is not one of Attentions ("" is unfused).
func CheckAttention(a string) error {
	if a == "" || slices.Contains(Attentions, a) {
		return nil
	}
	return fmt.Errorf("unknown attention %q (known: %s)", a, strings.Join(Attentions, ", "))
}

// AttentionName is how the plan's attention runs: unfused where the plan
// names none.
func (p *Plan) AttentionName() string {
	if p.Attention == "" {
		return Unfused
	}
	return p.Attention
}
