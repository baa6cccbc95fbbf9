"""Writes golden.json: every op's forward and backward in PyTorch, for the kernel room's tests.

usage: /usr/bin/python3 gen_golden.py  (Debian's python3-torch)

Each case is one op named "t" over inputs, written as graphpipe/model@1 JSON fragments
(the Go test wraps them into a valid model the same way as its finite-difference cases).
Values are drawn from numpy with a fixed seed; y is the op's output on a batch of 3, and the
gradients are of L = sum(w * y) for a fixed random w.
"""
import json
import os
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
# gptorch, the reference interpreter of model files, lives with stage's replay
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "..", "testdata", "torch"))
import gptorch  # noqa: E402

CASES = [
    ("linear", '{"name":"x","shape":[3,4],"dtype":"float32"}', '"op":"linear","inputs":["x"],"attrs":{"out":5}'),
    ("linear-nobias", '{"name":"x","shape":[4],"dtype":"float32"}', '"op":"linear","inputs":["x"],"attrs":{"out":2,"bias":false}'),
    ("relu", '{"name":"x","shape":[2,3],"dtype":"float32"}', '"op":"relu","inputs":["x"]'),
    ("gelu", '{"name":"x","shape":[5],"dtype":"float32"}', '"op":"gelu","inputs":["x"]'),
    ("tanh", '{"name":"x","shape":[5],"dtype":"float32"}', '"op":"tanh","inputs":["x"]'),
    ("sigmoid", '{"name":"x","shape":[5],"dtype":"float32"}', '"op":"sigmoid","inputs":["x"]'),
    ("layer_norm", '{"name":"x","shape":[3,6],"dtype":"float32"}', '"op":"layer_norm","inputs":["x"]'),
    ("add", '{"name":"x","shape":[4],"dtype":"float32"},{"name":"y","shape":[4],"dtype":"float32"}', '"op":"add","inputs":["x","y"]'),
    ("mul", '{"name":"x","shape":[2,2],"dtype":"float32"},{"name":"y","shape":[2,2],"dtype":"float32"}', '"op":"mul","inputs":["x","y"]'),
    ("concat", '{"name":"x","shape":[2,3],"dtype":"float32"},{"name":"y","shape":[1,3],"dtype":"float32"}', '"op":"concat","inputs":["x","y"],"attrs":{"axis":0}'),
    ("mean", '{"name":"x","shape":[3,4],"dtype":"float32"}', '"op":"mean","inputs":["x"],"attrs":{"axis":-1}'),
    ("flatten", '{"name":"x","shape":[2,3],"dtype":"float32"}', '"op":"flatten","inputs":["x"]'),
    ("embedding", '{"name":"i","shape":[3],"dtype":"int32","range":[0,5]}', '"op":"embedding","inputs":["i"],"attrs":{"num":5,"dim":4}'),
    ("embedding_bag-sum", '{"name":"i","shape":[4],"dtype":"int32","range":[0,6]}', '"op":"embedding_bag","inputs":["i"],"attrs":{"num":6,"dim":3,"mode":"sum"}'),
    ("embedding_bag-mean", '{"name":"i","shape":[4],"dtype":"int32","range":[0,6]}', '"op":"embedding_bag","inputs":["i"],"attrs":{"num":6,"dim":3}'),
    ("attention", '{"name":"x","shape":[4,6],"dtype":"float32"}', '"op":"attention","inputs":["x"],"attrs":{"heads":2}'),
    ("attention-causal", '{"name":"x","shape":[3,4],"dtype":"float32"}', '"op":"attention","inputs":["x"],"attrs":{"heads":1,"causal":true}'),
    ("dot_interaction", '{"name":"x","shape":[4],"dtype":"float32"},{"name":"y","shape":[4],"dtype":"float32"},{"name":"z","shape":[4],"dtype":"float32"}', '"op":"dot_interaction","inputs":["x","y","z"]'),
    ("softmax_cross_entropy", '{"name":"x","shape":[5],"dtype":"float32"},{"name":"l","shape":[],"dtype":"int32","range":[0,5]}', '"op":"softmax_cross_entropy","inputs":["x","l"]'),
    ("mse", '{"name":"x","shape":[3],"dtype":"float32"},{"name":"y","shape":[3],"dtype":"float32"}', '"op":"mse","inputs":["x","y"]'),
    ("bce_with_logits", '{"name":"x","shape":[3],"dtype":"float32"},{"name":"y","shape":[3],"dtype":"float32"}', '"op":"bce_with_logits","inputs":["x","y"]'),
]

