#!/usr/bin/env python3
"""Dev-time oracle: quantize random weights with llama.cpp's own ggml and record its
dequantization, for the weight types candle cannot quantize (IQ4_NL, IQ4_XS, MXFP4).

Needs `llama-cpp-python` (dev only; never a run-time or test dependency): it bundles
libggml-base, whose `ggml_quantize_chunk` and `to_float` are called through ctypes.

    /tmp/oracle/bin/python scripts/make-kernel-fixtures.py

Writes tests/fixtures/kernels.ggml.json: per type, the quantized rows (hex) and
ggml's dequantization of them (f32 bits, hex little-endian). Committed; the kernel
tests compare toolgate's decoding and dot products against it without Python.
"""
import ctypes
import json
import os

import numpy as np
import llama_cpp

LIB = os.path.join(os.path.dirname(llama_cpp.__file__), "lib", "libggml-base.so")
ggml = ctypes.CDLL(LIB)


class Traits(ctypes.Structure):
    _fields_ = [
        ("type_name", ctypes.c_char_p),
        ("blck_size", ctypes.c_int64),
        ("blck_size_interleave", ctypes.c_int64),
        ("type_size", ctypes.c_size_t),
        ("is_quantized", ctypes.c_bool),
        ("to_float", ctypes.c_void_p),
        ("from_float_ref", ctypes.c_void_p),
    ]


ggml.ggml_get_type_traits.restype = ctypes.POINTER(Traits)
ggml.ggml_get_type_traits.argtypes = [ctypes.c_int]
ggml.ggml_quantize_chunk.restype = ctypes.c_size_t
ggml.ggml_quantize_chunk.argtypes = [
    ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p
]
TO_FLOAT = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)

TYPES = {"IQ4_NL": 20, "IQ4_XS": 23, "MXFP4": 39}
ROWS, K = 8, 512


def main():
    rng = np.random.default_rng(20261126)
    out = {"rows": ROWS, "k": K, "source": "ggml (llama-cpp-python %s) ggml_quantize_chunk + to_float" % llama_cpp.__version__, "types": {}}
    for name, tid in TYPES.items():
        tr = ggml.ggml_get_type_traits(tid).contents
        assert tr.type_name.decode().upper() == name, tr.type_name
        # Weights shaped like a real layer's: normal, a few outlier columns.
        w = (rng.standard_normal((ROWS, K)) * 0.05).astype(np.float32)
        w[:, rng.integers(0, K, 4)] *= 8
        row_bytes = K // tr.blck_size * tr.type_size
        q = np.zeros(ROWS * row_bytes, dtype=np.uint8)
        n = ggml.ggml_quantize_chunk(tid, w.ctypes.data, q.ctypes.data, 0, ROWS, K, None)
        assert n == q.size, (n, q.size)
        deq = np.zeros(ROWS * K, dtype=np.float32)
        TO_FLOAT(tr.to_float)(q.ctypes.data, deq.ctypes.data, ROWS * K)
        out["types"][name] = {
            "ggml_type": tid,
            "bytes": q.tobytes().hex(),
            "dequantized": deq.astype("<f4").tobytes().hex(),
        }
    path = os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures", "kernels.ggml.json")
    with open(path, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    print("wrote", os.path.normpath(path))


main()
