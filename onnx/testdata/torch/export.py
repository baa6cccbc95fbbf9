"""Exports the test models of models.py to ONNX, as `graphpipe import` expects them.

usage: /usr/bin/python3 onnx/testdata/torch/export.py NAME OUT.onnx [--sidecar OUT.json] [--opset 17]
       /usr/bin/python3 onnx/testdata/torch/export.py --all DIR        (the four small models + sidecars)

The export is exactly (README):

  torch.onnx.export(model, args, path, input_names=[...], output_names=["output"],
                    dynamic_axes={name: {0: "batch"} for every input and output}, opset_version=17,
                    training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False)

with args a batch of 2 random samples. The sidecar (DIR/NAME.json with --all) is what tests read: the
inputs' per-sample shapes, dtypes and int ranges, the --loss kind, the label, and what the exported
graph holds (op types, initializers and their shapes, the state_dict keys that are not initializers).
"""
import argparse
import collections
import json
import os
import re
import sys

import onnx
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import models  # noqa: E402

OPSET = 17


def export(name, path, opset=OPSET):
    """Writes the named model to path; returns the module it exported."""
    model = models.build(name)
    args = models.example_inputs(name, batch=2)
    input_names = [i["name"] for i in models.MODELS[name]["inputs"]]
    torch.onnx.export(model, args, path, input_names=input_names, output_names=["output"],
                      dynamic_axes={n: {0: "batch"} for n in input_names + ["output"]},
                      opset_version=opset, training=torch.onnx.TrainingMode.TRAINING,
                      do_constant_folding=False)
    return model


def describe(name, path, model, opset=OPSET):
    """The sidecar document of the named model, exported to path."""
    spec = models.MODELS[name]
    m = onnx.load(path, load_external_data=False)
    onnx.checker.check_model(m)
    sd = model.state_dict()
    buffers = {n for n, _ in model.named_buffers()}
    inits = {t.name: list(t.dims) for t in m.graph.initializer}
    counts = collections.Counter(n.op_type for n in m.graph.node)
    inputs = []
    for i in spec["inputs"]:
        d = {"name": i["name"], "shape": i["shape"], "dtype": i["dtype"],
             "graphpipe_dtype": "int32" if i["dtype"] == "int64" else "float32"}
        if "range" in i:
            d["range"] = i["range"]
        inputs.append(d)
    label = dict(name="label", **spec["label"])
    label["graphpipe_dtype"] = "int32" if label["dtype"] == "int64" else "float32"
    with torch.no_grad():
        out = model(*models.example_inputs(name, batch=2))
    return {
        "model": name,
        "onnx": os.path.basename(path) if spec["small"] else None,
        "export": {"opset_version": opset, "training": "TRAINING", "do_constant_folding": False,
                   "torch": torch.__version__, "onnx": onnx.__version__, "ir_version": m.ir_version},
        "inputs": inputs,
        "output": {"name": "output", "shape": list(out.shape[1:]), "dtype": "float32"},
        "loss": spec["loss"],
        "import_args": ["--loss", spec["loss"]],
        "label": label,
        "parameters": {n: list(p.shape) for n, p in model.named_parameters()},
        "buffers": {n: list(sd[n].shape) for n in sorted(buffers) if sd[n].is_floating_point()},
        "initializers": inits,
        "state_dict_not_initializers": sorted(k for k in sd if k not in inits),
        "initializers_not_in_state_dict": sorted(k for k in inits if k not in sd),
        "op_types": dict(sorted(counts.items())),
        "nodes": len(m.graph.node),
        "note": "the export traces one forward in training mode on a batch of 2 random samples "
                "(models.example_inputs(name, batch=2)), so the BatchNorm running statistics in the file "
                "(and in `graphpipe import --weights`) are the module's after that forward, not as built",
    }


def write_sidecar(doc, path):
    text = json.dumps(doc, indent=1)
    # Lists of numbers (shapes, ranges) on one line.
    text = re.sub(r"\[\s*(-?[0-9.e+-]+(?:,\s*-?[0-9.e+-]+)*)\s*\]",
                  lambda m: "[" + ", ".join(x.strip() for x in m.group(1).split(",")) + "]", text)
    text = re.sub(r"\[\s+\]", "[]", text)
    with open(path, "w") as f:
        f.write(text + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("name", nargs="?")
    ap.add_argument("out", nargs="?")
    ap.add_argument("--all", metavar="DIR")
    ap.add_argument("--sidecar", metavar="JSON")
    ap.add_argument("--opset", type=int, default=OPSET)
    a = ap.parse_args()
    if a.all:
        os.makedirs(a.all, exist_ok=True)
        for name in models.SMALL:
            path = os.path.join(a.all, name + ".onnx")
            model = export(name, path, a.opset)
            write_sidecar(describe(name, path, model, a.opset), os.path.join(a.all, name + ".json"))
            print("%s: %d bytes" % (path, os.path.getsize(path)))
        return
    if not a.name or not a.out:
        ap.error("NAME OUT.onnx or --all DIR")
    model = export(a.name, a.out, a.opset)
    print("%s: %d bytes" % (a.out, os.path.getsize(a.out)))
    if a.sidecar:
        write_sidecar(describe(a.name, a.out, model, a.opset), a.sidecar)


if __name__ == "__main__":
    main()
