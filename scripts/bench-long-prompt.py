#!/usr/bin/env python3
"""Long-prompt prefill, toolgate against llama.cpp in the same run (dev-time: needs
llama-cpp-python; the "Long prompts" table of BENCHMARKS.md).

    $ORACLE_PY scripts/bench-long-prompt.py target/release/toolgate 2048 MODEL.gguf ...

The prompt is the first N tokens of toolgate's own docs. toolgate: `toolgate run -n 1`
(its `prompt … tok/s` line); llama.cpp: `Llama.eval` of the same tokens, n_batch 512,
2 threads. Best of 2 each; one line per model.
"""
import os
import re
import subprocess
import sys
import time

import llama_cpp

DOCS = ["README.md", "docs/performance.md", "docs/server.md", "docs/grammar.md", "docs/cli.md"]


def main() -> None:
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    toolgate, n = sys.argv[1], int(sys.argv[2])
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    text = "".join(open(os.path.join(root, f)).read() for f in DOCS)
    for model in sys.argv[3:]:
        llm = llama_cpp.Llama(model_path=model, n_ctx=n + 64, n_threads=2, n_batch=512, verbose=False)
        tokens = llm.tokenize(text.encode(), add_bos=True)[:n]
        prompt = llm.detokenize(tokens[1:]).decode(errors="ignore")
        theirs = 0.0
        for _ in range(2):
            llm.reset()
            t = time.perf_counter()
            llm.eval(tokens)
            theirs = max(theirs, len(tokens) / (time.perf_counter() - t))
        ours, counted = 0.0, "?"
        for _ in range(2):
            err = subprocess.run([toolgate, "run", "--model", model, "-p", prompt, "-n", "1", "--ctx-size", str(n + 256)],
                                 capture_output=True, text=True).stderr
            m = re.search(r"prompt (\d+) tokens, ([\d.]+) tok/s", err)
            if m:
                ours, counted = max(ours, float(m.group(2))), m.group(1)
        print(f"{os.path.basename(model)}: {n} tokens (toolgate counts {counted}): toolgate {ours:.1f} tok/s, "
              f"llama.cpp {theirs:.1f} tok/s, ratio {ours / theirs:.2f}", flush=True)


if __name__ == "__main__":
    main()
