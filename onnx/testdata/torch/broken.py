"""Writes the broken ONNX files that `graphpipe import` must refuse cleanly, and their MANIFEST.json.

usage: /usr/bin/python3 onnx/testdata/torch/broken.py [DIR]     (default: onnx/testdata/broken)

Every case starts from one of two tiny valid models built with onnx.helper (ir_version 8, opset 17, the
same as the exported test models), which are written too as controls that the importer must accept:

  valid_conv.onnx  image [batch, 3, 4, 4] -> Conv "conv" (conv.weight [2, 3, 3, 3], conv.bias [2], pads 1)
                   -> Relu "relu" -> Flatten "flat" -> Gemm "fc" (fc.weight [10, 32], fc.bias [10],
                   transB 1) -> output [batch, 10]                          (--loss softmax_cross_entropy)
  valid_mlp.onnx   x [batch, 4] -> MatMul "matmul" (fc.weight [4, 3]) -> Add "add" (fc.bias [3])
                   -> output [batch, 3]                                     (--loss mse)

and breaks one thing. MANIFEST.json lists, per file, what is broken and `expect`: the substrings that the
importer's one-line error must all contain (a node's name in double quotes, as graphpipe's refusals quote
names, an initializer's or input's name, or the field). Every refusal is exit status 2, one line, and
starts with the file's path as graphpipe's refusals do ("model.json: op ..."); for files that do not parse
as an ONNX model at all, the path is all `expect` asks for. `onnx_checker` records whether onnx 1.12's
own checker (onnx.checker.check_model, full_check where it can run) refuses the file too: several
cases are valid ONNX that graphpipe cannot train (a moving batch axis, a shape computed from an input,
If/Loop, a non-float output), so an importer must not rely on a generic checker alone.

Everything is deterministic: running this again rewrites the same bytes.
"""
import json
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper

IR, OPSET = 8, 17
F = TensorProto.FLOAT


def rng():
    return np.random.RandomState(0)


def init(name, shape, dtype=np.float32, seed=0):
    a = np.random.RandomState(seed).uniform(-0.5, 0.5, size=shape).astype(dtype)
    t = TensorProto(name=name, dims=list(shape), data_type=F)
    t.raw_data = a.tobytes()
    return t


def vinfo(name, elem=F, shape=("batch", 3, 4, 4)):
    return helper.make_tensor_value_info(name, elem, list(shape))


def model(nodes, inputs, outputs, inits, opsets=None, ir=IR, name="g"):
    g = helper.make_graph(nodes, name, inputs, outputs, initializer=inits)
    m = helper.make_model(g, opset_imports=opsets or [helper.make_opsetid("", OPSET)],
                          producer_name="graphpipe-broken")
    m.ir_version = ir
    return m


def conv_parts():
    """The nodes, inputs, outputs and initializers of valid_conv (fresh objects each call)."""
    nodes = [
        helper.make_node("Conv", ["image", "conv.weight", "conv.bias"], ["h1"], name="conv",
                         kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[1, 1], dilations=[1, 1], group=1),
        helper.make_node("Relu", ["h1"], ["h2"], name="relu"),
        helper.make_node("Flatten", ["h2"], ["h3"], name="flat", axis=1),
        helper.make_node("Gemm", ["h3", "fc.weight", "fc.bias"], ["output"], name="fc", transB=1),
    ]
    inits = [init("conv.weight", (2, 3, 3, 3), seed=1), init("conv.bias", (2,), seed=2),
             init("fc.weight", (10, 32), seed=3), init("fc.bias", (10,), seed=4)]
    return nodes, [vinfo("image")], [vinfo("output", shape=("batch", 10))], inits


def conv(**kw):
    n, i, o, t = conv_parts()
    return model(n, i, o, t, **kw)


def mlp_parts():
    nodes = [helper.make_node("MatMul", ["x", "fc.weight"], ["h"], name="matmul"),
             helper.make_node("Add", ["h", "fc.bias"], ["output"], name="add")]
    inits = [init("fc.weight", (4, 3), seed=5), init("fc.bias", (3,), seed=6)]
    return nodes, [vinfo("x", shape=("batch", 4))], [vinfo("output", shape=("batch", 3))], inits


def mlp(**kw):
    n, i, o, t = mlp_parts()
    return model(n, i, o, t, **kw)


def tensor(m, name):
    return next(t for t in m.graph.initializer if t.name == name)


def node(m, name):
    return next(n for n in m.graph.node if n.name == name)


