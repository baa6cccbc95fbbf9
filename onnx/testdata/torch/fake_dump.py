"""Writes a fake `graphpipe train --dump DIR` of a models.py model, computed with PyTorch, to test
replay_module.py before graphpipe's side exists (and to check it still passes and fails as it should).

usage: /usr/bin/python3 onnx/testdata/torch/fake_dump.py MODEL_NAME DIR --optimizer sgd|adam --lr LR
           [--momentum M] --micro-batch B [--batch N] [--steps K] [--label NAME]
           [--perturb TENSOR] [--perturb-loss STEP]

The files are those of the dump format (init, data, final .safetensors; losses.json): parameters and
buffers F32 under their state_dict names (BatchNorm's num_batches_tracked left out, as the ONNX file and
so graphpipe have no such tensor), each step's batch as "<step>/<input>" with int inputs as I32, the label
as "<step>/label" (or --label). The training is an independent implementation of what replay_module.py
replays: the micro-batches' scaled losses summed into one backward (not one backward each), and SGD with
momentum and Adam written out by hand (PyTorch's formulas and defaults: betas 0.9, 0.999, eps 1e-8, no
weight decay) instead of torch.optim.

--perturb TENSOR changes one value of that tensor in final.safetensors by 1% of the tensor's largest
magnitude; --perturb-loss STEP changes losses.json[STEP] by 1%. replay_module.py must then exit 1.
"""
import argparse
import json
import os
import struct
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import models  # noqa: E402


def write_safetensors(path, tensors):
    """Writes {name: numpy array (float32 or int32)} as safetensors, in name order."""
    header, blobs, off = {}, [], 0
    for name in sorted(tensors):
        a = np.ascontiguousarray(tensors[name])
        dt = {np.dtype(np.float32): "F32", np.dtype(np.int32): "I32"}[a.dtype]
        b = a.tobytes()
        header[name] = {"dtype": dt, "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def state(model):
    """The floating-point state_dict entries (parameters and BatchNorm running statistics) as float32."""
    return {k: v.detach().float().numpy().copy() for k, v in model.state_dict().items() if v.is_floating_point()}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model")
    ap.add_argument("dir")
    ap.add_argument("--optimizer", required=True, choices=["sgd", "adam"])
    ap.add_argument("--lr", type=float, required=True)
    ap.add_argument("--momentum", type=float, default=0.0)
    ap.add_argument("--micro-batch", type=int, required=True)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--label", default="label")
    ap.add_argument("--perturb")
    ap.add_argument("--perturb-loss", type=int)
    a = ap.parse_args()
    os.makedirs(a.dir, exist_ok=True)
    spec = models.MODELS[a.model]
    model = models.build(a.model)
    lossf = models.loss_fn(spec["loss"])
    write_safetensors(os.path.join(a.dir, "init.safetensors"), state(model))

    data, losses = {}, []
    params = [p for _, p in model.named_parameters()]
    mom = [torch.zeros_like(p) for p in params]
    sq = [torch.zeros_like(p) for p in params]
    for step in range(a.steps):
        xs = models.example_inputs(a.model, batch=a.batch, seed=100 + step)
        label = models.example_label(a.model, batch=a.batch, seed=200 + step)
        for i, x in zip(spec["inputs"], xs):
            data["%d/%s" % (step, i["name"])] = x.numpy().astype(np.int32 if i["dtype"] == "int64" else np.float32)
        data["%d/%s" % (step, a.label)] = label.numpy().astype(np.int32 if spec["label"]["dtype"] == "int64" else np.float32)
        n = a.batch
        total = 0
        for lo in range(0, n, a.micro_batch):
            hi = min(lo + a.micro_batch, n)
            total = total + lossf(model(*[x[lo:hi] for x in xs]), label[lo:hi]) * ((hi - lo) / n)
        losses.append(float(total))
        grads = torch.autograd.grad(total, params, allow_unused=True)
        with torch.no_grad():
            t = step + 1
            for p, g, m, v in zip(params, grads, mom, sq):
                if g is None:
                    g = torch.zeros_like(p)
                if a.optimizer == "sgd":
                    if a.momentum:
                        m.copy_(g if step == 0 else a.momentum * m + g)
                        g = m
                    p.sub_(a.lr * g)
                else:
                    m.mul_(0.9).add_(0.1 * g)
                    v.mul_(0.999).add_(0.001 * g * g)
                    denom = (v / (1 - 0.999 ** t)).sqrt() + 1e-8
                    p.sub_(a.lr / (1 - 0.9 ** t) * m / denom)

    final = state(model)
    if a.perturb:
        t = final[a.perturb]
        t.reshape(-1)[t.size // 2] += 0.01 * max(float(abs(t).max()), 1e-3)
    if a.perturb_loss is not None:
        losses[a.perturb_loss] *= 1.01
    write_safetensors(os.path.join(a.dir, "data.safetensors"), data)
    write_safetensors(os.path.join(a.dir, "final.safetensors"), final)
    with open(os.path.join(a.dir, "losses.json"), "w") as f:
        json.dump(losses, f)
    print("%s: %d steps of %d, losses %s" % (a.dir, a.steps, a.batch, " ".join("%.6g" % x for x in losses)))


if __name__ == "__main__":
    main()
