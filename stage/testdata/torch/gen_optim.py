"""Writes optim_golden.json: PyTorch's optimizers, learning-rate schedules and gradient clipping,
step by step, for stage's optimizer tests (optim_test.go).

usage: /usr/bin/python3 gen_optim.py  (Debian's python3-torch, 1.13)

"schedules": for each (kind, warmup, steps), the rate the optimizer holds at every step (from 0)
under torch.optim.lr_scheduler.LambdaLR with graphpipe's factors (stage/schedule.go), stepped after
each optimizer step; with no warm-up, also the rates of PyTorch's own LinearLR(1 → 0) and
CosineAnnealingLR(eta_min 0) over the same steps, an oracle independent of the factors.

"optimizers": for each case, three parameters (a matrix, a bias, a norm's weight) and six steps of
fixed gradients; each step optionally clips with clip_grad_norm_ (recording the norm it returns),
steps the optimizer and the scheduler, and records the parameters. Values are float32, written
with 9 significant digits so they read back exactly.
"""
import json
import math
import os

import numpy as np
import torch


def factor(kind, warmup, steps):
    # written from the definitions in stage/schedule.go, the transformers recipes
    def f(k):
        if k < warmup:
            return float(k) / float(max(1, warmup))
        span = float(max(1, steps - warmup))
        if kind == "linear":
            return max(0.0, float(steps - k) / span)
        if kind == "cosine":
            p = float(k - warmup) / span
            return max(0.0, 0.5 * (1.0 + math.cos(math.pi * p)))
        return 1.0
    return f


def rates(kind, warmup, steps, base=0.1, builtin=False):
    p = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([p], lr=base)
    if builtin and kind == "linear":
        sch = torch.optim.lr_scheduler.LinearLR(opt, start_factor=1.0, end_factor=0.0, total_iters=steps)
    elif builtin and kind == "cosine":
        sch = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=steps, eta_min=0.0)
    else:
        sch = torch.optim.lr_scheduler.LambdaLR(opt, factor(kind, warmup, steps))
    out = []
    for _ in range(steps + 2):  # two past the end, where no step runs
        out.append(opt.param_groups[0]["lr"])
        opt.step()
        sch.step()
    return out


SCHEDULES = [("constant", 0, 5), ("constant", 3, 6), ("linear", 0, 7), ("linear", 2, 9), ("linear", 9, 9),
             ("cosine", 0, 8), ("cosine", 3, 10), ("cosine", 1, 1)]

# name, optimizer, kwargs, --no-decay-bias-norm, schedule (kind, warmup), clip max (0: none)
CASES = [
    ("sgd", "sgd", dict(lr=0.1), False, ("constant", 0), 0),
    ("sgd-wd", "sgd", dict(lr=0.1, weight_decay=0.05), False, ("constant", 0), 0),
    ("sgd-momentum-wd", "sgd", dict(lr=0.05, momentum=0.9, weight_decay=0.01), False, ("linear", 2), 0),
    ("sgd-nesterov-nodecay", "sgd", dict(lr=0.05, momentum=0.9, nesterov=True, weight_decay=0.1), True, ("constant", 0), 0),
    ("adam", "adam", dict(lr=0.01), False, ("constant", 0), 0),
    ("adam-wd", "adam", dict(lr=0.01, weight_decay=0.1), False, ("cosine", 2), 0),
    ("adamw", "adamw", dict(lr=0.01, weight_decay=0.01), False, ("constant", 0), 0),
    ("adamw-nodecay-cosine", "adamw", dict(lr=0.02, weight_decay=0.3), True, ("cosine", 2), 0),
    ("adamw-linear-clip", "adamw", dict(lr=0.02, weight_decay=0.1), True, ("linear", 1), 0.5),
    ("sgd-momentum-clip", "sgd", dict(lr=0.05, momentum=0.9), False, ("constant", 0), 1.0),
    ("adam-clip-inactive", "adam", dict(lr=0.01), False, ("constant", 0), 1e3),
]
STEPS = 6
SHAPES = [("l.weight", (3, 4)), ("l.bias", (3,)), ("n.weight", (4,))]


def f32(a):
    return [float("%.9g" % x) for x in np.asarray(a, dtype=np.float32).reshape(-1)]


def run(case, rng):
    name, kind, kw, nodecay, (sched, warmup), clip = case
    init = {n: rng.standard_normal(s).astype(np.float32) for n, s in SHAPES}
    grads = [{n: (rng.standard_normal(s) * (1 + k)).astype(np.float32) for n, s in SHAPES} for k in range(STEPS)]
    params = {n: torch.nn.Parameter(torch.from_numpy(v.copy())) for n, v in init.items()}
    wd = kw.pop("weight_decay", 0.0)
    if nodecay:
        groups = [{"params": [p for p in params.values() if p.dim() >= 2], "weight_decay": wd},
                  {"params": [p for p in params.values() if p.dim() < 2], "weight_decay": 0.0}]
    else:
        groups = [{"params": list(params.values()), "weight_decay": wd}]
    cls = {"sgd": torch.optim.SGD, "adam": torch.optim.Adam, "adamw": torch.optim.AdamW}[kind]
    opt = cls(groups, **kw)
    sch = torch.optim.lr_scheduler.LambdaLR(opt, factor(sched, warmup, STEPS))
    out = {"name": name, "optimizer": kind, "lr": kw["lr"], "momentum": kw.get("momentum", 0.0),
           "nesterov": kw.get("nesterov", False), "weight_decay": wd, "no_decay_bias_norm": nodecay,
           "schedule": sched, "warmup": warmup, "steps": STEPS, "clip": clip,
           "init": {n: f32(v) for n, v in init.items()}, "shapes": {n: list(s) for n, s in SHAPES},
           "grads": [], "lrs": [], "norms": [], "params": []}
    for k in range(STEPS):
        for n, p in params.items():
            p.grad = torch.from_numpy(grads[k][n].copy())
        out["grads"].append({n: f32(g) for n, g in grads[k].items()})
        out["lrs"].append(opt.param_groups[0]["lr"])
        if clip > 0:
            out["norms"].append(float(torch.nn.utils.clip_grad_norm_(list(params.values()), clip)))
        opt.step()
        sch.step()
        out["params"].append({n: f32(p.detach().numpy()) for n, p in params.items()})
    return out


def main():
    torch.manual_seed(0)
    rng = np.random.default_rng(23)
    schedules = []
    for kind, warmup, steps in SCHEDULES:
        s = {"kind": kind, "warmup": warmup, "steps": steps, "base": 0.1, "lrs": rates(kind, warmup, steps)}
        if warmup == 0 and kind != "constant":
            s["builtin"] = rates(kind, warmup, steps, builtin=True)
        schedules.append(s)
    doc = {"torch": torch.__version__, "schedules": schedules, "optimizers": [run(c, rng) for c in CASES]}
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "optim_golden.json")
    with open(path, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
