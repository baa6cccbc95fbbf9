#!/usr/bin/env python3
"""Exports torchvision's ResNet-50 (weights=None) to ONNX, for bench/gpu/resnet50.json.

usage: python3 bench/gpu/resnet50_onnx.py OUT.onnx

It writes the model as README's import section asks (training mode, no constant folding, the batch axis
dynamic, opset 17), so that every weight keeps its state_dict key and batch_norm its running statistics.
bench/gpu/resnet50.json was made from it with:

    python3 bench/gpu/resnet50_onnx.py /tmp/resnet50.onnx
    graphpipe import /tmp/resnet50.onnx --name resnet50 --loss softmax_cross_entropy --batch 64 -o bench/gpu/resnet50.json

(torch 1.13 and torchvision 0.14, Debian's). The weights are not kept: graphpipe initialises them from its seed,
and bench/gpu/train_vs_torch.sh hands PyTorch the same ones through a --dump.
"""
import sys

import torch
import torchvision


def main(out):
    torch.manual_seed(0)
    model = torchvision.models.resnet50(weights=None)
    image = torch.randn(2, 3, 224, 224)
    torch.onnx.export(model, (image,), out, input_names=["image"], output_names=["output"],
                      dynamic_axes={"image": {0: "batch"}, "output": {0: "batch"}}, opset_version=17,
                      training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
