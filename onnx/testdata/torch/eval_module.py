"""Evaluates weights graphpipe wrote (export, or a dump's final.safetensors) in the ORIGINAL PyTorch module.

    /usr/bin/python3 onnx/testdata/torch/eval_module.py NAME WEIGHTS.safetensors EVAL.safetensors --loss L [--accuracy A]

NAME is a model of models.py (two_tower, inception_block, wide_deep, residual_mlp, ...). The module is
built, loaded with WEIGHTS by state_dict key (every key but BatchNorm's num_batches_tracked), put in
eval mode (BatchNorm by its running statistics, no dropout), and run over EVAL (one tensor per model
input and `label`, samples first, as `graphpipe data synth` writes) in batches of --batch. It prints
the mean loss over every sample and, for softmax cross-entropy, the accuracy, and exits 1 when the loss
differs from --loss by more than --tol relative (1e-4) or the accuracy from --accuracy by more than
half a sample.
"""
import argparse
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import models  # noqa: E402
import replay_module  # noqa: E402  (load, load_init, fail)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("name", choices=sorted(models.MODELS))
    ap.add_argument("weights")
    ap.add_argument("data")
    ap.add_argument("--loss", type=float, required=True, help="the mean loss graphpipe printed")
    ap.add_argument("--accuracy", type=float, help="the accuracy graphpipe printed")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--label", default="label")
    ap.add_argument("--tol", type=float, default=1e-4)
    a = ap.parse_args()
    torch.manual_seed(0)
    spec = models.MODELS[a.name]
    model = models.build(a.name)
    replay_module.load_init(model, replay_module.load(a.weights))
    model.eval()
    data = replay_module.load(a.data)
    xs = []
    for i in spec["inputs"] + [{"name": a.label, "dtype": spec["label"]["dtype"]}]:
        if i["name"] not in data:
            replay_module.fail("%s: no tensor %s" % (a.data, i["name"]))
        v = torch.tensor(data[i["name"]])
        xs.append(v.long() if i["dtype"] == "int64" else v.float())
    n = xs[0].shape[0]
    lossf = models.loss_fn(spec["loss"])
    total, right = 0.0, 0
    with torch.no_grad():
        for lo in range(0, n, a.batch):
            hi = min(lo + a.batch, n)
            out = model(*[x[lo:hi] for x in xs[:-1]])
            label = xs[-1][lo:hi]
            total += float(lossf(out, label)) * (hi - lo)
            if spec["loss"] == "softmax_cross_entropy":
                right += int((out.argmax(dim=-1) == label).sum())
    loss = total / n
    line = "%s: %d samples: eval loss pytorch %.7g graphpipe %.7g relative difference %.3g (tolerance %.1e)" % (
        a.name, n, loss, a.loss, abs(loss - a.loss) / max(abs(loss), 1e-12), a.tol)
    ok = abs(loss - a.loss) <= a.tol * max(abs(loss), 1e-12)
    if spec["loss"] == "softmax_cross_entropy":
        acc = right / n
        line += "; accuracy pytorch %.6f" % acc
        if a.accuracy is not None:
            line += " graphpipe %.6f" % a.accuracy
            ok = ok and abs(acc - a.accuracy) * n < 0.5
    print(line)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