def q(s):
    """A name as graphpipe's refusals quote it."""
    return '"%s"' % s


# ---- protobuf by hand -------------------------------------------------------------------------------

def varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def field(num, wire, payload):
    return varint(num << 3 | wire) + payload


def ld(num, body, declared=None):
    """A length-delimited field whose length prefix says `declared` (default: the truth)."""
    return field(num, 2, varint(len(body) if declared is None else declared) + body)


def parses(blob):
    try:
        onnx.load_model_from_string(blob)
        return True
    except Exception:  # noqa: BLE001
        return False


def truncated(frac):
    blob = conv().SerializeToString()
    cut = max(1, int(len(blob) * frac))
    while parses(blob[:cut]):  # a cut at a field boundary still parses; move into the next field
        cut += 1
    return blob[:cut], cut, len(blob)


# ---- the cases ---------------------------------------------------------------------------------------

CASES = []  # (file, what, expect, thing) where thing is a ModelProto or bytes
AUX = {}    # extra files next to the cases (external data), name -> bytes


def case(file, what, expect, thing):
    CASES.append((file, what, expect, thing))


def build():
    # Files that are not a model.
    for frac in (0.02, 0.1, 0.5, 0.9, 0.999):
        blob, cut, total = truncated(frac)
        f = "truncated_%d.onnx" % cut
        case(f, "valid_conv.onnx cut after %d of its %d bytes (inside a field)" % (cut, total), [f], blob)
    case("random_bytes.onnx", "2048 random bytes (seed 0)", ["random_bytes.onnx"],
         rng().randint(0, 256, 2048).astype(np.uint8).tobytes())
    case("empty.onnx", "an empty file (which protobuf parses as a ModelProto with every field unset: no graph, "
         "ir_version 0)", ["empty.onnx"], b"")
    case("text_not_protobuf.onnx", "a text file (JSON) renamed .onnx", ["text_not_protobuf.onnx"],
         b'{"format": "graphpipe/model@2", "note": "not an ONNX file"}\n')

    # Hand-crafted length prefixes.
    head = field(1, 0, varint(IR)) + ld(8, ld(1, b"") + field(2, 0, varint(OPSET)))
    g = head + ld(7, ld(5, b"conv.weight"), declared=3 << 30) + b"\x00" * 16
    case("huge_length_graph.onnx", "ModelProto.graph's length prefix declares 3 GiB; the file ends 16 bytes later",
         ["huge_length_graph.onnx"], g)
    t = ld(8, b"conv.weight") + field(2, 0, varint(F)) + field(1, 0, varint(2)) + field(1, 0, varint(3))
    raw = field(9, 2, varint(2 << 30))  # raw_data's tag and length prefix; 8 bytes of it follow
    init_len = len(t) + len(raw) + (2 << 30)
    init_head = field(5, 2, varint(init_len))  # the initializer's tag and (consistent) length
    graph_len = len(init_head) + init_len
    blob = head + field(7, 2, varint(graph_len)) + init_head + t + raw + b"\x00" * 8
    case("huge_length_raw_data.onnx", "an initializer's raw_data declares 2 GiB (and the graph and initializer "
         "lengths around it agree with that lie); the file ends 8 bytes later", ["huge_length_raw_data.onnx"], blob)

    # Nodes.
    m = conv()
    node(m, "relu").op_type = "FooBar"
    node(m, "relu").name = "mystery"
    case("unknown_op.onnx", "node \"mystery\" has op_type FooBar, no ONNX operator", [q("mystery"), "FooBar"], m)

    m = conv(opsets=[helper.make_opsetid("", OPSET), helper.make_opsetid("com.example", 1)])
    node(m, "relu").domain = "com.example"
    node(m, "relu").name = "custom"
    case("custom_domain.onnx", "node \"custom\" is Relu of domain com.example (imported at version 1)",
         [q("custom"), "com.example"], m)

    m = conv()
    m.graph.initializer.remove(tensor(m, "conv.weight"))
    case("missing_initializer.onnx", "node \"conv\" reads conv.weight, which no initializer, input or node gives",
         [q("conv"), q("conv.weight")], m)

    m = mlp()
    node(m, "add").input[0] = "nowhere"
    case("undefined_input.onnx", "node \"add\" reads the tensor \"nowhere\", which nothing produces",
         [q("add"), q("nowhere")], m)

    for dt, tname, vals in ((TensorProto.INT8, "int8", None), (TensorProto.STRING, "string", None),
                            (TensorProto.DOUBLE, "double", None)):
        m = conv()
        t = tensor(m, "conv.weight")
        t.ClearField("raw_data")
        t.data_type = dt
        if dt == TensorProto.INT8:
            t.raw_data = np.arange(54, dtype=np.int8).tobytes()
        elif dt == TensorProto.STRING:
            t.string_data.extend([b"w%d" % i for i in range(54)])
        else:
            t.raw_data = np.linspace(-1, 1, 54).astype(np.float64).tobytes()
        case("weight_dtype_%s.onnx" % tname, "initializer conv.weight (Conv's weight) is %s, not float" % tname,
             [q("conv.weight")], m)

    m = conv()
    t = tensor(m, "fc.weight")
    t.raw_data = t.raw_data[:-100]
    case("raw_data_short.onnx", "initializer fc.weight has dims [10, 32] (1280 bytes of float) but 1180 bytes of "
         "raw_data", [q("fc.weight")], m)
    m = conv()
    t = tensor(m, "conv.bias")
    t.raw_data = t.raw_data + b"\x00\x00\x80\x3f"
    case("raw_data_long.onnx", "initializer conv.bias has dims [2] but 12 bytes of raw_data", [q("conv.bias")], m)
    m = conv()
    t = tensor(m, "fc.bias")
    t.ClearField("raw_data")
    t.float_data.extend([0.5] * 7)
    case("float_data_short.onnx", "initializer fc.bias has dims [10] but 7 float_data values",
         [q("fc.bias")], m)

    m = conv()
    t = tensor(m, "conv.weight")
    del t.dims[:]
    t.dims.extend([-2, 3, 3, 3])
    case("negative_dim_initializer.onnx", "initializer conv.weight has dims [-2, 3, 3, 3]", [q("conv.weight")], m)
    m = conv()
    t = tensor(m, "conv.weight")
    del t.dims[:]
    t.dims.extend([0, 3, 3, 3])
    t.raw_data = b""
    case("zero_dim_initializer.onnx", "initializer conv.weight has dims [0, 3, 3, 3] (no elements; raw_data empty, "
         "which is consistent): a conv with no output channels", [q("conv.weight")], m)
    m = conv()
    m.graph.input[0].type.tensor_type.shape.dim[2].dim_value = -4
    case("negative_dim_input.onnx", "graph input image has shape [batch, 3, -4, 4]", [q("image")], m)
    m = conv()
    m.graph.input[0].type.tensor_type.shape.dim[1].dim_value = 0
    case("zero_dim_input.onnx", "graph input image has shape [batch, 0, 4, 4]", [q("image")], m)

    m = conv()
    t = tensor(m, "fc.weight")
    del t.dims[:]
    t.dims.extend([1 << 20, 1 << 20])
    t.raw_data = t.raw_data[:64]
    case("huge_dims_initializer.onnx", "initializer fc.weight declares dims [2^20, 2^20] (2^40 elements, 4 TiB) "
         "with 64 bytes of raw_data: refused without allocating", [q("fc.weight")], m)
    m = conv()
    t = tensor(m, "fc.weight")
    del t.dims[:]
    t.dims.extend([1 << 32, 1 << 32, 1 << 32])
    t.raw_data = t.raw_data[:64]
    case("overflow_dims_initializer.onnx", "initializer fc.weight declares dims [2^32, 2^32, 2^32]: the element "
         "count overflows int64", [q("fc.weight")], m)
    m = conv()
    d = m.graph.input[0].type.tensor_type.shape.dim
    d[2].dim_value = 1 << 20
    d[3].dim_value = 1 << 20
    case("huge_dims_input.onnx", "graph input image declares [batch, 3, 2^20, 2^20] (3·2^40 elements per "
         "sample)", [q("image")], m)

    # Shapes graphpipe cannot resolve or represent.
    n, i, o, t = mlp_parts()
    n.append(helper.make_node("Reshape", ["output", "shape"], ["out2"], name="reshape"))
    m = model(n, i + [helper.make_tensor_value_info("shape", TensorProto.INT64, [2])],
              [vinfo("out2", shape=("batch", 3))], t)
    case("reshape_shape_from_input.onnx", "node \"reshape\" takes its target shape from the graph input \"shape\" "
         "(known only at run time)", [q("reshape")], m)

    n, i, o, t = mlp_parts()
    n.append(helper.make_node("Transpose", ["output"], ["out2"], name="transpose", perm=[1, 0]))
    m = model(n, i, [vinfo("out2", shape=(3, "batch"))], t)
    case("transpose_batch_axis.onnx", "node \"transpose\" (perm [1, 0]) moves the batch axis to axis 1, "
         "and the graph's output has it there", [q("transpose")], m)

    n, i, o, t = mlp_parts()
    n.append(helper.make_node("Gather", ["output", "idx"], ["out2"], name="gather", axis=1))
    m = model(n, i + [helper.make_tensor_value_info("idx", TensorProto.INT64, ["batch", 2])],
              [vinfo("out2", shape=("batch", "batch", 2))], t)
    case("gather_activation_input_indices.onnx", "node \"gather\" gathers from an activation (not a weight) at "
         "indices from the graph input \"idx\"", [q("gather")], m)

    n, i, o, t = conv_parts()
    del t[0]
    t.insert(0, init("conv.weight", (2, 27), seed=1))
    case("conv_weight_rank.onnx", "node \"conv\"'s weight conv.weight has rank 2 ([2, 27]), not 4",
         [q("conv")], model(n, i, o, t))
    n, i, o, t = conv_parts()
    del t[0]
    t.insert(0, init("conv.weight", (2, 5, 3, 3), seed=1))
    case("conv_channel_mismatch.onnx", "node \"conv\"'s weight is [2, 5, 3, 3] but its input has 3 channels",
         [q("conv")], model(n, i, o, t))
    n, i, o, t = conv_parts()
    t[2] = init("fc.weight", (10, 31), seed=3)
    case("gemm_shape_mismatch.onnx", "node \"fc\"'s weight fc.weight is [10, 31] but its input has 32 features",
         [q("fc")], model(n, i, o, t))

    # Graph structure.
    n, i, o, t = mlp_parts()
    n = [n[0], helper.make_node("Add", ["h", "c2"], ["c1"], name="cyc1"),
         helper.make_node("Relu", ["c1"], ["c2"], name="cyc2"),
         helper.make_node("Add", ["c2", "fc.bias"], ["output"], name="add")]
    case("cycle.onnx", "nodes \"cyc1\" and \"cyc2\" read each other's outputs", [q("cyc1"), q("cyc2")],
         model(n, i, o, t))

    n, i, o, t = mlp_parts()
    n = [n[0], helper.make_node("Relu", ["h"], ["h2"], name="relu_a"),
         helper.make_node("Tanh", ["h"], ["h2"], name="tanh_b"),
         helper.make_node("Add", ["h2", "fc.bias"], ["output"], name="add")]
    case("duplicate_output.onnx", "nodes \"relu_a\" and \"tanh_b\" both produce the tensor \"h2\"", [q("h2")],
         model(n, i, o, t))

    n, i, o, t = mlp_parts()
    t.append(init("fc.bias", (3,), seed=7))
    case("duplicate_initializer.onnx", "two initializers are named fc.bias", [q("fc.bias")], model(n, i, o, t))

    n = [helper.make_node("Gemm", ["const_in", "fc.weight", "fc.bias"], ["output"], name="fc")]
    t = [init("const_in", (1, 4), seed=8), init("fc.weight", (3, 4), seed=5), init("fc.bias", (3,), seed=6)]
    case("no_inputs.onnx", "the graph has no inputs (its one node reads only initializers)", ["input"],
         model(n, [], [vinfo("output", shape=(1, 3))], t))

    n, i, o, t = mlp_parts()
    case("no_outputs.onnx", "the graph declares no outputs", ["output"], model(n, i, [], t))

    n, i, o, t = mlp_parts()
    case("output_not_produced.onnx", "the graph output \"ghost\" is produced by no node",
         [q("ghost")], model(n, i, [vinfo("ghost", shape=("batch", 3))], t))

    n, i, o, t = mlp_parts()
    n.append(helper.make_node("ArgMax", ["output"], ["pred"], name="argmax", axis=1, keepdims=0))
    case("int_output.onnx", "the graph output \"pred\" is int64 (an ArgMax), not float",
         [q("pred")], model(n, i, [helper.make_tensor_value_info("pred", TensorProto.INT64, ["batch"])], t))

    n, i, o, t = mlp_parts()
    case("string_input.onnx", "graph input x is declared of type string", [q("x")],
         model(n, [helper.make_tensor_value_info("x", TensorProto.STRING, ["batch", 4])], o, t))
    n, i, o, t = mlp_parts()
    case("double_input.onnx", "graph input x is float64 (graphpipe computes in float32; int inputs are ids)",
         [q("x")], model(n, [helper.make_tensor_value_info("x", TensorProto.DOUBLE, ["batch", 4])], o, t))

    # Versions.
    case("ir_version_3.onnx", "ir_version 3 (ONNX 1.0; the importer reads 7 and later)", ["ir_version"], conv(ir=3))
    case("opset_9.onnx", "the default domain is imported at opset 9, too old",
         ["opset", "9"], conv(opsets=[helper.make_opsetid("", 9)]))
    case("opset_99.onnx", "the default domain is imported at opset 99, newer than any ONNX",
         ["opset", "99"], conv(opsets=[helper.make_opsetid("", 99)]))
    case("no_default_opset.onnx", "opset_import names only com.example, not the default domain",
         ["opset"], conv(opsets=[helper.make_opsetid("com.example", 1)]))

    # Attributes.
    m = conv()
    c = node(m, "conv")
    a = next(x for x in c.attribute if x.name == "pads")
    del a.ints[:]
    a.ints.extend(range(1000))
    case("huge_attribute_list.onnx", "node \"conv\"'s pads attribute holds 1000 ints (a 2-D Conv has 4)",
         [q("conv"), "pads"], m)
    m = conv()
    r = node(m, "relu")
    r.attribute.extend([helper.make_attribute("a%d" % k, k) for k in range(300)])
    case("many_attributes.onnx", "node \"relu\" carries 300 attributes a0..a299 that Relu does not have",
         [q("relu")], m)
    m = conv()
    c = node(m, "conv")
    a = next(x for x in c.attribute if x.name == "kernel_shape")
    c.attribute.remove(a)
    c.attribute.append(helper.make_attribute("kernel_shape", 3.0))
    case("attribute_wrong_type.onnx", "node \"conv\"'s kernel_shape is a float, not a list of ints",
         [q("conv"), "kernel_shape"], m)

    inner = None
    for k in range(200):
        body = helper.make_graph([inner] if inner else [], "nest%d" % k, [], [])
        inner = helper.make_node("Identity", [], [], name="n%d" % k, body=body)
    m = conv()
    node(m, "relu").attribute.append(helper.make_attribute("body", inner.attribute[0].g))
    case("deeply_nested_attribute.onnx", "node \"relu\" carries a graph attribute nesting 200 levels of graphs "
         "inside graph attributes (protobuf recursion; a parser must bound it or refuse the attribute)",
         ["deeply_nested_attribute.onnx"], m)

    # Subgraphs.
    n, i, o, t = mlp_parts()
    then_g = helper.make_graph([helper.make_node("Relu", ["output"], ["t_out"], name="then_relu")], "then", [],
                               [vinfo("t_out", shape=("batch", 3))])
    else_g = helper.make_graph([helper.make_node("Tanh", ["output"], ["e_out"], name="else_tanh")], "else", [],
                               [vinfo("e_out", shape=("batch", 3))])
    n.append(helper.make_node("If", ["flag"], ["out2"], name="if", then_branch=then_g, else_branch=else_g))
    m = model(n, i + [helper.make_tensor_value_info("flag", TensorProto.BOOL, [])],
              [vinfo("out2", shape=("batch", 3))], t)
    case("if_subgraph.onnx", "node \"if\" is an If with then/else subgraphs", [q("if")], m)

    n, i, o, t = mlp_parts()
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"], name="loop_cond"),
         helper.make_node("Relu", ["carried"], ["carried_out"], name="loop_relu")], "body",
        [helper.make_tensor_value_info("iter", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []), vinfo("carried", shape=("batch", 3))],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []), vinfo("carried_out", shape=("batch", 3))])
    t += [helper.make_tensor("trip", TensorProto.INT64, [], [3]), helper.make_tensor("cond", TensorProto.BOOL, [], [True])]
    n.append(helper.make_node("Loop", ["trip", "cond", "output"], ["out2"], name="loop", body=body))
    case("loop_subgraph.onnx", "node \"loop\" is a Loop with a body subgraph", [q("loop")],
         model(n, i, [vinfo("out2", shape=("batch", 3))], t))

    # External data.
    def external(m, name, location, offset=None, length=None):
        t = tensor(m, name)
        t.ClearField("raw_data")
        t.data_location = TensorProto.EXTERNAL
        for k, v in (("location", location), ("offset", offset), ("length", length)):
            if v is not None:
                e = t.external_data.add()
                e.key, e.value = k, str(v)
        return m

    case("external_missing.onnx", "initializer conv.weight's data lies in external file "
         "\"external_missing.bin\", which does not exist", [q("conv.weight"), "external_missing.bin"],
         external(conv(), "conv.weight", "external_missing.bin"))
    AUX["external_short.bin"] = np.arange(25, dtype=np.float32).tobytes()  # 100 bytes
    case("external_offset_past_end.onnx", "initializer conv.weight's external data starts at offset 4096 of "
         "external_short.bin (100 bytes)", [q("conv.weight")],
         external(conv(), "conv.weight", "external_short.bin", offset=4096, length=216))
    case("external_length_past_end.onnx", "initializer conv.weight's external data is 216 bytes (its dims "
         "[2, 3, 3, 3]) at offset 0 of external_short.bin, which has 100", [q("conv.weight")],
         external(conv(), "conv.weight", "external_short.bin", offset=0, length=216))
    case("external_length_wrong.onnx", "initializer conv.bias's external data (8 bytes wanted for dims [2]) is "
         "given length 12, within external_short.bin", [q("conv.bias")],
         external(conv(), "conv.bias", "external_short.bin", offset=0, length=12))
    case("external_negative_offset.onnx", "initializer conv.weight's external offset is \"-8\"",
         [q("conv.weight")], external(conv(), "conv.weight", "external_short.bin", offset=-8, length=216))
    case("external_escape.onnx", "initializer conv.weight's external location is \"../../etc/passwd\", outside "
         "the model's directory", [q("conv.weight"), "../../etc/passwd"],
         external(conv(), "conv.weight", "../../etc/passwd"))
    case("external_absolute.onnx", "initializer conv.weight's external location is the absolute path "
         "\"/etc/passwd\"", [q("conv.weight"), "/etc/passwd"], external(conv(), "conv.weight", "/etc/passwd"))


