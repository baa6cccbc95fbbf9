"""Replays a `graphpipe train --dump DIR` run in PyTorch and compares the final parameters.

usage: python3 replay.py MODEL.json DIR --optimizer sgd|adam|adamw --lr LR [--momentum M] [--nesterov]
    [--weight-decay WD] [--no-decay-bias-norm] [--lr-schedule constant|linear|cosine] [--warmup-steps N]
    [--clip-grad-norm MAX] [--micro-batch B] [--schedule 2bw]
with the flags the run was trained with. Prints the largest relative difference per parameter tensor,
max|a-b| / max|b|, and exits 1 if any exceeds --tol (default 2e-4).

The optimizer is torch.optim.SGD, Adam or AdamW (--weight-decay defaults to the class's own: 0.01 for
AdamW, 0 otherwise, as graphpipe's); --no-decay-bias-norm puts every parameter of fewer than 2
dimensions in a parameter group without weight decay. The schedule is LambdaLR with the factors of
transformers' get_{constant,linear,cosine}_schedule_with_warmup over the dump's steps, stepped after
each optimizer step. --clip-grad-norm calls torch.nn.utils.clip_grad_norm_ on every parameter after
the micro-batches' backward passes and before the optimizer step.

--schedule 2bw replays PipeDream-2BW's update rule (graphpipe train/run --schedule 2bw): each step's
gradient is taken at the weights as they were before the last update, and the optimizer steps the newest,
W(t+1) = W(t) - lr * grad f_t(W(t-1)) with W(-1) = W(0): the model's parameters are set to the stale
version for the forward and backward passes, then back to the newest (which weight decay reads) for the
step. Any other schedule replays synchronous training.

One slice is reported but not judged: the key third of an attention's in_proj_bias. Its
gradient is identically zero (adding a constant to every key shifts each row of scores by the
same amount, and softmax ignores that), so both implementations hold only rounding noise there
(about 1e-10), and Adam, which divides by the gradient's own scale, turns that noise into steps
of about lr in arbitrary directions. Every other number is compared.
"""
import argparse
import json
import math
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
    ap.add_argument("--optimizer", required=True, choices=["sgd", "adam", "adamw"])
    ap.add_argument("--lr", type=float, required=True)
    ap.add_argument("--momentum", type=float, default=0.0)
    ap.add_argument("--nesterov", action="store_true")
    ap.add_argument("--weight-decay", type=float, default=None)
    ap.add_argument("--no-decay-bias-norm", action="store_true")
    ap.add_argument("--lr-schedule", default="constant", choices=["constant", "linear", "cosine"])
    ap.add_argument("--warmup-steps", type=int, default=0)
    ap.add_argument("--clip-grad-norm", type=float, default=0.0)
    ap.add_argument("--micro-batch", type=int, default=0)
    ap.add_argument("--schedule", default="1f1b")
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
    opt = optimizer(a, params)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, factor(a.lr_schedule, a.warmup_steps, len(losses)))
    lname = gptorch.loss_name(doc)
    worst_loss = 0.0
    norms = []
    stale = [p.detach().clone() for p in params]  # W(t-1) under 2bw; W(-1) = W(0)
    for step in range(len(losses)):
        batch = {k.split("/", 1)[1]: v for k, v in data.items() if k.split("/", 1)[0] == str(step)}
        n = next(iter(batch.values())).shape[0]
        b = a.micro_batch or n
        opt.zero_grad()
        if a.schedule == "2bw":  # the passes read the version before the newest
            newest = [p.detach().clone() for p in params]
            with torch.no_grad():
                for p, w in zip(params, stale):
                    p.copy_(w)
        total = 0.0
        for lo in range(0, n, b):
            feeds = {k: v[lo:lo + b] for k, v in batch.items()}
            loss = model(feeds)[lname]
            (loss * (b / n)).backward()
            total += float(loss) * b / n
        if a.schedule == "2bw":  # the optimizer steps the newest, which becomes the stale version
            with torch.no_grad():
                for p, w in zip(params, newest):
                    p.copy_(w)
            stale = newest
        worst_loss = max(worst_loss, abs(total - losses[step]) / max(abs(losses[step]), 1e-12))
        if a.clip_grad_norm > 0:
            norms.append(float(torch.nn.utils.clip_grad_norm_(params, a.clip_grad_norm)))
        opt.step()
        sched.step()
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
    if norms:
        print("clip_grad_norm_ %g: global norms %.4g to %.4g, %d of %d steps clipped" % (
            a.clip_grad_norm, min(norms), max(norms), sum(n > a.clip_grad_norm for n in norms), len(norms)))
    print("losses: largest relative difference %.3e" % worst_loss)
    print("final parameters: largest relative difference %.3e (tolerance %.1e)" % (worst, a.tol))
    sys.exit(0 if worst <= a.tol else 1)


def optimizer(a, params):
    """torch.optim's SGD, Adam or AdamW as graphpipe's flags configure it."""
    cls = {"sgd": torch.optim.SGD, "adam": torch.optim.Adam, "adamw": torch.optim.AdamW}[a.optimizer]
    wd = a.weight_decay
    if wd is None:
        wd = 0.01 if a.optimizer == "adamw" else 0.0
    groups = [{"params": params, "weight_decay": wd}]
    if a.no_decay_bias_norm:
        groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": wd},
                  {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
    if a.optimizer == "sgd":
        return cls(groups, lr=a.lr, momentum=a.momentum, nesterov=a.nesterov)
    return cls(groups, lr=a.lr)


def factor(kind, warmup, steps):
    """The rate's factor at each step, as transformers' get_*_schedule_with_warmup."""
    def f(k):
        if k < warmup:
            return float(k) / float(max(1, warmup))
        span = float(max(1, steps - warmup))
        if kind == "linear":
            return max(0.0, float(steps - k) / span)
        if kind == "cosine":
            return max(0.0, 0.5 * (1.0 + math.cos(math.pi * float(k - warmup) / span)))
        return 1.0
    return f


if __name__ == "__main__":
    main()
