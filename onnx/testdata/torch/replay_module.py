"""Replays a `graphpipe train --dump DIR` run of an imported ONNX model against the ORIGINAL PyTorch module.

usage: /usr/bin/python3 onnx/testdata/torch/replay_module.py MODEL_NAME DUMP_DIR --optimizer sgd|adam --lr LR
           [--momentum M] --micro-batch B [--label NAME] [--tol 2e-4] [--first-loss-only]

MODEL_NAME is an entry of models.py (two_tower, inception_block, wide_deep, residual_mlp, googlenet,
inception_v3, resnet50, mobilenet_v3_small, vit_b_16). DUMP_DIR holds what `graphpipe train MODEL.json --init W.safetensors --steps K
--optimizer ... --micro-batch B --dump DIR` writes:

  init.safetensors   every parameter and buffer under its state_dict name, F32
  data.safetensors   each step's batch, "<step>/<input name>" (F32, or I32 for int inputs), batch-major;
                     the label is "<step>/label" (or --label NAME)
  final.safetensors  the same names as init, after the last step
  losses.json        each step's mean loss, before its update

The module is built from models.py, init.safetensors is loaded into it by name (load_state_dict, strict:
the only state_dict keys the dump may lack are BatchNorm's num_batches_tracked, which ONNX does not
carry and which no computation reads while momentum is set; they keep the module's value), and it trains
in training mode for len(losses.json) steps: for each step's batch of n samples, micro-batches of B in
order, each one's loss (PyTorch's default mean reduction) scaled by its size / n before backward, one
optimizer step per batch (torch.optim.SGD(lr, momentum) or torch.optim.Adam(lr), their defaults
otherwise), as stage/testdata/torch/replay.py does for graphpipe's own models. Every BatchNorm forward of
a micro-batch updates the running statistics once, as PyTorch does.

It then prints, per tensor of final.safetensors, the largest relative difference max|a-b| / max|b|, and
per step the loss's relative difference, and exits 1 if any exceeds --tol (or a tensor is missing on
either side), 2 if the dump cannot be read.

Some values have an identically zero gradient, so both sides hold only rounding noise there, which Adam
(dividing by the gradient's own scale) turns into steps of about lr in arbitrary directions. Under
--optimizer adam they are reported but not judged: the key third of an attention's in_proj_bias (as in
replay.py: a constant added to every key shifts each row of scores equally, and softmax ignores it), and
the bias of a Conv whose output feeds a BatchNorm directly (the batch mean removes it) together with that
BatchNorm's running_mean (which accumulates the bias). Under sgd the noise stays at lr times the
gradient's rounding error, so they are judged: a wrong batch-norm or softmax backward shows there.
A batch norm's bias whose every path meets another batch norm through additions and 1x1 convolutions
alone (MobileNetV3's linear bottlenecks) has a zero gradient too, and the next batch norm's batch mean is
zero: those are judged against the scale they live on (bn_shifts), under both optimizers.

--first-loss-only: compute only step 0's loss on the dumped batch (forward only, micro-batches of B, the
same scaling) and compare it with losses.json[0]; final.safetensors is not read. Its tolerance is 1e-4
unless --tol is given (the tolerance for ResNet-50 and GoogLeNet).
"""
import argparse
import copy
import json
import os
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "stage", "testdata", "torch"))
import gptorch  # noqa: E402  (read_safetensors)
import models  # noqa: E402


def fail(msg):
    print("replay_module: " + msg, file=sys.stderr)
    sys.exit(2)


def load(path):
    if not os.path.exists(path):
        fail("%s: no such file" % path)
    try:
        return gptorch.read_safetensors(path)
    except Exception as e:  # noqa: BLE001
        fail("%s: %s" % (path, e))


