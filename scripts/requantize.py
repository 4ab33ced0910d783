#!/usr/bin/env python3
"""Requantize a GGUF model to other weight types with llama.cpp's own quantizer
(dev-time: needs llama-cpp-python; used for the weight-type rows of BENCHMARKS.md).

    ORACLE_PY=... $ORACLE_PY scripts/requantize.py SRC.gguf OUT_DIR Q8_0 Q4_0 IQ4_NL ...

Writes OUT_DIR/<stem>.<TYPE>.gguf for each type name (a `LLAMA_FTYPE_MOSTLY_<TYPE>`
of llama.cpp, e.g. Q4_0, Q5_0, Q8_0, IQ4_NL, IQ4_XS, Q2_K, Q3_K_M, F16, BF16,
MXFP4_MOE), requantizing from SRC (`allow_requantize`: the result carries SRC's
rounding too, which is fine for speed and for comparing two engines on one file).
Existing outputs are kept.
"""
import ctypes
import os
import sys

import llama_cpp


def main() -> None:
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    src, out_dir, types = sys.argv[1], sys.argv[2], sys.argv[3:]
    os.makedirs(out_dir, exist_ok=True)
    stem = os.path.basename(src).rsplit(".", 1)[0]
    for t in types:
        ftype = getattr(llama_cpp, f"LLAMA_FTYPE_MOSTLY_{t}", None)
        if ftype is None:
            sys.exit(f"unknown type {t}")
        out = os.path.join(out_dir, f"{stem}.{t}.gguf")
        if os.path.exists(out):
            print(f"ok   {out} (kept)")
            continue
        params = llama_cpp.llama_model_quantize_default_params()
        params.ftype = ftype
        params.allow_requantize = True
        params.nthread = os.cpu_count() or 1
        rc = llama_cpp.llama_model_quantize(src.encode(), (out + ".part").encode(), ctypes.byref(params))
        if rc != 0:
            sys.exit(f"quantizing to {t} failed ({rc})")
        os.replace(out + ".part", out)
        print(f"made {out}")


if __name__ == "__main__":
    main()
