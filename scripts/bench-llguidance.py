#!/usr/bin/env python3
"""llguidance on the same schemas, vocabulary bytes and token ids as benches/mask.rs.

    PY scripts/bench-llguidance.py [DUMP_DIR]    # DUMP_DIR: target/mask-bench

PY is a Python with PyPI `llguidance` (dev-time only; `scripts/bench-mask` makes one).
The bench writes one file per model: every token's bytes (special tokens listed apart),
the end tokens, and each case's schema and token ids. llguidance gets its tokenizer
from those bytes, so both engines see exactly the same vocabulary and walk.
Prints one JSON line per model and schema: compile time (grammar + matcher, best of
the runs), per-token mask time p50/p99 over every step of every run, and the median
over runs of compile + every mask of the walk (`first_request_ms`).
"""
import json
import os
import sys
import time

import llguidance

RUNS = 20


class Vocab:
    """The TokenizerWrapper interface llguidance reads: bytes per token, special ids,
    end token, and a tokenize call (greedy longest match; only used off the hot path)."""

    def __init__(self, dump):
        self.tokens = [bytes(t) for t in dump["tokens"]]
        self.special_token_ids = dump["special"]
        self.eos_token_id = dump["eog"][0]
        self.bos_token_id = None
        self.is_tokenizer_wrapper = True
        special = set(self.special_token_ids)
        self._by_bytes = {}
        for i, t in enumerate(self.tokens):
            if i not in special and t:
                self._by_bytes.setdefault(t, i)
        self._longest = max(len(t) for t in self._by_bytes)

    def __call__(self, s):
        b = s.encode() if isinstance(s, str) else s
        out, i = [], 0
        while i < len(b):
            for n in range(min(self._longest, len(b) - i), 0, -1):
                t = self._by_bytes.get(b[i:i + n])
                if t is not None:
                    out.append(t)
                    i += n
                    break
            else:
                raise ValueError(f"no token for byte {b[i]}")
        return out


def pct(xs, p):
    xs = sorted(xs)
    return xs[round((len(xs) - 1) * p)]


def main():
    d = sys.argv[1] if len(sys.argv) > 1 else "target/mask-bench"
    for name in sorted(os.listdir(d)):
        dump = json.load(open(os.path.join(d, name)))
        t = time.perf_counter()
        tok = llguidance.LLTokenizer(Vocab(dump))
        vocab_ms = (time.perf_counter() - t) * 1e3
        for case in dump["cases"]:
            compile_ms, times, first = float("inf"), [], []
            for _ in range(RUNS):
                t = time.perf_counter()
                grammar = llguidance.LLMatcher.grammar_from_json_schema(
                    case["schema"],
                    defaults={"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "})
                matcher = llguidance.LLMatcher(tok, grammar)
                this_compile = (time.perf_counter() - t) * 1e3
                compile_ms = min(compile_ms, this_compile)
                assert not matcher.is_error(), matcher.get_error()
                before = len(times)
                for i in case["ids"]:
                    t = time.perf_counter()
                    matcher.compute_bitmask()
                    times.append((time.perf_counter() - t) * 1e6)
                    assert matcher.consume_token(i), (i, matcher.get_error())
                first.append(this_compile + sum(times[before:]) / 1e3)
            print(json.dumps({"engine": "llguidance", "model": dump["model"], "schema": case["name"],
                              "tokens": len(case["ids"]), "vocab_build_ms": round(vocab_ms, 1),
                              "compile_ms": round(compile_ms, 2), "p50_us": round(pct(times, 0.5), 1),
                              "p99_us": round(pct(times, 0.99), 1),
                              "first_request_ms": round(pct(first, 0.5), 3)}), flush=True)


if __name__ == "__main__":
    main()