def load_init(model, init):
    """Loads init into model by name, strictly but for num_batches_tracked; returns the keys left alone."""
    sd = model.state_dict()
    extra = sorted(k for k in init if k not in sd)
    if extra:
        fail("init.safetensors: %s not in the module's state_dict" % ", ".join(extra))
    kept = sorted(k for k in sd if k not in init)
    bad = [k for k in kept if not k.endswith("num_batches_tracked")]
    if bad:
        fail("init.safetensors lacks %s" % ", ".join(bad))
    state = {}
    for k, v in sd.items():
        if k in init:
            if tuple(init[k].shape) != tuple(v.shape):
                fail("init.safetensors: %s has shape %s, the module %s" % (k, list(init[k].shape), list(v.shape)))
            state[k] = torch.tensor(init[k]).to(v.dtype)
        else:
            state[k] = v.clone()
    model.load_state_dict(state, strict=True)
    return kept


def batches(name, data, label_name, steps):
    """Each step's (inputs in forward's order, label)."""
    spec = models.MODELS[name]
    out = []
    for step in range(steps):
        xs = []
        for i in spec["inputs"] + [{"name": label_name, "dtype": spec["label"]["dtype"], "label": True}]:
            key = "%d/%s" % (step, i["name"])
            if key not in data:
                fail("data.safetensors: no %s" % key)
            v = torch.tensor(data[key])
            if i["dtype"] == "int64":
                if v.dtype != torch.int32:
                    fail("data.safetensors: %s is %s, want I32" % (key, v.dtype))
                v = v.long()
            elif v.dtype != torch.float32:
                fail("data.safetensors: %s is %s, want F32" % (key, v.dtype))
            xs.append(v)
        n = xs[0].shape[0]
        if any(x.shape[0] != n for x in xs):
            fail("data.safetensors: step %d's tensors have different batch sizes" % step)
        out.append((xs[:-1], xs[-1]))
    return out


def step_loss(model, lossf, xs, label, b, backward):
    """One batch's mean loss over micro-batches of b, each scaled by its size / n (backward if asked)."""
    n = label.shape[0]
    total = 0.0
    for lo in range(0, n, b):
        hi = min(lo + b, n)
        loss = lossf(model(*[x[lo:hi] for x in xs]), label[lo:hi])
        if backward:
            (loss * ((hi - lo) / n)).backward()
        total += float(loss) * (hi - lo) / n
    return total


def conv_bias_before_bn(name):
    """[(conv bias name, batch norm running_mean name)] for every Conv with a bias whose output feeds a
    BatchNorm directly: in training mode that bias's gradient is identically zero (the batch mean removes
    it), so its value is rounding noise, which Adam amplifies, and so is its share of the running mean.
    The graph is traced (torch.fx), so that only a real edge counts; a module fx cannot trace is watched
    by hooks instead, each output held until the forward ends (so no two tensors share an id)."""
    import torch.fx
    model = copy.deepcopy(models.build(name))
    mods = dict(model.named_modules())
    try:
        graph = torch.fx.symbolic_trace(model).graph
    except Exception:  # noqa: BLE001
        return conv_bias_before_bn_hooked(model, name)
    pairs = []
    for n in graph.nodes:
        c = mods.get(n.target) if n.op == "call_module" else None
        if not isinstance(c, torch.nn.modules.conv._ConvNd) or c.bias is None:
            continue
        for u in n.users:
            if u.op == "call_module" and isinstance(mods.get(u.target), torch.nn.modules.batchnorm._BatchNorm):
                pairs.append((n.target + ".bias", u.target + ".running_mean"))
    return pairs


def conv_bias_before_bn_hooked(model, name):
    names = {m: n for n, m in model.named_modules()}
    conv_out, pairs, hooks, held = {}, [], [], []

    def on_conv(m, _, out):
        if m.bias is not None:
            held.append(out)
            conv_out[id(out)] = names[m]

    def on_bn(m, inp, _):
        if id(inp[0]) in conv_out:
            pairs.append((conv_out[id(inp[0])] + ".bias", names[m] + ".running_mean"))

    for m in model.modules():
        if isinstance(m, torch.nn.modules.conv._ConvNd):
            hooks.append(m.register_forward_hook(on_conv))
        elif isinstance(m, torch.nn.modules.batchnorm._BatchNorm):
            hooks.append(m.register_forward_hook(on_bn))
    with torch.no_grad():
        model(*models.example_inputs(name, batch=2))
    for h in hooks:
        h.remove()
    return pairs


