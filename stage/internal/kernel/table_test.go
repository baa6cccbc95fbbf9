package kernel

import (
	"testing"

	"github.com/graphpipe/graphpipe/dag"
)

// TestKernelTable: every op kind of dag has a row, and every row a CPU
// kernel in both precisions and a GPU kernel (opaque, which computes
// nothing, aside); every loss says how the synthetic data labels its
// target.
func TestKernelTable(t *testing.T) {
	for _, k := range dag.Kinds() {
		row, ok := kernels[k]
		switch {
		case !ok:
			t.Errorf("%s: no row", k)
		case row.cpu.f32 == nil || row.cpu.f64 == nil:
			t.Errorf("%s: no CPU kernel", k)
		case row.gpu == nil && k != dag.Opaque:
			t.Errorf("%s: no GPU kernel", k)
		case k.IsLoss() && row.label == nil:
			t.Errorf("%s: a loss without a label", k)
		}
	}
	if len(kernels) != len(dag.Kinds()) {
		t.Errorf("%d rows for %d kinds", len(kernels), len(dag.Kinds()))
	}
}
