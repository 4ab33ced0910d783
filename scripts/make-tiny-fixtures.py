#!/usr/bin/env python3
"""Dev-time oracle: llama.cpp's logits for the tiny random-weight models that
tests/integration/tiny_models.rs writes, one per architecture.

Needs `llama-cpp-python` (dev only; never a run-time or test dependency):

    TOOLGATE_TINY_OUT=/tmp/tiny cargo test --release --test integration -- tiny_models_match_llama_cpp
    /tmp/oracle/bin/python scripts/make-tiny-fixtures.py /tmp/tiny

Writes tests/fixtures/tiny_models.llama_cpp.json: per architecture, the prompt and
llama.cpp's logits at every position of it. Committed; the test compares toolgate's
logits for the same files against it without Python.
"""
import glob
import json
import os
import sys

import numpy as np
from llama_cpp import Llama


def main():
    src = sys.argv[1]
    out = {"source": "llama.cpp via llama-cpp-python " + __import__("llama_cpp").__version__}
    for path in sorted(glob.glob(os.path.join(src, "*.gguf"))):
        name = os.path.basename(path)[: -len(".gguf")]
        prompt = json.load(open(os.path.join(src, name + ".prompt.json")))
        # An f32 KV cache (llama.cpp's default is f16): its rounding alone moved
        # gpt-oss's logits by 3e-3 of their scale, more than the tolerance is for.
        # YaRN's betas from the file, as llama.cpp's own tools read them
        # (llama-cpp-python's defaults, 32 and 1, would override the file's).
        llm = Llama(model_path=path, n_ctx=len(prompt) + 8, n_batch=512, n_threads=2, logits_all=True, verbose=False,
                    type_k=0, type_v=0, yarn_beta_fast=-1.0, yarn_beta_slow=-1.0)
        llm.eval(prompt)
        logits = np.array(llm.scores[: len(prompt)], dtype=np.float32)
        out[name] = {"prompt": prompt, "logits": [[round(float(x), 5) for x in row] for row in logits]}
        print(name, "top tokens", logits.argmax(axis=1).tolist())
    path = os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures", "tiny_models.llama_cpp.json")
    with open(path, "w") as f:
        json.dump(out, f)
        f.write("\n")
    print("wrote", os.path.normpath(path))


main()
