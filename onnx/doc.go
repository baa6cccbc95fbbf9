// Package onnx imports ONNX models: it reads a ModelProto (with the types
// generated from ONNX's onnx.proto in package onnxpb, and external data
// files beside it) and writes a graphpipe/model@2 dag.Model and the model's
// initial weights.
//
// The contract, for a caller:
//
//  1. ReadFile reads and checks a file: IR version 6 or later, a default-
//     domain opset from 11 to 18, every initializer's dims and data length
//     consistent, external data inside the model's directory. A file it
//     refuses comes back as a *FileError naming the field at fault.
//  2. Import converts the graph. The first axis of every graph input and
//     output (symbolic or fixed) is the batch axis, which graphpipe keeps
//     implicit; Import tracks it through reshapes and transposes (a tensor
//     [s, n·h, d] holds per sample a [s, h, d] tensor), and refuses a node
//     that would mix samples (a softmax or a reduction over the batch, a
//     reshape that moves elements across samples). Shape computations
//     (Shape, Gather, Concat, Unsqueeze, Cast, Constant, ...) are evaluated
//     with the batch as a symbol. Identity, and Dropout with ratio 0,
//     disappear.
//  3. Names: every initializer that becomes a parameter or a buffer keeps
//     its name (for a PyTorch export, its state_dict key), through the op's
//     params map. A weight reached through a Transpose keeps its own name
//     (the op takes it transposed); BatchNormalization's mean and variance
//     become batch_norm's buffers.
//  4. What graphpipe computes as one op is recognised as one: Gemm, and
//     MatMul with an Add of a bias, become linear; the exporter's erf GELU
//     becomes gelu; LayerNormalization layer_norm; a Gather of a weight
//     embedding. Everything else maps onto model@2's ops one to one. The op
//     types it reads are one table (ops.go): per type, its handler, the
//     attributes the handler reads and the opsets it reads them in; a node
//     with another attribute is refused rather than half understood.
//  5. A node it cannot take is a *NodeError naming the node, its op type,
//     domain and opset, and why; Import returns every one (Errors) and no
//     model. With Options.AllowOpaque they become opaque ops priced from
//     their shapes instead, so the model can still be searched.
//  6. Result.WriteWeights streams the weights as safetensors, tensor by
//     tensor from the model file or its external data: a model's weights are
//     never all in memory at once.
//
// The package does no I/O beyond reading the model and its external data
// and writing where it is asked to.
package onnx
