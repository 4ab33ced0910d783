#!/usr/bin/env python3
"""Measure llama.cpp (through llama-cpp-python) on the same GGUF, prompt and threads
as benches/speed.rs: 128-token prompt prefill, 64 greedy decode tokens, 5 runs;
prefill is the best run, decode is one over the median decode step.

    /tmp/oracle/bin/python scripts/bench-llama-cpp.py [MODELS_DIR] [THREADS] [MODEL_FILTER]

`BENCH_MODELS` (comma-separated file names) replaces the two test models, as for
benches/speed.rs.

Prints one JSON line per model, with `rss_mib`: the process's peak resident memory
minus what it held before loading the model (the Python interpreter and numpy), so
that only llama.cpp's own memory is counted. Dev-time only.
"""
import json
import os
import resource
import sys
import time

from llama_cpp import Llama

TEXT = "The quick brown fox jumps over the lazy dog. "
MODELS = [m for m in os.environ.get("BENCH_MODELS", "SmolLM2-135M-Instruct.Q4_1.gguf,gemma-3-270m-q4_k_m.gguf").split(",") if m]
PROMPT_TOKENS, DECODE_TOKENS, RUNS = 128, 64, 5


def main():
    cache = sys.argv[1] if len(sys.argv) > 1 else os.path.expanduser("~/.cache/toolgate/models")
    threads = int(sys.argv[2]) if len(sys.argv) > 2 else 2
    only = sys.argv[3] if len(sys.argv) > 3 else ""
    for m in MODELS:
        if only not in m:
            continue
        base_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        llm = Llama(os.path.join(cache, m), n_ctx=512, n_threads=threads, n_threads_batch=threads,
                    n_batch=512, verbose=False)
        ids = llm.tokenize((TEXT * 40).encode(), add_bos=True, special=False)[:PROMPT_TOKENS]
        best_pp, steps = 0.0, []
        for _ in range(RUNS):
            llm.reset()
            t0 = time.perf_counter()
            llm.eval(ids)
            t1 = time.perf_counter()
            best_pp = max(best_pp, PROMPT_TOKENS / (t1 - t0))
            for _ in range(DECODE_TOKENS):
                nxt = int(llm.scores[llm.n_tokens - 1].argmax())
                t = time.perf_counter()
                llm.eval([nxt])
                steps.append(time.perf_counter() - t)
        best_tg = 1.0 / sorted(steps)[len(steps) // 2]
        print(json.dumps({"engine": "llama.cpp", "model": m, "threads": threads, "prompt_tokens": PROMPT_TOKENS,
                          "prefill_tps": round(best_pp, 2), "decode_tokens": DECODE_TOKENS,
                          "decode_tps": round(best_tg, 2),
                          "rss_mib": round((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base_kib) / 1024, 1)}),
              flush=True)


if __name__ == "__main__":
    main()
