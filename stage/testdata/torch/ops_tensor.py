"""model@2's tensor ops for gptorch (registered into gptorch.OPS), dropout's mask included: graphpipe's
function of (seed, step, op, sample, element) (docs/model-format.md), so that replays draw the same."""
import math

import numpy as np
import torch
import torch.nn.functional as F

import gptorch

M64 = (1 << 64) - 1


def splitmix(z):
    z = (z + 0x9E3779B97F4A7C15) & M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def fnv(s):
    h = 0xCBF29CE484222325
    for b in s.encode():
        h = ((h ^ b) * 0x100000001B3) & M64
    return h


def dropout_mask(seed, op, step, sample0, rows, per, p):
    """The kept mask, [rows, per], of op's dropout at step for samples sample0.."""
    k = splitmix(splitmix(splitmix(seed & M64) ^ fnv(op)) ^ (step & M64))
    keep = np.ones((rows, per), dtype=bool)
    for r in range(rows):
        ks = splitmix(k ^ (sample0 + r))
        for e in range(per):
            h = splitmix(ks ^ e)
            keep[r, e] = (h >> 11) * (1.0 / (1 << 53)) >= p
    return keep


def _ax(a, x):
    return gptorch.norm_axis(a, x.dim() - 1)


def reshape(m, op, x, a):
    return x[0].reshape([x[0].shape[0]] + a["shape"])


def transpose(m, op, x, a):
    return x[0].permute([0] + [p + 1 for p in a["perm"]])


def softmax(m, op, x, a):
    return torch.softmax(x[0], dim=_ax(a.get("axis", -1), x[0]))


def slice_(m, op, x, a):
    ax = _ax(a["axis"], x[0])
    n = x[0].shape[ax]
    lo, hi, _ = slice(a["start"], a["end"]).indices(n)
    idx = list(range(lo, max(hi, lo), a.get("step", 1)))
    return x[0].index_select(ax, torch.tensor(idx))


def pad(m, op, x, a):
    p = a["pads"]
    r = len(p) // 2
    spec = []
    for i in reversed(range(r)):
        spec += [p[i], p[r + i]]
    return F.pad(x[0], spec, value=a.get("value", 0.0))


def matmul(m, op, x, a):
    return torch.matmul(x[0], x[1])


def _binary(fn, name):
    def run(m, op, x, a):
        if "scalar" in a:
            s = a["scalar"]
            return fn(s, x[0]) if a.get("reverse", False) else fn(x[0], s)
        r = max(t.dim() for t in x)  # per-sample shapes align from the last axis, the batch apart
        xs = [t.reshape([t.shape[0]] + [1] * (r - t.dim()) + list(t.shape[1:])) for t in x]
        out = xs[0]
        for t in xs[1:]:
            out = fn(out, t)
        return out
    return run


def pow_(m, op, x, a):
    return torch.pow(x[0], a["exponent"])


def _reduce(fn):
    def run(m, op, x, a):
        axes = a.get("axes", [])
        r = x[0].dim() - 1
        dims = [gptorch.norm_axis(ax, r) for ax in axes] if axes else list(range(1, r + 1))
        if not dims:
            return x[0]
        return fn(x[0], dim=dims, keepdim=a.get("keepdims", False))
    return run


def dropout(m, op, x, a):
    p = a.get("p", 0.5)
    rows, per = x[0].shape[0], int(np.prod(x[0].shape[1:]))
    keep = dropout_mask(m.doc.get("seed", 0), op["name"], m.step, m.sample0, rows, per, p)
    mask = torch.tensor(keep.reshape(x[0].shape), dtype=x[0].dtype)
    return x[0] * mask / (1 - p)


def hard_sigmoid(m, op, x, a):
    """PyTorch's F.hardsigmoid is alpha 1/6, beta 1/2 (graphpipe's defaults); other slopes clamp."""
    alpha, beta = a.get("alpha", 1 / 6), a.get("beta", 0.5)
    if "alpha" not in a and "beta" not in a:
        return torch.nn.functional.hardsigmoid(x[0])
    return torch.clamp(alpha * x[0] + beta, 0, 1)


def parameter(m, op, x, a):
    v = m.param(op, "value")
    return v.unsqueeze(0).expand([m.rows] + list(v.shape))


def constant(m, op, x, a):
    vals = a["value"]
    n = int(np.prod(a["shape"])) if a["shape"] else 1
    arr = np.array(vals if len(vals) == n else vals * n).reshape(a["shape"])
    dt = torch.int64 if a.get("dtype", "float32") == "int32" else torch.float32
    t = torch.tensor(arr, dtype=dt)
    return t.unsqueeze(0).expand([m.rows] + list(t.shape))


gptorch.OPS.update({
    "reshape": reshape, "transpose": transpose, "softmax": softmax, "slice": slice_, "pad": pad, "matmul": matmul,
    "add": _binary(lambda u, v: u + v, "add"), "sub": _binary(lambda u, v: u - v, "sub"),
    "mul": _binary(lambda u, v: u * v, "mul"), "div": _binary(lambda u, v: u / v, "div"),
    "pow": pow_, "exp": lambda m, op, x, a: torch.exp(x[0]), "log": lambda m, op, x, a: torch.log(x[0]),
    "sqrt": lambda m, op, x, a: torch.sqrt(x[0]), "neg": lambda m, op, x, a: -x[0],
    "erf": lambda m, op, x, a: torch.erf(x[0]),
    "hard_sigmoid": hard_sigmoid, "hard_swish": lambda m, op, x, a: torch.nn.functional.hardswish(x[0]),
    "reduce_mean": _reduce(torch.mean), "reduce_sum": _reduce(torch.sum),
    "dropout": dropout, "parameter": parameter, "constant": constant,
})
