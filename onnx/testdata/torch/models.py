"""The PyTorch test models for `graphpipe import` (ONNX) and the replay of graphpipe runs against them.

Only torch and torchvision (Debian's python3-torch 1.13, python3-torchvision 0.14). Each entry of MODELS
describes one model:

  build()   -> the nn.Module, its parameters drawn from a fixed seed (no dropout anywhere)
  inputs    -> what the module's forward takes, in order: name, per-sample shape, dtype (as PyTorch and the
               ONNX file hold it: "float32" or "int64"), and for int inputs the range [lo, hi)
  loss      -> the `graphpipe import --loss` kind appended to the module's output
  label     -> the loss's second input: per-sample shape, dtype, range [lo, hi) for an int label,
               values (the set it takes) for a 0/1 float target
  small     -> True for the four models whose .onnx files are committed in ../models/

The module's forward takes the inputs positionally, in the order of `inputs`, and returns one tensor
(the "output" of the ONNX file). loss_fn(kind) gives the PyTorch loss graphpipe's --loss kind means.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F


class TwoTower(nn.Module):
    """A text tower (embedding, self-attention, layer norm, linear, mean over the sequence) and an image
    tower (two conv/batch-norm/relu blocks, a max pool between them, a global average pool), concatenated
    and classified into 10 classes."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(100, 32)
        self.attn = nn.MultiheadAttention(32, 4, dropout=0.0, batch_first=True)
        self.norm = nn.LayerNorm(32)
        self.proj = nn.Linear(32, 32)
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(8)
        self.pool = nn.MaxPool2d(2)
        self.conv2 = nn.Conv2d(8, 16, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(16)
        self.gap = nn.AdaptiveAvgPool2d(1)
        self.head = nn.Linear(32 + 16, 10)

    def forward(self, tokens, image):
        t = self.emb(tokens)
        t, _ = self.attn(t, t, t, need_weights=False)
        t = self.proj(self.norm(t)).mean(dim=1)
        x = self.pool(F.relu(self.bn1(self.conv1(image))))
        x = F.relu(self.bn2(self.conv2(x)))
        x = torch.flatten(self.gap(x), 1)
        return self.head(torch.cat([t, x], dim=1))


class ConvBN(nn.Module):
    """Conv2d (no bias) → BatchNorm2d (eps 1e-3, as torchvision's Inception) → ReLU."""

    def __init__(self, cin, cout, k, padding=0):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, k, padding=padding, bias=False)
        self.bn = nn.BatchNorm2d(cout, eps=1e-3)

    def forward(self, x):
        return F.relu(self.bn(self.conv(x)))


class InceptionBlock(nn.Module):
    """One Inception block (1×1; 1×1→3×3; 1×1→5×5; 3×3 max pool stride 1 → 1×1) on 3×16×16, concatenated on
    channels, then global average pool, flatten, linear to 10."""

    def __init__(self):
        super().__init__()
        self.b1 = ConvBN(3, 8, 1)
        self.b2_reduce = ConvBN(3, 4, 1)
        self.b2 = ConvBN(4, 8, 3, padding=1)
        self.b3_reduce = ConvBN(3, 4, 1)
        self.b3 = ConvBN(4, 8, 5, padding=2)
        self.b4_pool = nn.MaxPool2d(3, stride=1, padding=1)
        self.b4 = ConvBN(3, 8, 1)
        self.gap = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(32, 10)

    def forward(self, image):
        y = torch.cat([
            self.b1(image),
            self.b2(self.b2_reduce(image)),
            self.b3(self.b3_reduce(image)),
            self.b4(self.b4_pool(image)),
        ], dim=1)
        return self.fc(torch.flatten(self.gap(y), 1))


class WideDeep(nn.Module):
    """Wide: a linear on 8 dense features. Deep: the mean of 4 id embeddings, concatenated with the dense
    features, Linear → GELU → Linear → tanh → Linear. Output: wide + deep, one logit."""

    def __init__(self):
        super().__init__()
        self.wide = nn.Linear(8, 1)
        self.emb = nn.Embedding(50, 8)
        self.fc1 = nn.Linear(16, 32)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(32, 16)
        self.fc3 = nn.Linear(16, 1)

    def forward(self, dense, ids):
        e = self.emb(ids).mean(dim=1)
        h = torch.cat([e, dense], dim=1)
        h = self.fc3(torch.tanh(self.fc2(self.act(self.fc1(h)))))
        return self.wide(dense) + h


class ResidualBlock(nn.Module):
    """x + Linear(GELU(Linear(LayerNorm(x))))."""

    def __init__(self, d, hidden):
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, hidden)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(hidden, d)

    def forward(self, x):
        return x + self.fc2(self.act(self.fc1(self.norm(x))))


class ResidualMLP(nn.Module):
    """[12] → Linear(12, 32) → 3 residual blocks → LayerNorm → Linear(32, 4)."""

    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(12, 32)
        self.blocks = nn.Sequential(*[ResidualBlock(32, 64) for _ in range(3)])
        self.norm = nn.LayerNorm(32)
        self.out = nn.Linear(32, 4)

    def forward(self, x):
        return self.out(self.norm(self.blocks(self.inp(x))))


