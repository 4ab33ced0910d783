#!/usr/bin/env python3
"""Dev-time oracle: write tokenizer and greedy-continuation fixtures with llama.cpp.

Needs `llama-cpp-python` (dev only; never a run-time or test dependency):

    python3 -m venv /tmp/oracle && /tmp/oracle/bin/pip install llama-cpp-python==0.3.36 numpy
    /tmp/oracle/bin/python scripts/make-fixtures.py "$(scripts/fetch-models | tail -1)"

Writes tests/fixtures/<model>.tokens.json and <model>.greedy.json. The fixtures are
committed; tests compare toolgate against them without Python.
"""
import json
import os
import sys

import numpy as np
from llama_cpp import Llama, llama_cpp

MODELS = {
    "smollm2": "SmolLM2-135M-Instruct.Q4_1.gguf",
    "gemma3": "gemma-3-270m-q4_k_m.gguf",
    "qwen_coder": "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
}
# `FIXTURE_MODELS=qwen_coder,…` remakes only those (the others' fixtures stay as made).
if os.environ.get("FIXTURE_MODELS"):
    MODELS = {k: v for k, v in MODELS.items() if k in os.environ["FIXTURE_MODELS"].split(",")}

STRINGS = [
    "",
    "Hello world",
    "Hello, world!",
    " leading space",
    "trailing space ",
    "  two leading spaces",
    "a  b   c    d",
    "tabs\there\t\tand\t\t\tthere",
    "line one\nline two\n\nline four\n\n\n",
    "\n",
    "   \n  \n\t\n",
    "It's a dog's life, isn't it? We'll see; they'd know.",
    "UPPER lower MiXeD CamelCase snake_case kebab-case",
    "Numbers: 0 1 12 123 1234 12345 3.14159 -42 1e10 0x1F",
    "def add(a, b):\n    return a + b\n",
    "for (int i = 0; i < n; ++i) { sum += v[i]; }",
    '{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}',
    '[{"a":1},{"b":[true,false,null]},"\\u00e9\\n"]',
    "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>",
    "你好，世界！今天天气很好。",
    "日本語のテキストとカタカナ、ひらがな。",
    "한국어 텍스트",
    "Emoji: 😀 👍🏽 👨‍👩‍👧‍👦 🇫🇷 ❤️",
    "Combining: e\u0301 a\u0308 n\u0303 Z\u0335\u0321\u0322",
    "Ünïcödé façade naïve café résumé",
    "Ελληνικά и русский текст",
    "العربية עברית",
    "<|im_start|>user\nhi<|im_end|>",
    "<|im_end|>",
    "<start_of_turn>model\nhello<end_of_turn>",
    "<bos><eos><pad>",
    "<|endoftext|> and </s> and <s>",
    "<table><tr><td>cell</td></tr></table>",
    "Mr. Smith's e-mail: john.smith@example.com; URL: https://example.org/a?b=c&d=e#f",
    "!!!??? ... --- *** ### $$$ %%% ^^^ &&& ||| ~~~",
    "x" * 100,
    " " * 40,
    "\t\t\t\t\t\t\t\t",
    "1234567890123456789012345678901234567890",
    "Supercalifragilisticexpialidocious antidisestablishmentarianism",
]

PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):\n",
    "Q: What is 12 times 7?\nA:",
    '{"name": "get_weather", "arguments": {"city": "',
]

N_GREEDY = 32


def top5(logits):
    idx = np.argsort(-logits)[:5]
    return [[int(i), float(logits[i])] for i in idx]


def main():
    cache = sys.argv[1] if len(sys.argv) > 1 else os.path.expanduser("~/.cache/toolgate/models")
    out_dir = os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures")
    os.makedirs(out_dir, exist_ok=True)
    for key, fname in MODELS.items():
        # f32 KV cache and no flash attention: llama.cpp in its most precise CPU mode, so
        # the reference is not itself off by the f16 cache rounding (~0.3 in logits).
        llm = Llama(os.path.join(cache, fname), n_ctx=1024, n_threads=2, n_batch=512, logits_all=True,
                    type_k=0, type_v=0, flash_attn=False, verbose=False)
        toks = []
        for s in STRINGS:
            ids = llm.tokenize(s.encode("utf-8"), add_bos=False, special=False)
            ids_special = llm.tokenize(s.encode("utf-8"), add_bos=False, special=True)
            toks.append({"text": s, "ids": ids, "ids_parse_special": ids_special})
        add_bos = bool(llama_cpp.llama_vocab_get_add_bos(llama_cpp.llama_model_get_vocab(llm.model)))
        with open(os.path.join(out_dir, f"{key}.tokens.json"), "w") as f:
            json.dump({"model": fname, "oracle": "llama-cpp-python 0.3.36", "add_bos": add_bos, "cases": toks}, f, ensure_ascii=False, indent=1)
        runs = []
        for p in PROMPTS:
            prompt = llm.tokenize(p.encode("utf-8"), add_bos=add_bos, special=False)
            llm.reset()
            llm.eval(prompt)
            out, tops = [], []
            for _ in range(N_GREEDY):
                logits = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float32)
                nxt = int(np.argmax(logits))
                out.append(nxt)
                tops.append(top5(logits))
                llm.eval([nxt])
            runs.append({"prompt": p, "prompt_ids": prompt, "greedy": out, "top5": tops})
        with open(os.path.join(out_dir, f"{key}.greedy.json"), "w") as f:
            json.dump({"model": fname, "oracle": "llama-cpp-python 0.3.36", "n_threads": 2, "kv_cache": "f32", "flash_attn": False, "runs": runs}, f, ensure_ascii=False, indent=1)
        print(key, "ok", file=sys.stderr)


if __name__ == "__main__":
    main()
