#!/usr/bin/env python3
"""llguidance on MaskBench, checked exactly as `examples/maskbench.rs` checks toolgate.

    PY scripts/maskbench-llguidance.py DIR [--verdicts FILE]

PY is a Python with PyPI `llguidance` (dev-time only; `scripts/bench-mask` makes one
under ~/.cache/toolgate/llg-venv). DIR is JSONSchemaBench's `maskbench/data`.

Each schema is compiled with llguidance's defaults (strict: no `lenient`, no
`coerce_one_of`) and compact separators, no free whitespace; each test instance is
written as compact JSON in its own key order and fed byte by byte (a 256-token byte
vocabulary), then an accepting end is required. Prints the same totals as the Rust
example; `--verdicts FILE` writes one JSON line per schema
(`file`, `compiled`, `passed`, `error`, `compile_ms`) to compare the two engines schema by schema.
"""
import json
import os
import sys
import time

import llguidance


class ByteVocab:
    """One token per byte, plus an end token: instances are checked byte by byte."""

    def __init__(self):
        self.tokens = [bytes([i]) for i in range(256)] + [b"<eos>"]
        self.special_token_ids = [256]
        self.eos_token_id = 256
        self.bos_token_id = None
        self.is_tokenizer_wrapper = True

    def __call__(self, s):
        return list(s.encode() if isinstance(s, str) else s)


def pct(xs, p):
    xs = sorted(xs)
    return xs[round((len(xs) - 1) * p)] if xs else float("nan")


def main():
    args = sys.argv[1:]
    if not args:
        sys.exit(__doc__)
    data = args[0]
    verdicts = open(args[args.index("--verdicts") + 1], "w") if "--verdicts" in args else None
    tok = llguidance.LLTokenizer(ByteVocab())
    options = {"whitespace_flexible": False, "item_separator": ",", "key_separator": ":"}
    schemas = compiled = passed = 0
    valid = invalid = valid_rejected = invalid_accepted = 0
    errors = {}
    compile_ms = []
    for name in sorted(os.listdir(data)):
        try:
            doc = json.load(open(os.path.join(data, name)))
        except (OSError, ValueError):
            continue
        schemas += 1
        t = time.perf_counter()
        error = None
        try:
            grammar = llguidance.LLMatcher.grammar_from_json_schema(doc["schema"], defaults=options)
            matcher = llguidance.LLMatcher(tok, grammar)
            if matcher.is_error():
                error = matcher.get_error()
        except (ValueError, TypeError) as e:
            error = str(e)
        ms = (time.perf_counter() - t) * 1e3
        compile_ms.append(ms)
        if error is not None:
            key = error.splitlines()[0][:70]
            errors[key] = errors.get(key, 0) + 1
            if verdicts:
                verdicts.write(json.dumps({"file": name, "compiled": False, "passed": False, "error": error[:200],
                                           "compile_ms": ms}) + "\n")
            continue
        compiled += 1
        ok = True
        for test in doc.get("tests", []):
            text = json.dumps(test["data"], separators=(",", ":"), ensure_ascii=False).encode()
            matcher.reset()
            accepted = matcher.try_consume_tokens(list(text)) == len(text) and matcher.is_accepting()
            if test["valid"]:
                valid += 1
                if not accepted:
                    valid_rejected += 1
                    ok = False
            else:
                invalid += 1
                if accepted:
                    invalid_accepted += 1
                    ok = False
        passed += ok
        if verdicts:
            verdicts.write(json.dumps({"file": name, "compiled": True, "passed": ok, "error": None, "compile_ms": ms}) + "\n")
    print(f"llguidance {llguidance.__version__}: strict, compact separators")
    print(f"schemas: {schemas}")
    print(f"compiled: {compiled} ({100 * compiled / schemas:.1f}%); "
          f"compiled and every test passed: {passed} ({100 * passed / schemas:.1f}%)")
    print(f"valid instances: {valid}, wrongly rejected: {valid_rejected}")
    print(f"invalid instances: {invalid}, wrongly accepted: {invalid_accepted}")
    print(f"compile ms: p50 {pct(compile_ms, 0.5):.2f}, p99 {pct(compile_ms, 0.99):.2f}, max {max(compile_ms):.2f}")
    print("most frequent compile errors:")
    for key, n in sorted(errors.items(), key=lambda kv: -kv[1])[:25]:
        print(f"  {n:5}  {key}")


if __name__ == "__main__":
    main()
