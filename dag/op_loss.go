package dag

// The rows' pieces of the losses: softmax_cross_entropy, mse and
// bce_with_logits, each of a prediction and a target, to a scalar.

// inferCrossEntropy: logits [classes] and an int32 label [] → [].
func inferCrossEntropy(f *inferer) (Shape, DType) {
	f.float(0)
	f.int32(1)
	if f.rank(0, 1) {
		f.bounded(1, f.in[0].Shape[0], "the logits' classes")
	}
	f.rank(1, 0)
	return Shape{}, Float32
}

// inferElementLoss is mse's and bce_with_logits': a prediction and a target
// of one shape → [].
func inferElementLoss(f *inferer) (Shape, DType) {
	f.allFloat()
	f.sameShapes()
	return Shape{}, Float32
}
