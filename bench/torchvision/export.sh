#!/bin/sh
# Exports torchvision's GoogLeNet (aux_logits=False) and ResNet-50, untrained
# (weights=None), to ONNX with Debian's PyTorch at /usr/bin/python3, and
# imports each at batch 32: the imported models of the planner's search-time
# cases (bench/history.md, issue 34). The .onnx files are about 100 MB each
# and are generated on demand, never committed.
#
# usage: bench/torchvision/export.sh DIR [GRAPHPIPE]
#   writes DIR/googlenet.onnx, DIR/resnet50.onnx, DIR/googlenet.json and DIR/resnet50.json
set -eu
dir=${1:?usage: export.sh DIR [GRAPHPIPE]}
gp=${2:-graphpipe}
root=$(cd "$(dirname "$0")/../.." && pwd)
mkdir -p "$dir"
for m in googlenet resnet50; do
	# onnx/testdata/torch/models.py builds them: googlenet with aux_logits=False,
	# init_weights=True and dropout 0, resnet50 as torchvision gives it
	[ -s "$dir/$m.onnx" ] || /usr/bin/python3 "$root/onnx/testdata/torch/export.py" "$m" "$dir/$m.onnx"
	"$gp" import "$dir/$m.onnx" -o "$dir/$m.json" --batch 32 --loss softmax_cross_entropy
done
