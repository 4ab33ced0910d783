#!/usr/bin/env python3
"""Dev-time oracle: llama.cpp's tokens for a seeded corpus of random strings.

The hand-written cases of `make-fixtures.py` cover the common text; these strings mix
what breaks tokenizers: runs of spaces, tabs and newlines, U+2581 (SentencePiece's
space), emoji with modifiers, scripts the vocabulary barely has (byte fallback),
characters outside the Basic Multilingual Plane, and halves of special tokens.

    /tmp/oracle/bin/python scripts/make-token-corpus.py "$(scripts/fetch-models | tail -1)"

Writes tests/fixtures/<model>.tokens-random.json (the same shape as <model>.tokens.json).
"""
import json
import os
import random
import sys

from llama_cpp import Llama

MODELS = {
    "smollm2": "SmolLM2-135M-Instruct.Q4_1.gguf",
    "gemma3": "gemma-3-270m-q4_k_m.gguf",
    "qwen_coder": "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
}
# `FIXTURE_MODELS=qwen_coder,…` remakes only those (the others' fixtures stay as made).
if os.environ.get("FIXTURE_MODELS"):
    MODELS = {k: v for k, v in MODELS.items() if k in os.environ["FIXTURE_MODELS"].split(",")}

ALPHABET = (
    list("abcdefxyz ABC   \t\n\n\r\n_-.,;:!?'\"(){}[]<>/\\|@#$%^&*+=~`0123456789")
    + ["\u2581", "\u2581\u2581", "\u00a0", "\u200b", "\u3000"]
    + list("éüßçñøåæœ中文字符日本語한국어العربيةहिन्दीกขค")
    + ["🙂", "🚀", "👍🏽", "👩‍💻", "∑", "∫", "√", "≈", "⟁", "𠀀", "𝔘", "\U0001f9ea", "\u0fff", "\ufffd"]
    + ["<start_of_turn>", "<end_of_turn>", "<bos>", "<|im_end|>", "<|im_start|>", "</s>", "<start_of", "im_end|>",
       "<0x41>", "<unk>", "<pad>"]
)
CASES = 300


def main():
    cache = sys.argv[1] if len(sys.argv) > 1 else os.path.expanduser("~/.cache/toolgate/models")
    out_dir = os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures")
    for key, fname in MODELS.items():
        llm = Llama(os.path.join(cache, fname), vocab_only=True, verbose=False)
        rng = random.Random(2026)
        cases = []
        for _ in range(CASES):
            s = "".join(rng.choice(ALPHABET) for _ in range(rng.randint(1, 40)))
            b = s.encode("utf-8")
            cases.append({"text": s, "ids": llm.tokenize(b, add_bos=False, special=False),
                          "ids_parse_special": llm.tokenize(b, add_bos=False, special=True)})
        with open(os.path.join(out_dir, f"{key}.tokens-random.json"), "w") as f:
            json.dump({"model": fname, "oracle": "llama-cpp-python 0.3.36", "seed": 2026, "cases": cases}, f,
                      ensure_ascii=False)
        print(key, len(cases), file=sys.stderr)


if __name__ == "__main__":
    main()
