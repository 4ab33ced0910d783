#!/usr/bin/env python3
"""Check the weight decoders of kernels/matvec.cu on the host, against gguf-py.

The CUDA decode matvec (kernels/matvec.cu) reads GGUF blocks in their file layout.
Its chunk decoders are plain C++, so this compiles the file for the host (g++, no
CUDA), multiplies every weight of a GGUF file whose type it reads by a random
vector, and compares each row's dot product with gguf-py's dequantization times the
same vector: the relative error must stay at float rounding (1e-4 of the row's
sum of |w·x|). Development aid (no GPU here); needs numpy and gguf (the `gguf`
package from PyPI, or llama.cpp's gguf-py on PYTHONPATH).

    scripts/check-matvec.py FILE.gguf [MAX_TENSORS]
"""
import ctypes
import os
import subprocess
import sys
import tempfile

import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize

HARNESS = r"""
#include "matvec.cu"
extern "C" void host_matvec(int t, const uint8_t* w, int n, int k, const float* x, float* y) {
    const long rb = (long)(k / block_weights(t)) * block_bytes(t);
    for (int r = 0; r < n; r++) {
        Dot<1> dot;
        dot.x = x;
        dot.k = k;
        dot.acc[0] = 0.f;
        row_dot<1>(t, w + rb * r, k, 0, 1, dot);
        y[r] = dot.acc[0];
    }
}
extern "C" int host_chunk_weights(int t) { return block_bytes(t) ? chunk_weights(t) : 0; }
"""


def main():
    path = sys.argv[1]
    limit = int(sys.argv[2]) if len(sys.argv) > 2 else 1 << 30
    here = os.path.dirname(os.path.abspath(__file__))
    tmp = tempfile.mkdtemp()
    src, lib = os.path.join(tmp, "h.cpp"), os.path.join(tmp, "h.so")
    with open(src, "w") as f:
        f.write(HARNESS)
    subprocess.check_call(["g++", "-O2", "-shared", "-fPIC", "-I", os.path.join(here, "..", "kernels"), "-o", lib, src])
    h = ctypes.CDLL(lib)
    h.host_matvec.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]
    rng = np.random.default_rng(0)
    checked, worst = {}, 0.0
    for t in GGUFReader(path).tensors:
        tid = int(t.tensor_type)
        if len(t.shape) != 2 or not h.host_chunk_weights(tid) or checked.get(tid, 0) >= limit:
            continue
        k, n = int(t.shape[0]), int(t.shape[1])
        n = min(n, 2048)
        raw = np.ascontiguousarray(t.data).view(np.uint8).reshape(int(t.shape[1]), -1)[:n]
        w = dequantize(raw, t.tensor_type).reshape(n, k).astype(np.float64)
        x = rng.standard_normal(k).astype(np.float32)
        y = np.zeros(n, np.float32)
        raw = np.ascontiguousarray(raw)
        h.host_matvec(tid, raw.ctypes.data, n, k, x.ctypes.data, y.ctypes.data)
        ref = w @ x.astype(np.float64)
        scale = np.abs(w) @ np.abs(x.astype(np.float64)) + 1e-30
        err = float(np.max(np.abs(y - ref) / scale))
        worst = max(worst, err)
        checked[tid] = checked.get(tid, 0) + 1
        print(f"{t.name:32} {t.tensor_type.name:5} {n}x{k}: max relative error {err:.2e}")
        if err > 1e-4:
            print("FAILED", file=sys.stderr)
            sys.exit(1)
    print(f"checked {sum(checked.values())} tensors of types {sorted(checked)}; worst {worst:.2e}")


if __name__ == "__main__":
    main()
