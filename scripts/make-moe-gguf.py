#!/usr/bin/env python3
"""Dev-time: write a synthetic Qwen3-MoE GGUF (random weights, real shapes of a small
MoE) to measure MoE prefill/decode against llama.cpp. The tokenizer and chat template
are copied from a real qwen2-family GGUF so both engines tokenize the same text.

    /tmp/oracle/bin/python scripts/make-moe-gguf.py VOCAB_SOURCE.gguf OUT.gguf [EXPERTS] [LAYERS]

Needs llama-cpp-python (its bundled ggml quantizes: Q4_K experts and attention, Q6_K
head) and PyPI `gguf`. Never a run-time or test dependency.
"""
import ctypes
import os
import sys

import numpy as np
import gguf
import llama_cpp
from gguf import GGUFReader, GGUFWriter, GGMLQuantizationType as Q

lib = ctypes.CDLL(os.path.join(os.path.dirname(llama_cpp.__file__), "lib", "libggml-base.so"))
lib.ggml_quantize_chunk.restype = ctypes.c_size_t
lib.ggml_quantize_chunk.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64,
                                    ctypes.c_int64, ctypes.c_void_p]
BLOCK = {Q.Q4_K: (256, 144), Q.Q6_K: (256, 210), Q.Q8_0: (32, 34)}


def quant(x, qt):
    x = np.ascontiguousarray(x.reshape(-1, x.shape[-1]), dtype=np.float32)
    rows, k = x.shape
    bl, bb = BLOCK[qt]
    out = np.zeros(rows * (k // bl) * bb, dtype=np.uint8)
    n = lib.ggml_quantize_chunk(int(qt), x.ctypes.data, out.ctypes.data, 0, rows, k, None)
    assert n == out.size
    return out


def main():
    src, dst = sys.argv[1], sys.argv[2]
    n_expert = int(sys.argv[3]) if len(sys.argv) > 3 else 64
    n_layer = int(sys.argv[4]) if len(sys.argv) > 4 else 24
    n_embd, n_head, n_kv, hd, n_ff_exp, used = 1024, 16, 4, 64, 512, 8
    rng = np.random.default_rng(7)
    r = GGUFReader(src)
    w = GGUFWriter(dst, "qwen3moe")
    for name, f in r.fields.items():
        if name.startswith("tokenizer.") or name == "general.file_type":
            vt = f.types[0]
            sub = f.types[-1] if vt == gguf.GGUFValueType.ARRAY else None
            w.add_key_value(name, f.contents(), vt, sub_type=sub)
    vocab = len(r.fields["tokenizer.ggml.tokens"].contents())
    a = "qwen3moe"
    for key, v in [("block_count", n_layer), ("context_length", 4096), ("embedding_length", n_embd),
                   ("feed_forward_length", n_ff_exp * used), ("attention.head_count", n_head),
                   ("attention.head_count_kv", n_kv), ("attention.key_length", hd), ("attention.value_length", hd),
                   ("expert_count", n_expert), ("expert_used_count", used), ("expert_feed_forward_length", n_ff_exp)]:
        w.add_uint32(f"{a}.{key}", v)
    w.add_float32(f"{a}.attention.layer_norm_rms_epsilon", 1e-6)
    w.add_float32(f"{a}.rope.freq_base", 1e6)

    def t(name, shape, qt, scale=0.02):
        x = (rng.standard_normal(shape, dtype=np.float32) * scale)
        if qt == Q.F32:
            w.add_tensor(name, x)
        else:
            data = quant(x, qt)
            w.add_tensor(name, data.reshape(int(np.prod(shape[:-1])), -1), raw_dtype=qt)

    t("token_embd.weight", (vocab, n_embd), Q.Q6_K, 1.0)
    w.add_tensor("output_norm.weight", np.ones(n_embd, dtype=np.float32))
    t("output.weight", (vocab, n_embd), Q.Q6_K)
    for i in range(n_layer):
        p = f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", np.ones(n_embd, dtype=np.float32))
        w.add_tensor(p + "ffn_norm.weight", np.ones(n_embd, dtype=np.float32))
        w.add_tensor(p + "attn_q_norm.weight", np.ones(hd, dtype=np.float32))
        w.add_tensor(p + "attn_k_norm.weight", np.ones(hd, dtype=np.float32))
        t(p + "attn_q.weight", (n_head * hd, n_embd), Q.Q4_K)
        t(p + "attn_k.weight", (n_kv * hd, n_embd), Q.Q4_K)
        t(p + "attn_v.weight", (n_kv * hd, n_embd), Q.Q8_0)
        t(p + "attn_output.weight", (n_embd, n_head * hd), Q.Q4_K)
        t(p + "ffn_gate_inp.weight", (n_expert, n_embd), Q.F32, 1.0)
        for kind, shape in [("gate", (n_expert, n_ff_exp, n_embd)), ("up", (n_expert, n_ff_exp, n_embd))]:
            x = rng.standard_normal(shape, dtype=np.float32) * 0.02
            data = quant(x, Q.Q4_K)
            w.add_tensor(p + f"ffn_{kind}_exps.weight", data.reshape(n_expert, n_ff_exp, -1), raw_dtype=Q.Q4_K)
        x = rng.standard_normal((n_expert, n_embd, n_ff_exp), dtype=np.float32) * 0.02
        # Expert width 512 is two Q4_K blocks: down projections stay Q4_K as well.
        w.add_tensor(p + "ffn_down_exps.weight", quant(x, Q.Q4_K).reshape(n_expert, n_embd, -1), raw_dtype=Q.Q4_K)
        print("layer", i, flush=True)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print("wrote", dst, os.path.getsize(dst) >> 20, "MiB")


main()
