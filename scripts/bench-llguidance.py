#!/usr/bin/env python3
"""llguidance on the same schema, instance and token ids as benches/mask.rs.

    /tmp/oracle/bin/python scripts/bench-llguidance.py [MODELS_DIR]

Needs llama-cpp-python and llguidance (dev-time only). Prints one JSON line per model.
"""
import json
import os
import sys
import time

import llama_cpp
import llguidance
import llguidance.llamacpp

SCHEMA = '{"type":"object","properties":{"city":{"type":"string"},"unit":{"enum":["celsius","fahrenheit"]},"days":{"type":"integer","minimum":1,"maximum":14},"notes":{"type":"string"}},"required":["city","unit"]}'
INSTANCE = '{"city": "San Francisco, California", "unit": "celsius", "days": 7, "notes": "Bring an umbrella; it\'s 日本語 day."}'
MODELS = ["SmolLM2-135M-Instruct.Q4_1.gguf", "gemma-3-270m-q4_k_m.gguf"]


def main():
    cache = sys.argv[1] if len(sys.argv) > 1 else os.path.expanduser("~/.cache/toolgate/models")
    for m in MODELS:
        llm = llama_cpp.Llama(os.path.join(cache, m), n_ctx=64, vocab_only=True, verbose=False)
        vocab = llama_cpp.llama_model_get_vocab(llm.model)
        t = time.perf_counter()
        tok = llguidance.llamacpp.lltokenizer_from_vocab(vocab)
        vocab_ms = (time.perf_counter() - t) * 1e3
        ids = llm.tokenize(INSTANCE.encode(), add_bos=False, special=False)
        best_compile = best = float("inf")
        for _ in range(5):
            t = time.perf_counter()
            grammar = llguidance.LLMatcher.grammar_from_json_schema(
                SCHEMA, defaults={"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "})
            matcher = llguidance.LLMatcher(tok, grammar)
            best_compile = min(best_compile, (time.perf_counter() - t) * 1e3)
            assert not matcher.is_error(), matcher.get_error()
            total = 0.0
            for i in ids:
                t = time.perf_counter()
                matcher.compute_bitmask()
                total += time.perf_counter() - t
                assert matcher.consume_token(i), (i, matcher.get_error())
            best = min(best, total * 1e6 / len(ids))
        print(json.dumps({"engine": "llguidance", "model": m, "tokens": len(ids), "vocab_build_ms": round(vocab_ms, 1),
                          "compile_ms": round(best_compile, 2), "mask_us_per_token": round(best, 1)}), flush=True)


if __name__ == "__main__":
    main()
