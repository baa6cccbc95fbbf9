#!/usr/bin/env python3
"""graphpipe's training run beside PyTorch eager's on the same model, weights and batches: losses and iteration times.

usage: python3 bench/gpu/compare_train.py --graphpipe fp32=train-fp32.json [--graphpipe bf16=...]
    --torch fp32=torch-fp32.json [--torch bf16=...] [--warmup W]

--graphpipe PRECISION=FILE is `graphpipe train ... --precision PRECISION --json`'s output; --torch
PRECISION=FILE is bench/gpu/torch_step.py's --json file for the same run's dump. Prints, per step, each
precision's two losses and their relative difference, then each precision's iteration times and the ratio
graphpipe / PyTorch (the issue's bars: at most 1.1 in fp32, 1.3 in tf32).

graphpipe's iteration time is the median of its per-step times after the first W (default 2) where its JSON
has them (iteration_s, a list, or median_iteration_s); otherwise batch_size / samples_per_s, the mean over
every step with the first step's start-up included, which the output marks with '*'. Standard library only.
"""
import argparse
import json
import statistics
import sys

ORDER = ["fp32", "tf32", "bf16"]


def pairs(items, what):
    out = {}
    for it in items or []:
        prec, _, path = it.partition("=")
        if not path:
            sys.exit("compare_train: %s %r: want PRECISION=FILE" % (what, it))
        out[prec] = json.load(open(path))
    return out


def gp_time(doc, warmup):
    """graphpipe's seconds per iteration, and whether it is the median of per-step times."""
    per = doc.get("iteration_s")
    if isinstance(per, list) and per:
        return statistics.median(per[warmup:] or per), True
    if doc.get("median_iteration_s"):
        return doc["median_iteration_s"], True
    return doc["batch_size"] / doc["samples_per_s"], False


def convs(gp, pt, precs):
    """Says how each side ran conv2d, where the runs say: graphpipe's train --json 'conv' (cudnn VERSION or
    im2col), PyTorch's cuDNN version, allow_tf32 and benchmark (its algorithm search) per precision."""
    line = []
    for p in precs:
        g = gp.get(p, {}).get("conv")
        t = pt.get(p, {}).get("cudnn")
        if g or t:
            tt = "cuDNN %s, allow_tf32 %s, benchmark %s" % (t["version"], t["allow_tf32"], t.get("benchmark")) if t else "-"
            line.append("%s: graphpipe %s, PyTorch %s" % (p, g or "-", tt))
    if line:
        print("conv2d: " + "; ".join(line))


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--graphpipe", action="append", metavar="PRECISION=FILE")
    ap.add_argument("--torch", action="append", metavar="PRECISION=FILE")
    ap.add_argument("--warmup", type=int, default=2)
    a = ap.parse_args(argv)
    gp, pt = pairs(a.graphpipe, "--graphpipe"), pairs(a.torch, "--torch")
    precs = [p for p in ORDER if p in gp or p in pt] + sorted((set(gp) | set(pt)) - set(ORDER))
    if not precs:
        sys.exit("compare_train: nothing to compare")
    some = next(iter(pt.values()), None)
    if some:
        print("PyTorch %s on %s, %s, batch %d" % (some["torch"], some["device"], some["optimizer"], some["batch_size"]))
    convs(gp, pt, precs)
    steps = max(len(d["losses"]) for d in list(gp.values()) + list(pt.values()))
    head = "%5s" % "step"
    for p in precs:
        head += "  %12s %12s %9s" % ("graphpipe " + p, "torch " + p, "rel")
    print(head)
    worst = {}
    for k in range(steps):
        line = "%5d" % (k + 1)
        for p in precs:
            g = gp[p]["losses"][k] if p in gp and k < len(gp[p]["losses"]) else None
            t = pt[p]["losses"][k] if p in pt and k < len(pt[p]["losses"]) else None
            rel = abs(g - t) / max(abs(t), 1e-12) if g is not None and t is not None else None
            if rel is not None:
                worst[p] = max(worst.get(p, 0.0), rel)
            line += "  %12s %12s %9s" % ("%.7g" % g if g is not None else "-", "%.7g" % t if t is not None else "-",
                                          "%.2e" % rel if rel is not None else "-")
        print(line)
    for p in precs:
        if p in worst:
            print("%s losses: largest relative difference %.3e over %d steps" % (p, worst[p], steps))
    print("%-6s %18s %18s %8s" % ("", "graphpipe s/iter", "torch s/iter", "ratio"))
    estimated = False
    for p in precs:
        g, exact = gp_time(gp[p], a.warmup) if p in gp else (None, True)
        t = pt[p]["median_iteration_s"] if p in pt else None
        estimated |= not exact
        print("%-6s %18s %18s %8s" % (p, ("%.4f" % g + ("" if exact else "*")) if g else "-", "%.4f" % t if t else "-",
                                       "%.3f" % (g / t) if g and t else "-"))
    if estimated:
        print("* mean over every step, the first's start-up included: this graphpipe's train --json has no per-step times")


if __name__ == "__main__":
    main()