def _seeded(cls, seed):
    def build():
        torch.manual_seed(seed)
        return cls()
    return build


def _torchvision(name, **kw):
    def build():
        import torchvision
        torch.manual_seed(0)
        return getattr(torchvision.models, name)(weights=None, **kw)
    return build


def _image(size):
    return [{"name": "image", "shape": [3, size, size], "dtype": "float32"}]


CLASSES10 = {"shape": [], "dtype": "int64", "range": [0, 10]}
CLASSES1000 = {"shape": [], "dtype": "int64", "range": [0, 1000]}

MODELS = {
    "two_tower": {
        "build": _seeded(TwoTower, 1),
        "inputs": [{"name": "tokens", "shape": [16], "dtype": "int64", "range": [0, 100]}] + _image(16),
        "loss": "softmax_cross_entropy",
        "label": CLASSES10,
        "small": True,
    },
    "inception_block": {
        "build": _seeded(InceptionBlock, 2),
        "inputs": _image(16),
        "loss": "softmax_cross_entropy",
        "label": CLASSES10,
        "small": True,
    },
    "wide_deep": {
        "build": _seeded(WideDeep, 3),
        "inputs": [{"name": "dense", "shape": [8], "dtype": "float32"},
                   {"name": "ids", "shape": [4], "dtype": "int64", "range": [0, 50]}],
        "loss": "bce_with_logits",
        "label": {"shape": [1], "dtype": "float32", "values": [0, 1]},  # a click: 0.0 or 1.0
        "small": True,
    },
    "residual_mlp": {
        "build": _seeded(ResidualMLP, 4),
        "inputs": [{"name": "x", "shape": [12], "dtype": "float32"}],
        "loss": "mse",
        "label": {"shape": [4], "dtype": "float32"},
        "small": True,
    },
    "googlenet": {
        "build": _torchvision("googlenet", aux_logits=False, init_weights=True, dropout=0.0),
        "inputs": _image(224),
        "loss": "softmax_cross_entropy",
        "label": CLASSES1000,
        "small": False,
    },
    "inception_v3": {
        "build": _torchvision("inception_v3", aux_logits=False, init_weights=True, dropout=0.0),
        "inputs": _image(299),
        "loss": "softmax_cross_entropy",
        "label": CLASSES1000,
        "small": False,
    },
    "mobilenet_v3_small": {
        "build": _torchvision("mobilenet_v3_small", dropout=0.0),
        "inputs": _image(224),
        "loss": "softmax_cross_entropy",
        "label": CLASSES1000,
        "small": False,
    },
    "resnet50": {
        "build": _torchvision("resnet50"),
        "inputs": _image(224),
        "loss": "softmax_cross_entropy",
        "label": CLASSES1000,
        "small": False,
    },
    "vit_b_16": {  # dropout and attention_dropout are 0 by default
        "build": _torchvision("vit_b_16"),
        "inputs": _image(224),
        "loss": "softmax_cross_entropy",
        "label": CLASSES1000,
        "small": False,
    },
}

SMALL = [n for n, m in MODELS.items() if m["small"]]


def build(name):
    """The named module, freshly built from its seed, in training mode."""
    if name not in MODELS:
        raise SystemExit("unknown model %r (known: %s)" % (name, ", ".join(MODELS)))
    m = MODELS[name]["build"]()
    m.train()
    return m


def example_inputs(name, batch=2, seed=0):
    """Random inputs of the named model: a tuple in forward's order."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in MODELS[name]["inputs"]:
        shape = [batch] + i["shape"]
        if i["dtype"] == "int64":
            lo, hi = i["range"]
            out.append(torch.randint(lo, hi, shape, generator=g, dtype=torch.int64))
        else:
            out.append(torch.randn(shape, generator=g))
    return tuple(out)


def example_label(name, batch=2, seed=1):
    """A random label batch of the named model's loss."""
    g = torch.Generator().manual_seed(seed)
    lab = MODELS[name]["label"]
    shape = [batch] + lab["shape"]
    if MODELS[name]["loss"] == "softmax_cross_entropy":
        return torch.randint(lab["range"][0], lab["range"][1], shape, generator=g, dtype=torch.int64)
    if MODELS[name]["loss"] == "bce_with_logits":
        return (torch.rand(shape, generator=g) < 0.5).float()
    return torch.randn(shape, generator=g)


def loss_fn(kind):
    """The PyTorch loss that graphpipe's --loss kind means (PyTorch's default mean reductions)."""
    if kind == "softmax_cross_entropy":
        return lambda out, label: F.cross_entropy(out, label.long())
    if kind == "mse":
        return lambda out, label: F.mse_loss(out, label.float())
    if kind == "bce_with_logits":
        return lambda out, label: F.binary_cross_entropy_with_logits(out, label.float())
    raise ValueError("unknown loss %r" % kind)
