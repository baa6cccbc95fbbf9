"""Replays a `graphpipe train --dump DIR` run in PyTorch and compares the final parameters.

usage: python3 replay.py MODEL.json DIR --optimizer sgd|adam --lr LR [--momentum M] [--micro-batch B]
Prints the largest relative difference per parameter tensor, max|a-b| / max|b|, and exits 1
if any exceeds --tol (default 2e-4).

One slice is reported but not judged: the key third of an attention's in_proj_bias. Its
gradient is identically zero (adding a constant to every key shifts each row of scores by the
same amount, and softmax ignores that), so both implementations hold only rounding noise there
(about 1e-10), and Adam, which divides by the gradient's own scale, turns that noise into steps
of about lr in arbitrary directions. Every other number is compared.
"""
import argparse
import json
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gptorch  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("dump")
    ap.add_argument("--optimizer", required=True, choices=["sgd", "adam"])
    ap.add_argument("--lr", type=float, required=True)
    ap.add_argument("--momentum", type=float, default=0.0)
    ap.add_argument("--micro-batch", type=int, default=0)
    ap.add_argument("--tol", type=float, default=2e-4)
    a = ap.parse_args()
    torch.manual_seed(0)
    doc = json.load(open(a.model))
    init = gptorch.read_safetensors(os.path.join(a.dump, "init.safetensors"))
    data = gptorch.read_safetensors(os.path.join(a.dump, "data.safetensors"))
    final = gptorch.read_safetensors(os.path.join(a.dump, "final.safetensors"))
    losses = json.load(open(os.path.join(a.dump, "losses.json")))
    model = gptorch.Model(doc, init)
    params = list(model.p.values())
    if a.optimizer == "sgd":
        opt = torch.optim.SGD(params, lr=a.lr, momentum=a.momentum)
    else:
        opt = torch.optim.Adam(params, lr=a.lr)
    lname = gptorch.loss_name(doc)
    worst_loss = 0.0
    for step in range(len(losses)):
        batch = {k.split("/", 1)[1]: v for k, v in data.items() if k.split("/", 1)[0] == str(step)}
        n = next(iter(batch.values())).shape[0]
        b = a.micro_batch or n
        opt.zero_grad()
        total = 0.0
        for lo in range(0, n, b):
            feeds = {k: v[lo:lo + b] for k, v in batch.items()}
            loss = model(feeds)[lname]
            (loss * (b / n)).backward()
            total += float(loss) * b / n
        worst_loss = max(worst_loss, abs(total - losses[step]) / max(abs(losses[step]), 1e-12))
        opt.step()
    worst = 0.0
    for name, want in sorted(final.items()):
        got = model.value(name).detach().numpy()
        scale = max(abs(want).max(), 1e-12)
        if name.endswith("attn.in_proj_bias"):
            d = want.shape[0] // 3
            key = float(abs(got[d:2 * d] - want[d:2 * d]).max() / scale)
            got, want = np.concatenate([got[:d], got[2 * d:]]), np.concatenate([want[:d], want[2 * d:]])
            print("%-40s key third (zero gradient, not judged) %.3e" % (name, key))
        rel = float(abs(got - want).max() / scale)
        worst = max(worst, rel)
        print("%-40s %.3e" % (name, rel))
    print("losses: largest relative difference %.3e" % worst_loss)
    print("final parameters: largest relative difference %.3e (tolerance %.1e)" % (worst, a.tol))
    sys.exit(0 if worst <= a.tol else 1)


if __name__ == "__main__":
    main()
