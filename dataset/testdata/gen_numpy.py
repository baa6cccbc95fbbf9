# Writes the NumPy files dataset's tests read (numpy 1.24, Debian's python3-numpy):
#   /usr/bin/python3 dataset/testdata/gen_numpy.py dataset/testdata/numpy
# x[i, j] = i + j/10 (float32), ids[i, k] = (3i + k) mod 7 (int64), label[i] = i mod 4 (int32).
import os, sys
import numpy as np

out = sys.argv[1]
os.makedirs(os.path.join(out, "dir"), exist_ok=True)
n = 5
x = (np.arange(n)[:, None] + np.arange(3)[None, :] / 10).astype(np.float32)
ids = ((3 * np.arange(n)[:, None] + np.arange(2)[None, :]) % 7).astype(np.int64)
label = (np.arange(n) % 4).astype(np.int32)
for name, v in [("x", x), ("ids", ids), ("label", label)]:
    np.save(os.path.join(out, "dir", name + ".npy"), v)
np.savez(os.path.join(out, "data.npz"), x=x, ids=ids, label=label)
np.savez_compressed(os.path.join(out, "compressed.npz"), x=x, ids=ids, label=label)
np.save(os.path.join(out, "f64.npy"), x.astype(np.float64))
np.save(os.path.join(out, "fortran.npy"), np.asfortranarray(x))
np.save(os.path.join(out, "bigendian.npy"), x.astype(">f4"))
