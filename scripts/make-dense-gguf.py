#!/usr/bin/env python3
"""Dev-time: write a synthetic dense llama-architecture GGUF (random weights, the real
shapes of a model size people run) to measure speed where a real file cannot be
brought, e.g. on the GPU machine, which is reached through a 64 MiB transfer.

    python3 scripts/make-dense-gguf.py OUT.gguf [SIZE] [TYPE]

SIZE: `0.5b` (Qwen2.5-0.5B's shapes), `1.5b` (Qwen2.5-1.5B's, the default), `3b`
(Qwen2.5-3B's), `7b` (Qwen2.5-7B's) or `8b` (Llama-3.1-8B's); TYPE: `q4_0` (default) or `q8_0`, quantized by `gguf.quants` (numpy;
no llama.cpp needed), the head and embeddings Q8_0; or `f16`/`bf16`, every matrix in
that type, head and embeddings too (as `llama-quantize … F16` writes them). The tokenizer is byte-level gpt2
with one merge (every byte a token) padded with unused tokens to the real vocabulary
size, so the head costs what it costs in the real model. The text it writes is noise:
this file measures speed only. Needs numpy and PyPI `gguf`; never a run-time or test
dependency.
"""
import os
import sys

import numpy as np
from gguf import GGUFWriter, GGMLQuantizationType as Q
from gguf.quants import quantize

# (layers, embedding, feed-forward, heads, kv heads, vocabulary)
SIZES = {
    "0.5b": (24, 896, 4864, 14, 2, 151936),
    "1.5b": (28, 1536, 8960, 12, 2, 151936),
    "3b": (36, 2048, 11008, 16, 2, 151936),
    "7b": (28, 3584, 18944, 28, 4, 152064),
    "8b": (32, 4096, 14336, 32, 8, 128256),
}


def gpt2_bytes():
    """The 256 byte tokens of gpt2's byte-level alphabet, in byte order."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return [chr(c) for _, c in sorted(zip(bs, cs))]


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    dst = sys.argv[1]
    size = sys.argv[2] if len(sys.argv) > 2 else "1.5b"
    kind = sys.argv[3] if len(sys.argv) > 3 else "q4_0"
    n_layer, n_embd, n_ff, n_head, n_kv, vocab = SIZES[size]
    qt = {"q4_0": Q.Q4_0, "q8_0": Q.Q8_0, "f16": Q.F16, "bf16": Q.BF16}[kind]
    head = qt if kind in ("f16", "bf16") else Q.Q8_0
    hd = n_embd // n_head
    rng = np.random.default_rng(7)
    w = GGUFWriter(dst, "llama")
    a = "llama"
    for key, v in [("block_count", n_layer), ("context_length", 32768), ("embedding_length", n_embd),
                   ("feed_forward_length", n_ff), ("attention.head_count", n_head),
                   ("attention.head_count_kv", n_kv), ("rope.dimension_count", hd)]:
        w.add_uint32(f"{a}.{key}", v)
    w.add_float32(f"{a}.attention.layer_norm_rms_epsilon", 1e-6)
    w.add_float32(f"{a}.rope.freq_base", 1e6)
    # One merge (two spaces): gguf drops an empty merge list, and a gpt2 tokenizer needs one.
    tokens = gpt2_bytes() + ["ĠĠ", "<|endoftext|>"]
    types = [1] * 257 + [3]
    tokens += [f"<unused{i}>" for i in range(len(tokens), vocab)]
    types += [5] * (vocab - len(types))
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(["Ġ Ġ"])
    w.add_eos_token_id(257)

    def t(name, rows, cols, qtype=qt, scale=0.02):
        x = rng.standard_normal((rows, cols), dtype=np.float32) * scale
        w.add_tensor(name, quantize(x, qtype), raw_dtype=qtype)

    t("token_embd.weight", vocab, n_embd, head, 1.0)
    w.add_tensor("output_norm.weight", np.ones(n_embd, dtype=np.float32))
    t("output.weight", vocab, n_embd, head)
    for i in range(n_layer):
        p = f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", np.ones(n_embd, dtype=np.float32))
        w.add_tensor(p + "ffn_norm.weight", np.ones(n_embd, dtype=np.float32))
        t(p + "attn_q.weight", n_head * hd, n_embd)
        t(p + "attn_k.weight", n_kv * hd, n_embd)
        t(p + "attn_v.weight", n_kv * hd, n_embd)
        t(p + "attn_output.weight", n_embd, n_head * hd)
        t(p + "ffn_gate.weight", n_ff, n_embd)
        t(p + "ffn_up.weight", n_ff, n_embd)
        t(p + "ffn_down.weight", n_embd, n_ff)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print("wrote", dst, os.path.getsize(dst) >> 20, "MiB", flush=True)


main()