def bn_shifts(name):
    """{tensor: the tensor whose scale judges it} for the batch norms whose bias has an identically zero
    gradient, and those whose batch mean is identically zero, in training mode.

    A per-channel shift of a tensor passes through an addition and through a 1x1 Conv without bias or
    padding (one group) as a per-channel shift, and a batch norm in training mode removes it. So where
    every path from a batch norm's output meets another batch norm through nothing but those (MobileNetV3's
    linear bottlenecks, before the next block's expansion and through the residual additions), that
    bias's gradient is identically zero and it stays at its initial 0; and a batch norm whose input is
    such a zero-bias output (through the same ops) sees a batch mean of identically zero. Both sides hold
    rounding noise there, which a relative difference against themselves would call disagreement. They
    are judged instead against the scale they live on: the bias against its batch norm's weight, the
    running mean against the square root of its running variance."""
    import operator

    import torch.fx
    model = copy.deepcopy(models.build(name))
    mods = dict(model.named_modules())
    try:
        graph = torch.fx.symbolic_trace(model).graph
    except Exception:  # noqa: BLE001  (a module fx cannot trace: nothing is excused)
        return {}

    def is_bn(n):
        return n.op == "call_module" and isinstance(mods.get(n.target), torch.nn.modules.batchnorm._BatchNorm)

    def is_pointwise_conv(n):
        c = mods.get(n.target) if n.op == "call_module" else None
        return (isinstance(c, torch.nn.Conv2d) and c.bias is None and tuple(c.kernel_size) == (1, 1)
                and c.groups == 1 and not any(c.padding))

    def is_add(n):
        return ((n.op == "call_function" and n.target in (operator.add, operator.iadd, torch.add))
                or (n.op == "call_method" and n.target in ("add", "add_")))

    memo = {}

    def removed(n):  # a shift of n's output is removed on every path
        if n not in memo:
            memo[n] = False  # no cycles in a traced graph; a guard all the same
            memo[n] = bool(n.users) and all(is_bn(u) or ((is_pointwise_conv(u) or is_add(u)) and removed(u))
                                            for u in n.users)
        return memo[n]

    zero_bias = {n for n in graph.nodes if is_bn(n) and removed(n)}

    def centered(n):  # n's per-channel batch mean is identically zero
        if n in zero_bias:
            return True
        if is_pointwise_conv(n):
            return centered(n.args[0])
        if is_add(n):
            return all(isinstance(a, torch.fx.Node) and centered(a) for a in n.args)
        return False

    out = {}
    for n in graph.nodes:
        if n in zero_bias:
            out[n.target + ".bias"] = n.target + ".weight"
        if is_bn(n) and centered(n.args[0]):
            out[n.target + ".running_mean"] = n.target + ".running_var"
    return out


