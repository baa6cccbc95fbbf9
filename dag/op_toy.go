//go:build toyop

package dag

// Scale2 is a toy operator, compiled in only with the toyop build tag: y =
// 2x, elementwise, of model@2. It is what docs/adding-an-op.md adds, one row
// of this package's table; stage's TestToyOp runs it end to end.
const Scale2 Kind = "scale2"

func init() {
	kinds[Scale2] = kindSpec{since: 2, minIn: 1, maxIn: 1, infer: inferSame, cost: perElement(1, 1, nil)}
}
