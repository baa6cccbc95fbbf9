"""A PyTorch interpreter of graphpipe/model@1 and @2 files, for golden values and replays.

Only the standard library, numpy and torch (Debian's python3-torch). Values are
batch-major float32 (int64 for indices), as graphpipe computes them.

The ops of model@2 live in ops_conv.py and ops_tensor.py, which register a
function per kind in OPS: f(model, op, x, attrs) -> tensor. Parameters and
buffers are looked up by their names in the model (an op's "params" entry for
the slot, or "<op>.<slot>"); BUFFERS lists each kind's buffer slots.
"""
import json
import struct

import numpy as np
import torch
import torch.nn.functional as F


def read_safetensors(path):
    """Returns {name: numpy array} of an F32/I32 safetensors file."""
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    data = blob[8 + n:]
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        lo, hi = e["data_offsets"]
        dtype = {"F32": np.float32, "I32": np.int32}[e["dtype"]]
        out[name] = np.frombuffer(data[lo:hi], dtype=dtype).reshape(e["shape"]).copy()
    return out


def norm_axis(axis, rank):
    return (axis + rank if axis < 0 else axis) + 1  # +1: the batch axis


# kind -> f(model, op, inputs, attrs): the ops of model@2 (ops_conv.py, ops_tensor.py)
OPS = {}
# kind -> the slots that are buffers, not parameters
BUFFERS = {"batch_norm": ("running_mean", "running_var")}


def key(op, slot):
    """The name of op's parameter or buffer in slot."""
    return op.get("params", {}).get(slot, op["name"] + "." + slot)


def buffer_names(doc):
    """The names of every buffer of the model."""
    return {key(op, s) for op in doc["ops"] for s in BUFFERS.get(op["op"], ())}


class Model(torch.nn.Module):
    """Runs a model document's ops in file order (the builders write them topologically).

    state holds every parameter and buffer by name (an init.safetensors file's contents);
    the buffers among them (batch_norm's running statistics) are registered as buffers, the
    rest as parameters in self.p (names with "." written "__").
    """

    def __init__(self, doc, state):
        super().__init__()
        self.doc = doc
        self.step, self.sample0 = 0, 0  # where the next forward's rows are in training (dropout's masks)
        self.rows = 0  # the next forward's micro-batch size, for ops without inputs
        self.shapes = {i["name"]: i["shape"] for i in doc["inputs"]}
        self.p = torch.nn.ParameterDict()
        self.bufs = {}
        buffers = buffer_names(doc)
        for name, value in state.items():
            if name in buffers:
                self.bufs[name] = torch.tensor(value)
            else:
                self.p[name.replace(".", "__")] = torch.nn.Parameter(torch.tensor(value))
        self.attn = {}
        for op in doc["ops"]:
            if op["op"] == "attention":
                d = self.param(op, "out_proj.weight").shape[0]
                self.attn[op["name"]] = torch.nn.MultiheadAttention(d, op["attrs"]["heads"], batch_first=True)

    def param(self, op, slot):
        """op's parameter or buffer in slot."""
        name = key(op, slot)
        if name in self.bufs:
            return self.bufs[name]
        return self.p[name.replace(".", "__")]

    def value(self, name):
        """A parameter or buffer by its name in the model."""
        if name in self.bufs:
            return self.bufs[name]
        return self.p[name.replace(".", "__")]

    def forward(self, feeds):
        vals = {k: torch.tensor(v) if not torch.is_tensor(v) else v for k, v in feeds.items()}
        if vals:
            self.rows = next(iter(vals.values())).shape[0]
        order = topo(self.doc)
        for op in order:
            vals[op["name"]] = self.run(op, [vals[i] for i in op["inputs"]], vals)
        return vals

    def run(self, op, x, vals):
        a = op.get("attrs", {})
        k = op["op"]
        if k in OPS:
            return OPS[k](self, op, x, a)
        if k == "linear":
            w = self.param(op, "weight")
            if a.get("weight_layout", "out_in") == "in_out":
                w = w.t()
            return F.linear(x[0], w, self.param(op, "bias") if a.get("bias", True) else None)
        if k == "relu":
            return F.relu(x[0])
        if k == "gelu":
            return F.gelu(x[0])
        if k == "tanh":
            return torch.tanh(x[0])
        if k == "sigmoid":
            return torch.sigmoid(x[0])
        if k == "layer_norm":
            return F.layer_norm(x[0], (x[0].shape[-1],), self.param(op, "weight"), self.param(op, "bias"), a.get("eps", 1e-5))
        if k == "add":
            out = x[0]
            for t in x[1:]:
                out = out + t
            return out
        if k == "mul":
            return x[0] * x[1]
        if k == "concat":
            return torch.cat(x, dim=norm_axis(a.get("axis", -1), x[0].dim() - 1))
        if k == "mean":
            return x[0].mean(dim=norm_axis(a["axis"], x[0].dim() - 1))
        if k == "flatten":
            return x[0].reshape(x[0].shape[0], -1)
        if k == "embedding":
            return F.embedding(x[0].long(), self.param(op, "weight"))
        if k == "embedding_bag":
            return F.embedding_bag(x[0].long(), self.param(op, "weight"), mode=a.get("mode", "mean"))
        if k == "attention":
            m = self.attn[op["name"]]
            s = x[0].shape[1]
            mask = torch.triu(torch.ones(s, s, dtype=torch.bool), 1) if a.get("causal", False) else None
            y, _ = F.multi_head_attention_forward(
                x[0].transpose(0, 1), x[0].transpose(0, 1), x[0].transpose(0, 1), m.embed_dim, m.num_heads,
                self.param(op, "in_proj_weight"), self.param(op, "in_proj_bias"), None, None, False, 0.0,
                self.param(op, "out_proj.weight"), self.param(op, "out_proj.bias"),
                training=False, need_weights=False, attn_mask=mask)
            return y.transpose(0, 1)
        if k == "dot_interaction":
            pairs = [(x[i] * x[j]).sum(-1) for i in range(len(x)) for j in range(i + 1, len(x))]
            return torch.stack(pairs, dim=1)
        if k == "softmax_cross_entropy":
            return F.cross_entropy(x[0], x[1].long())
        if k == "mse":
            return F.mse_loss(x[0], x[1])
        if k == "bce_with_logits":
            return F.binary_cross_entropy_with_logits(x[0], x[1])
        raise ValueError("op %s: %s cannot run" % (op["name"], k))


def topo(doc):
    """The ops in a topological order (ties by file order)."""
    names = {i["name"] for i in doc["inputs"]}
    done, out, ops = set(names), [], list(doc["ops"])
    while ops:
        for op in ops:
            if all(i in done for i in op["inputs"]):
                out.append(op)
                done.add(op["name"])
                ops.remove(op)
                break
        else:
            raise ValueError("cycle")
    return out


def load_v2_ops():
    """Imports the modules that register model@2's ops (missing ones are skipped)."""
    import importlib
    for mod in ("ops_conv", "ops_tensor"):
        try:
            importlib.import_module(mod)
        except ModuleNotFoundError as e:
            if e.name != mod:
                raise


def loss_name(doc):
    return [o["name"] for o in doc["ops"] if o["op"] in ("softmax_cross_entropy", "mse", "bce_with_logits")][0]


load_v2_ops()