def rel(a, b):
    r = abs(a - b) / max(abs(b), 1e-12)
    return r if np.isfinite(r) else float("inf")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", help="a model of models.py")
    ap.add_argument("dump")
    ap.add_argument("--optimizer", required=True, choices=["sgd", "adam"])
    ap.add_argument("--lr", type=float, required=True)
    ap.add_argument("--momentum", type=float, default=0.0)
    ap.add_argument("--micro-batch", type=int, required=True)
    ap.add_argument("--label", default="label", help="the label's input name in data.safetensors")
    ap.add_argument("--tol", type=float)
    ap.add_argument("--first-loss-only", action="store_true")
    a = ap.parse_args()
    if a.micro_batch < 1:
        fail("--micro-batch must be at least 1")
    tol = a.tol if a.tol is not None else (1e-4 if a.first_loss_only else 2e-4)
    torch.manual_seed(0)
    model = models.build(a.model)
    lossf = models.loss_fn(models.MODELS[a.model]["loss"])
    init = load(os.path.join(a.dump, "init.safetensors"))
    data = load(os.path.join(a.dump, "data.safetensors"))
    try:
        losses = json.load(open(os.path.join(a.dump, "losses.json")))
    except (OSError, ValueError) as e:
        fail("losses.json: %s" % e)
    if not isinstance(losses, list) or not losses:
        fail("losses.json: want a non-empty list of numbers")
    kept = load_init(model, init)
    if kept:
        print("not in the dump, left as built: %s" % ", ".join(kept))
    model.train()

    if a.first_loss_only:
        (xs, label), = batches(a.model, data, a.label, 1)
        with torch.no_grad():
            got = step_loss(model, lossf, xs, label, a.micro_batch, backward=False)
        r = rel(got, losses[0])
        print("step 0 loss: pytorch %.8g graphpipe %.8g relative difference %.3e (tolerance %.1e)" % (got, losses[0], r, tol))
        sys.exit(0 if r <= tol else 1)

    final = load(os.path.join(a.dump, "final.safetensors"))
    params = [p for _, p in model.named_parameters()]
    if a.optimizer == "sgd":
        opt = torch.optim.SGD(params, lr=a.lr, momentum=a.momentum)
    else:
        opt = torch.optim.Adam(params, lr=a.lr)
    worst_loss = 0.0
    for step, (xs, label) in enumerate(batches(a.model, data, a.label, len(losses))):
        opt.zero_grad()
        total = step_loss(model, lossf, xs, label, a.micro_batch, backward=True)
        r = rel(total, losses[step])
        worst_loss = max(worst_loss, r)
        print("step %d loss: pytorch %.8g graphpipe %.8g relative difference %.3e" % (step, total, losses[step], r))
        opt.step()

    # Tensors that hold amplified rounding noise under Adam (reported, not judged); SGD keeps the noise
    # at lr times the gradient's rounding error, so everything is judged there.
    noisy = set()
    if a.optimizer == "adam":
        for bias, mean in conv_bias_before_bn(a.model):
            noisy |= {bias, mean}
    shifts = bn_shifts(a.model)
    worst, problems = 0.0, []
    state = {k: v for k, v in model.state_dict().items() if k not in kept}
    for name in sorted(set(state) | set(final)):
        if name not in final:
            problems.append("final.safetensors lacks %s" % name)
            continue
        if name not in state:
            problems.append("final.safetensors has %s, which the module does not" % name)
            continue
        got, want = state[name].detach().float().numpy(), final[name]
        if got.shape != want.shape:
            problems.append("%s: shape %s, the module's %s" % (name, list(want.shape), list(got.shape)))
            continue
        scale = max(float(abs(want).max()) if want.size else 0.0, 1e-12)
        if name in shifts and shifts[name] in final:
            ref = np.abs(final[shifts[name]])
            scale = max(float((np.sqrt(ref) if name.endswith("running_mean") else ref).max()), 1e-12)
            r = float(abs(got - want).max() / scale)
            worst = max(worst, r if np.isfinite(r) else float("inf"))
            print("%-44s %.3e (zero gradient or mean: against the scale of %s)" % (name, r, shifts[name]))
            continue
        if name.endswith("in_proj_bias") and a.optimizer == "adam":
            d = want.shape[0] // 3
            key = float(abs(got[d:2 * d] - want[d:2 * d]).max() / scale)
            got, want = np.concatenate([got[:d], got[2 * d:]]), np.concatenate([want[:d], want[2 * d:]])
            print("%-44s key third (zero gradient, not judged under adam) %.3e" % (name, key))
        r = float(abs(got - want).max() / scale) if want.size else 0.0
        if not np.isfinite(r):
            r = float("inf")
        if name in noisy:
            print("%-44s %.3e (a conv bias before a batch norm, zero gradient: not judged under adam)" % (name, r))
            continue
        worst = max(worst, r)
        print("%-44s %.3e" % (name, r))
    for p in problems:
        print(p)
    print("losses: largest relative difference %.3e" % worst_loss)
    print("final parameters and buffers: largest relative difference %.3e (tolerance %.1e)" % (worst, tol))
    sys.exit(0 if worst <= tol and worst_loss <= tol and not problems else 1)


if __name__ == "__main__":
    main()