PARAMS = {  # per-sample input width d → the op's parameter shapes
    "linear": lambda a, d, ins: {"weight": [a["out"], d], **({"bias": [a["out"]]} if a.get("bias", True) else {})},
    "layer_norm": lambda a, d, ins: {"weight": [d], "bias": [d]},
    "embedding": lambda a, d, ins: {"weight": [a["num"], a["dim"]]},
    "embedding_bag": lambda a, d, ins: {"weight": [a["num"], a["dim"]]},
    "attention": lambda a, d, ins: {"in_proj_weight": [3 * d, d], "in_proj_bias": [3 * d], "out_proj.weight": [d, d], "out_proj.bias": [d]},
}


def main():
    """golden.json from CASES here; golden_<set>.json from each module of model@2's ops
    (cases_conv.py, cases_tensor.py: CASES, PARAMS, SEED), each with its own generator."""
    import importlib
    generate(CASES, PARAMS, 20261122, "golden.json")
    for mod in ("cases_conv", "cases_tensor"):
        try:
            m = importlib.import_module(mod)
        except ModuleNotFoundError as e:
            if e.name != mod:
                raise
            continue
        generate(m.CASES, {**PARAMS, **m.PARAMS}, m.SEED, "golden_%s.json" % mod[len("cases_"):], getattr(m, "BUFFERS", {}),
                 getattr(m, "POSITIVE", set()))


def generate(cases, param_shapes, seed, filename, buffer_values=None, positive=()):
    rng = np.random.default_rng(seed)
    out = []
    for name, inputs, opjson in cases:
        ins = json.loads("[" + inputs + "]")
        op = json.loads("{" + '"name":"t",' + opjson + "}")
        feeds = {}
        for i in ins:
            shape = [3] + i["shape"]
            if i["dtype"] == "int32":
                feeds[i["name"]] = rng.integers(i["range"][0], i["range"][1], size=shape).astype(np.int32)
            else:
                feeds[i["name"]] = rng.standard_normal(shape).astype(np.float32)
                if name in positive:
                    feeds[i["name"]] = np.abs(feeds[i["name"]]) + np.float32(0.5)
        params = {}
        if op["op"] in param_shapes:
            d = ins[0]["shape"][-1] if ins[0]["shape"] else 1
            for pname, shape in param_shapes[op["op"]](op.get("attrs", {}), d, ins).items():
                params["t." + pname] = rng.standard_normal(shape).astype(np.float32)
        buffers = {}
        if buffer_values and op["op"] in buffer_values:
            buffers = buffer_values[op["op"]](rng, ins)
            for slot, v in buffers.items():
                params["t." + slot] = np.array(v, dtype=np.float32)
        model = gptorch.Model({"inputs": ins, "ops": [op]}, params)
        tfeeds = {k: torch.tensor(v, requires_grad=v.dtype == np.float32) for k, v in feeds.items()}
        y = model(tfeeds)["t"]
        w = torch.tensor(rng.standard_normal(tuple(y.shape)).astype(np.float32))
        (y * w).sum().backward()
        case = {"name": name, "inputs": inputs, "op": opjson,
                "values": {k: v.reshape(-1).tolist() for k, v in feeds.items()},
                "params": {k[2:]: v.reshape(-1).tolist() for k, v in params.items()},
                "w": w.reshape(-1).tolist(), "y": y.detach().reshape(-1).tolist(), "grads": {}}
        if buffers:
            case["params"] = {k: v for k, v in case["params"].items() if k not in buffers}
            case["buffers"] = {k: np.array(v, dtype=np.float32).tolist() for k, v in buffers.items()}
            case["buffers_after"] = {k: model.value("t." + k).reshape(-1).tolist() for k in buffers}
        for k, t in tfeeds.items():
            if t.grad is not None:
                case["grads"]["input:" + k] = t.grad.reshape(-1).tolist()
        for k, p in model.p.items():
            case["grads"]["param:" + k.replace("__", ".")[2:]] = p.grad.reshape(-1).tolist()
        out.append(case)
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), filename)
    with open(path, "w") as f:
        json.dump({"generator": "gen_golden.py", "torch": torch.__version__, "cases": out}, f, indent=0)
        f.write("\n")
    print("wrote %d cases to %s" % (len(out), path))


if __name__ == "__main__":
    main()