def check(path):
    """What onnx's checker says of the file: "refuses", "accepts" or "unparseable"."""
    with open(path, "rb") as fh:
        blob = fh.read()
    try:
        onnx.load_model_from_string(blob)
    except Exception:  # noqa: BLE001
        return "unparseable"
    try:
        onnx.checker.check_model(path)
        onnx.checker.check_model(path, full_check=True)
        return "accepts"
    except Exception:  # noqa: BLE001
        return "refuses"


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "broken")
    out = os.path.normpath(out)
    os.makedirs(out, exist_ok=True)
    build()
    controls = [("valid_conv.onnx", conv(), "softmax_cross_entropy"), ("valid_mlp.onnx", mlp(), "mse")]
    for f, m, _ in controls:
        onnx.checker.check_model(m, full_check=True)
    files = [f for f, _, _, _ in CASES]
    assert len(files) == len(set(files)), "duplicate file names"
    cwd = os.getcwd()
    manifest = {
        "about": "Broken ONNX files that `graphpipe import` must refuse: exit status 2 and ONE line that starts "
                 "with the file's path and contains every string of `expect` (names quoted as graphpipe's "
                 "refusals quote them). The controls are the valid models each case starts from: they must "
                 "import with the loss given. Written by onnx/testdata/torch/broken.py; onnx_checker is what "
                 "onnx 1.12's checker says of the file.",
        "exit": 2,
        "controls": [{"file": f, "loss": loss} for f, _, loss in controls],
        "aux": sorted(AUX),
        "cases": [],
    }
    for f, m, _ in controls:
        with open(os.path.join(out, f), "wb") as fh:
            fh.write(m.SerializeToString())
    for name, blob in AUX.items():
        with open(os.path.join(out, name), "wb") as fh:
            fh.write(blob)
    os.chdir(out)  # the external-data cases resolve their locations from the model's directory
    for f, what, expect, thing in CASES:
        blob = thing if isinstance(thing, bytes) else thing.SerializeToString()
        assert len(blob) < 16384, "%s: %d bytes" % (f, len(blob))
        with open(f, "wb") as fh:
            fh.write(blob)
        manifest["cases"].append({"file": f, "broken": what, "expect": expect, "bytes": len(blob),
                                  "onnx_checker": check(f)})
    os.chdir(cwd)
    with open(os.path.join(out, "MANIFEST.json"), "w") as fh:
        json.dump(manifest, fh, indent=1)
        fh.write("\n")
    print("%s: %d broken files, %d controls" % (out, len(CASES), len(controls)))


if __name__ == "__main__":
    main()
