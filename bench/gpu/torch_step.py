#!/usr/bin/env python3
"""PyTorch eager training of a graphpipe model file, from a `graphpipe train --dump DIR` run's weights and batches.

usage: python3 bench/gpu/torch_step.py MODEL.json DIR --optimizer adam --lr 0.001
    [--precision fp32|tf32|bf16] [--device cuda|cpu] [--steps N] [--micro-batch B] [--warmup W] [--json FILE]
    [--momentum M] [--nesterov] [--weight-decay WD] [--no-decay-bias-norm] [--threads N]

The model is stage/testdata/torch/gptorch.py's interpreter of the model file (the one `make replay` checks
graphpipe against), built on the device from DIR/init.safetensors; each step trains on DIR/data.safetensors'
batch of that step with torch.optim's optimizer as graphpipe's flags configure it (replay.py's optimizer), so the
run is the computation graphpipe's run was. Precisions: fp32 (TF32 off, as cuBLAS SGEMM computes, in cuDNN's
convolutions too: torch.backends.cudnn.allow_tf32, on by default in PyTorch, is turned off), tf32
(torch.backends.cuda.matmul.allow_tf32 and cudnn.allow_tf32 on), bf16 (torch.autocast to bfloat16 around the
forward pass; weights, gradients and optimizer state stay float32), fp64 (the model, its state and the batches
in float64: the reference that says how far float32 alone moves a model's losses, where fp32's losses part
from graphpipe's).

Prints each step's loss and the median iteration time over the steps after the first --warmup (default 2): an
iteration is the micro-batches' forward and backward, the optimizer step and the gradients' reset, timed between
two torch.cuda.synchronize calls (the batch is moved to the device inside it, as a training loop does). The
losses are read from the device after the last step, so no step waits for one. --json FILE writes the same as a
JSON object for bench/gpu/compare_train.py. On the CPU (--device cpu), the fp32 losses equal graphpipe's dump to
about 1e-5: the check that this is the same computation.
"""
import argparse
import json
import os
import statistics
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "stage", "testdata", "torch"))
import gptorch  # noqa: E402
import replay  # noqa: E402  (its optimizer: torch.optim configured as graphpipe's flags configure graphpipe's)


