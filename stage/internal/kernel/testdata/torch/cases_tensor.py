"""Golden cases of model@2's tensor ops (gen_golden.py writes golden_tensor.json)."""
SEED = 20261126

CASES = [
    ("reshape", '{"name":"x","shape":[2,6],"dtype":"float32"}', '"op":"reshape","inputs":["x"],"attrs":{"shape":[3,4]}'),
    ("transpose", '{"name":"x","shape":[2,3,4],"dtype":"float32"}', '"op":"transpose","inputs":["x"],"attrs":{"perm":[2,0,1]}'),
    ("softmax", '{"name":"x","shape":[3,5],"dtype":"float32"}', '"op":"softmax","inputs":["x"]'),
    ("softmax-first", '{"name":"x","shape":[4,3],"dtype":"float32"}', '"op":"softmax","inputs":["x"],"attrs":{"axis":0}'),
    ("slice", '{"name":"x","shape":[3,7],"dtype":"float32"}', '"op":"slice","inputs":["x"],"attrs":{"axis":1,"start":-6,"end":7,"step":2}'),
    ("pad", '{"name":"x","shape":[2,3],"dtype":"float32"}', '"op":"pad","inputs":["x"],"attrs":{"pads":[1,0,0,2],"value":0.5}'),
    ("matmul", '{"name":"a","shape":[2,3,4],"dtype":"float32"},{"name":"b","shape":[2,4,5],"dtype":"float32"}', '"op":"matmul","inputs":["a","b"]'),
    ("add", '{"name":"x","shape":[2,1],"dtype":"float32"},{"name":"y","shape":[1,3],"dtype":"float32"},{"name":"z","shape":[3],"dtype":"float32"}', '"op":"add","inputs":["x","y","z"]'),
    ("sub", '{"name":"x","shape":[2,1],"dtype":"float32"},{"name":"y","shape":[1,3],"dtype":"float32"}', '"op":"sub","inputs":["x","y"]'),
    ("mul", '{"name":"x","shape":[3],"dtype":"float32"},{"name":"y","shape":[2,3],"dtype":"float32"}', '"op":"mul","inputs":["x","y"]'),
    ("div", '{"name":"x","shape":[2,3],"dtype":"float32"},{"name":"y","shape":[2,1],"dtype":"float32"}', '"op":"div","inputs":["x","y"]'),
    ("add-scalar", '{"name":"x","shape":[4],"dtype":"float32"}', '"op":"add","inputs":["x"],"attrs":{"scalar":1.5}'),
    ("mul-scalar", '{"name":"x","shape":[4],"dtype":"float32"}', '"op":"mul","inputs":["x"],"attrs":{"scalar":-2}'),
    ("rsub-scalar", '{"name":"x","shape":[4],"dtype":"float32"}', '"op":"sub","inputs":["x"],"attrs":{"scalar":1,"reverse":true}'),
    ("div-scalar", '{"name":"x","shape":[4],"dtype":"float32"}', '"op":"div","inputs":["x"],"attrs":{"scalar":2.5}'),
    ("rdiv-scalar", '{"name":"x","shape":[4],"dtype":"float32"}', '"op":"div","inputs":["x"],"attrs":{"scalar":3,"reverse":true}'),
    ("pow", '{"name":"x","shape":[4],"dtype":"float32"}', '"op":"pow","inputs":["x"],"attrs":{"exponent":3}'),
    ("exp", '{"name":"x","shape":[4],"dtype":"float32"}', '"op":"exp","inputs":["x"]'),
    ("log", '{"name":"x","shape":[4],"dtype":"float32"}', '"op":"log","inputs":["x"]'),
    ("sqrt", '{"name":"x","shape":[4],"dtype":"float32"}', '"op":"sqrt","inputs":["x"]'),
    ("neg", '{"name":"x","shape":[4],"dtype":"float32"}', '"op":"neg","inputs":["x"]'),
    ("erf", '{"name":"x","shape":[4],"dtype":"float32"}', '"op":"erf","inputs":["x"]'),
    ("reduce_mean", '{"name":"x","shape":[2,3,4],"dtype":"float32"}', '"op":"reduce_mean","inputs":["x"],"attrs":{"axes":[0,2]}'),
    ("reduce_sum", '{"name":"x","shape":[2,3],"dtype":"float32"}', '"op":"reduce_sum","inputs":["x"],"attrs":{"axes":[-1],"keepdims":true}'),
    ("dropout", '{"name":"x","shape":[3,4],"dtype":"float32"}', '"op":"dropout","inputs":["x"],"attrs":{"p":0.3}'),
    ("hard_sigmoid", '{"name":"x","shape":[8],"dtype":"float32"}', '"op":"hard_sigmoid","inputs":["x"],"attrs":{"alpha":0.5,"beta":0.25}'),
    ("hard_sigmoid-torch", '{"name":"x","shape":[8],"dtype":"float32"}', '"op":"hard_sigmoid","inputs":["x"]'),
    ("hard_swish", '{"name":"x","shape":[8],"dtype":"float32"}', '"op":"hard_swish","inputs":["x"]'),
]

PARAMS = {}

# log and sqrt need positive inputs: gen_golden.py draws normal values; these
# cases map them through |x| + 0.5 (POSITIVE names them; the Go test does the same).
POSITIVE = {"log", "sqrt"}
