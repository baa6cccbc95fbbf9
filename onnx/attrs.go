package onnx

import "strings"

// knownAttrs are the attributes each op type's handler reads or knows to
// be harmless; any other is refused rather than silently ignored (it could
// change what the node computes).
var knownAttrs = map[string]string{
	"Constant":                "value value_float value_floats value_int value_ints",
	"ConstantOfShape":         "value",
	"Shape":                   "start end",
	"Cast":                    "to saturate",
	"Reshape":                 "allowzero",
	"Flatten":                 "axis",
	"Squeeze":                 "axes",
	"Unsqueeze":               "axes",
	"Transpose":               "perm",
	"Concat":                  "axis",
	"Gather":                  "axis",
	"Split":                   "axis split num_outputs",
	"Pad":                     "mode",
	"Mod":                     "fmod",
	"Gemm":                    "alpha beta transA transB",
	"Softmax":                 "axis",
	"ReduceMean":              "axes keepdims noop_with_empty_axes",
	"ReduceSum":               "keepdims noop_with_empty_axes",
	"Dropout":                 "seed",
	"Conv":                    "auto_pad dilations group kernel_shape pads strides",
	"BatchNormalization":      "epsilon momentum training_mode",
	"MaxPool":                 "auto_pad ceil_mode dilations kernel_shape pads storage_order strides",
	"AveragePool":             "auto_pad ceil_mode count_include_pad kernel_shape pads strides dilations",
	"LayerNormalization":      "axis epsilon stash_type",
	"SoftmaxCrossEntropyLoss": "ignore_index reduction",
}

// unknownAttr is the first attribute of n its op type does not have, or "".
func (n *node) unknownAttr() string {
	known := " " + knownAttrs[n.p.GetOpType()] + " "
	for _, a := range n.p.GetAttribute() {
		if !strings.Contains(known, " "+a.GetName()+" ") {
			return a.GetName()
		}
	}
	return ""
}
