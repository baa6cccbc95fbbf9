"""model@2's convolution, normalisation and pooling ops for gptorch (registered into gptorch.OPS)."""
import torch
import torch.nn.functional as F

import gptorch


def _pad(x, a, value=0.0):
    t, l, b, r = a.get("padding", [0, 0, 0, 0])
    return F.pad(x, (l, r, t, b), value=value) if (t, l, b, r) != (0, 0, 0, 0) else x


def conv2d(m, op, x, a):
    bias = m.param(op, "bias") if a.get("bias", True) else None
    t, l, b, r = a.get("padding", [0, 0, 0, 0])
    if t == b and l == r:  # the convolution pads (as nn.Conv2d does: no separate F.pad in a timed step)
        return F.conv2d(x[0], m.param(op, "weight"), bias, stride=a.get("stride", [1, 1]), padding=(t, l),
                        dilation=a.get("dilation", [1, 1]), groups=a.get("groups", 1))
    return F.conv2d(_pad(x[0], a), m.param(op, "weight"), bias, stride=a.get("stride", [1, 1]),
                    dilation=a.get("dilation", [1, 1]), groups=a.get("groups", 1))


def batch_norm(m, op, x, a):
    return F.batch_norm(x[0], m.param(op, "running_mean"), m.param(op, "running_var"), m.param(op, "weight"),
                        m.param(op, "bias"), training=True, momentum=a.get("momentum", 0.1), eps=a.get("eps", 1e-5))


def _ceil_out(n, lo, hi, k, s, d, ceil):
    span = n + lo + hi - d * (k - 1) - 1
    if not ceil:
        return span // s + 1
    out = -(-span // s) + 1
    if (out - 1) * s >= n + lo:
        out -= 1
    return out


def max_pool2d(m, op, x, a):
    k = a["kernel"]
    s = a.get("stride", k)
    t, l, b, r = a.get("padding", [0, 0, 0, 0])
    d = a.get("dilation", [1, 1])
    if t == b and l == r and 2 * t <= k[0] and 2 * l <= k[1]:
        return F.max_pool2d(x[0], k, s, (t, l), d, ceil_mode=a.get("ceil_mode", False))
    y = F.max_pool2d(_pad(x[0], a, float("-inf")), k, s, 0, d, ceil_mode=False)
    oh = _ceil_out(x[0].shape[2], t, b, k[0], s[0], d[0], a.get("ceil_mode", False))
    ow = _ceil_out(x[0].shape[3], l, r, k[1], s[1], d[1], a.get("ceil_mode", False))
    return y[:, :, :oh, :ow]


def avg_pool2d(m, op, x, a):
    k = a["kernel"]
    s = a.get("stride", k)
    t, l, b, r = a.get("padding", [0, 0, 0, 0])
    ceil = a.get("ceil_mode", False)
    if t == b and l == r and 2 * t <= k[0] and 2 * l <= k[1]:
        return F.avg_pool2d(x[0], k, s, (t, l), ceil_mode=ceil, count_include_pad=a.get("count_include_pad", True))
    # asymmetric padding: window sums over the zero-padded input, divided by
    # the window clipped to the padded input or to the input
    sums = F.avg_pool2d(_pad(x[0], a), k, s, 0, ceil_mode=ceil, divisor_override=1)
    ones = torch.ones_like(x[0][:1, :1])
    inside = F.avg_pool2d(_pad(ones, a), k, s, 0, ceil_mode=ceil, divisor_override=1)
    padded = F.avg_pool2d(torch.ones_like(_pad(ones, a)), k, s, 0, ceil_mode=ceil, divisor_override=1)
    y = sums / (padded if a.get("count_include_pad", True) else inside)
    oh = _ceil_out(x[0].shape[2], t, b, k[0], s[0], 1, ceil)
    ow = _ceil_out(x[0].shape[3], l, r, k[1], s[1], 1, ceil)
    return y[:, :, :oh, :ow]


def global_avg_pool(m, op, x, a):
    return x[0].mean(dim=tuple(range(2, x[0].dim())), keepdim=True)


gptorch.OPS.update({"conv2d": conv2d, "batch_norm": batch_norm, "max_pool2d": max_pool2d,
                    "avg_pool2d": avg_pool2d, "global_avg_pool": global_avg_pool})