def parse(argv):
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("dump")
    ap.add_argument("--optimizer", required=True, choices=["sgd", "adam", "adamw"])
    ap.add_argument("--lr", type=float, required=True)
    ap.add_argument("--momentum", type=float, default=0.0)
    ap.add_argument("--nesterov", action="store_true")
    ap.add_argument("--weight-decay", type=float, default=None)
    ap.add_argument("--no-decay-bias-norm", action="store_true")
    ap.add_argument("--precision", default="fp32", choices=["fp32", "tf32", "bf16", "fp64"])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--cudnn-benchmark", action="store_true",
                    help="torch.backends.cudnn.benchmark: cuDNN's measured search picks each convolution's algorithms "
                         "(PyTorch's default is off: its heuristics)")
    ap.add_argument("--steps", type=int, default=0, help="steps to run (default: every step of the dump)")
    ap.add_argument("--micro-batch", type=int, default=0)
    ap.add_argument("--warmup", type=int, default=2, help="steps left out of the median")
    ap.add_argument("--json", default="", help="write the losses and times to FILE")
    ap.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (default: PyTorch's own choice)")
    ap.add_argument("--profile", default="", help="after the steps, one more step under torch.profiler: its ops' device time, most first, to FILE")
    return ap.parse_args(argv)


def build(a, dev):
    """The model on dev, from the dump's initial parameters and buffers."""
    doc = json.load(open(a.model))
    init = gptorch.read_safetensors(os.path.join(a.dump, "init.safetensors"))
    if dev.type != "cpu" and hasattr(torch, "set_default_device"):
        torch.set_default_device(dev)  # gptorch makes its tensors (masks, feeds) where the default device is
    dtype = torch.float64 if a.precision == "fp64" else torch.float32
    model = gptorch.Model(doc, init).to(dev, dtype)
    model.bufs = {k: v.to(dev, dtype) for k, v in model.bufs.items()}
    return doc, model


def batches(a, steps):
    """Each step's batch, {input: tensor on the host}, from the dump."""
    data = gptorch.read_safetensors(os.path.join(a.dump, "data.safetensors"))
    out = [{} for _ in range(steps)]
    for k, v in data.items():
        step, name = k.split("/", 1)
        if int(step) < steps:
            out[int(step)][name] = torch.from_numpy(v)
    return out


def cudnn_setting(dev):
    """How PyTorch ran its convolutions: cuDNN's version and the settings that choose its algorithms and math
    (benchmark: off by default, cuDNN's heuristics; on with --cudnn-benchmark, its measured search, as graphpipe's
    default; allow_tf32, which PyTorch turns on by default and this
    script sets per precision)."""
    if dev.type != "cuda" or not torch.backends.cudnn.is_available():
        return None
    return {"version": torch.backends.cudnn.version(), "enabled": torch.backends.cudnn.enabled,
            "benchmark": torch.backends.cudnn.benchmark, "allow_tf32": torch.backends.cudnn.allow_tf32}


def main(argv=None):
    a = parse(argv)
    dev = torch.device(a.device)
    if dev.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = a.precision == "tf32"
        torch.backends.cudnn.allow_tf32 = a.precision == "tf32"
        torch.backends.cudnn.benchmark = a.cudnn_benchmark
    elif a.precision == "tf32":
        print("torch_step: tf32 is a CUDA setting; on %s it computes fp32" % dev, file=sys.stderr)
    if a.threads:
        torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    doc, model = build(a, dev)
    lname = gptorch.loss_name(doc)
    dumped = json.load(open(os.path.join(a.dump, "losses.json")))
    steps = a.steps or len(dumped)
    if steps > len(dumped):
        sys.exit("torch_step: %d steps asked, the dump holds %d" % (steps, len(dumped)))
    data = batches(a, steps)
    params = list(model.p.values())
    opt = replay.optimizer(a, params)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    autocast = a.precision == "bf16"
    losses, times = [], []
    def one(step):
        batch = {k: v.to(dev, torch.float64 if a.precision == "fp64" and v.is_floating_point() else None, non_blocking=True)
                 for k, v in data[step].items()}
        n = next(iter(batch.values())).shape[0]
        b = a.micro_batch or n
        total = torch.zeros((), device=dev)
        for lo in range(0, n, b):
            feeds = {k: v[lo:lo + b] for k, v in batch.items()}
            with torch.autocast(device_type=dev.type, dtype=torch.bfloat16, enabled=autocast):
                loss = model(feeds)[lname]
            (loss * (b / n)).backward()
            total += loss.detach().float() * (b / n)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return n, total

    for step in range(steps):
        sync()
        t0 = time.perf_counter()
        n, total = one(step)
        sync()
        times.append(time.perf_counter() - t0)
        losses.append(total)
    if a.profile:
        profile(a, dev, one, steps - 1, sync)
    losses = [float(x) for x in losses]
    timed = times[a.warmup:] or times
    med = statistics.median(timed)
    name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu"
    print("torch %s %s on %s, %s, batch %d: %d steps" % (torch.__version__, a.precision, name, a.optimizer, n, steps))
    for step, x in enumerate(losses):
        print("step %d: loss %.7g (graphpipe's dump: %.7g), %.4f s" % (step + 1, x, dumped[step], times[step]))
    print("median iteration: %.4f s (steps %d to %d)" % (med, len(times) - len(timed) + 1, len(times)))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"format": "graphpipe/torch-step@1", "torch": torch.__version__, "device": name, "precision": a.precision,
                       "optimizer": a.optimizer, "lr": a.lr, "batch_size": n, "losses": losses, "iteration_s": times,
                       "warmup": a.warmup, "median_iteration_s": med, "cudnn": cudnn_setting(dev)}, f)


def profile(a, dev, one, step, sync):
    """One more step (the last batch again) under torch.profiler: each op's
    self device time, most first, written to a.profile."""
    acts = [torch.profiler.ProfilerActivity.CPU]
    if dev.type == "cuda":
        acts.append(torch.profiler.ProfilerActivity.CUDA)
    with torch.profiler.profile(activities=acts) as prof:
        one(step)
        sync()
    keys = ["self_device_time_total", "self_cuda_time_total"] if dev.type == "cuda" else ["self_cpu_time_total"]
    for key in keys:  # the name PyTorch 2 gives it, then PyTorch 1's
        try:
            table = prof.key_averages().table(sort_by=key, row_limit=40, max_name_column_width=60)
            break
        except Exception:
            table = None
    with open(a.profile, "w") as f:
        f.write(table or prof.key_averages().table(row_limit=40))


if __name__ == "__main__":
    main()
