"""Golden cases of model@2's convolution, normalisation and pooling ops (gen_golden.py writes golden_conv.json)."""
SEED = 20261125

CASES = [
    ("conv2d", '{"name":"x","shape":[2,5,4],"dtype":"float32"}', '"op":"conv2d","inputs":["x"],"attrs":{"out":3,"kernel":[3,2]}'),
    ("conv2d-stride-pad", '{"name":"x","shape":[2,5,6],"dtype":"float32"}', '"op":"conv2d","inputs":["x"],"attrs":{"out":2,"kernel":[3,3],"stride":[2,2],"padding":[1,0,2,1]}'),
    ("conv2d-dilated", '{"name":"x","shape":[1,6,6],"dtype":"float32"}', '"op":"conv2d","inputs":["x"],"attrs":{"out":2,"kernel":[2,2],"dilation":[2,3],"bias":false}'),
    ("conv2d-groups", '{"name":"x","shape":[4,4,4],"dtype":"float32"}', '"op":"conv2d","inputs":["x"],"attrs":{"out":6,"kernel":[2,2],"groups":2}'),
    ("conv2d-depthwise", '{"name":"x","shape":[3,4,4],"dtype":"float32"}', '"op":"conv2d","inputs":["x"],"attrs":{"out":3,"kernel":[3,3],"padding":[1,1,1,1],"groups":3}'),
    ("conv2d-1x1", '{"name":"x","shape":[3,2,3],"dtype":"float32"}', '"op":"conv2d","inputs":["x"],"attrs":{"out":4,"kernel":[1,1]}'),
    ("batch_norm-c", '{"name":"x","shape":[4],"dtype":"float32"}', '"op":"batch_norm","inputs":["x"]'),
    ("batch_norm-cl", '{"name":"x","shape":[3,5],"dtype":"float32"}', '"op":"batch_norm","inputs":["x"],"attrs":{"eps":0.001,"momentum":0.3}'),
    ("batch_norm-chw", '{"name":"x","shape":[2,3,3],"dtype":"float32"}', '"op":"batch_norm","inputs":["x"]'),
    ("max_pool2d", '{"name":"x","shape":[2,5,5],"dtype":"float32"}', '"op":"max_pool2d","inputs":["x"],"attrs":{"kernel":[2,2]}'),
    ("max_pool2d-ceil-pad", '{"name":"x","shape":[1,5,6],"dtype":"float32"}', '"op":"max_pool2d","inputs":["x"],"attrs":{"kernel":[3,3],"stride":[2,2],"padding":[1,1,1,1],"ceil_mode":true}'),
    ("max_pool2d-asym", '{"name":"x","shape":[1,5,6],"dtype":"float32"}', '"op":"max_pool2d","inputs":["x"],"attrs":{"kernel":[3,3],"stride":[2,2],"padding":[0,1,2,0],"ceil_mode":true}'),
    ("max_pool2d-dilated", '{"name":"x","shape":[1,6,6],"dtype":"float32"}', '"op":"max_pool2d","inputs":["x"],"attrs":{"kernel":[2,2],"stride":[1,1],"dilation":[2,2]}'),
    ("avg_pool2d", '{"name":"x","shape":[2,4,4],"dtype":"float32"}', '"op":"avg_pool2d","inputs":["x"],"attrs":{"kernel":[2,2]}'),
    ("avg_pool2d-pad-include", '{"name":"x","shape":[1,5,5],"dtype":"float32"}', '"op":"avg_pool2d","inputs":["x"],"attrs":{"kernel":[3,3],"stride":[2,2],"padding":[1,1,1,1],"ceil_mode":true}'),
    ("avg_pool2d-pad-exclude", '{"name":"x","shape":[1,5,5],"dtype":"float32"}', '"op":"avg_pool2d","inputs":["x"],"attrs":{"kernel":[3,3],"stride":[1,1],"padding":[1,0,1,2],"count_include_pad":false}'),
    ("avg_pool2d-asym-include", '{"name":"x","shape":[1,5,6],"dtype":"float32"}', '"op":"avg_pool2d","inputs":["x"],"attrs":{"kernel":[3,2],"stride":[2,2],"padding":[0,1,2,0],"ceil_mode":true}'),
    ("global_avg_pool", '{"name":"x","shape":[3,2,4],"dtype":"float32"}', '"op":"global_avg_pool","inputs":["x"]'),
]

PARAMS = {
    "conv2d": lambda a, d, ins: {"weight": [a["out"], ins[0]["shape"][0] // a.get("groups", 1)] + a["kernel"],
                                 **({"bias": [a["out"]]} if a.get("bias", True) else {})},
    "batch_norm": lambda a, d, ins: {"weight": [ins[0]["shape"][0]], "bias": [ins[0]["shape"][0]]},
}

# buffers: the running statistics a batch_norm case starts from
BUFFERS = {
    "batch_norm": lambda rng, ins: {"running_mean": (0.1 * rng.standard_normal(ins[0]["shape"][0])).tolist(),
                                    "running_var": (1 + 0.1 * rng.random(ins[0]["shape"][0])).tolist()},
}
