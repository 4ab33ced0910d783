#!/usr/bin/env python3
"""Dev-time: write a synthetic MoE GGUF with the shapes of Qwen3-30B-A3B (48 layers,
128 experts of width 768, 8 used, 2048 wide, 32 query / 4 KV heads of 128): about
17 GB (Q4_K layers, Q6_K embedding and head; the real Q4_K_M file is 18.6 GB), to check that a model of that size loads and runs on a 24 GiB machine
and to measure it against llama.cpp.

    python3 scripts/make-big-moe-gguf.py VOCAB_SOURCE.gguf OUT.gguf [LAYERS]

The blocks are random bytes with small fixed scales (valid Q4_K / Q6_K / Q8_0
blocks, random weights), streamed to the file tensor by tensor, so writing takes
minutes and little memory; `make-moe-gguf.py` quantizes real random floats instead
(slower, for a 2 GB file). The tokenizer and template come from VOCAB_SOURCE (a
qwen2-family GGUF). Needs PyPI `gguf` and numpy only. Never a run-time or test
dependency.
"""
import os
import sys

import numpy as np
import gguf
from gguf import GGUFReader, GGUFWriter, GGMLQuantizationType as Q

N_EMBD, N_HEAD, N_KV, HEAD_DIM, N_FF_EXP, N_EXPERT, USED = 2048, 32, 4, 128, 768, 128, 8
# (weights per block, bytes per block, byte offsets of the f16 scales and their values)
BLOCK = {
    Q.Q4_K: (256, 144, [(0, 0.00005), (2, 0.00002)]),
    Q.Q6_K: (256, 210, [(208, 0.00002)]),
    Q.Q8_0: (32, 34, [(0, 0.0002)]),
}
rng = np.random.default_rng(7)


def blocks(shape, qt):
    """Random blocks of type `qt` for a tensor of `shape` (last dimension the row)."""
    bl, bb, scales = BLOCK[qt]
    rows = int(np.prod(shape[:-1]))
    data = rng.integers(0, 256, size=(rows * (shape[-1] // bl), bb), dtype=np.uint8)
    for at, value in scales:
        data[:, at:at + 2] = np.frombuffer(np.float16(value).tobytes(), dtype=np.uint8)
    return data.reshape(rows, -1)


def main():
    src, dst = sys.argv[1], sys.argv[2]
    n_layer = int(sys.argv[3]) if len(sys.argv) > 3 else 48
    r = GGUFReader(src)
    w = GGUFWriter(dst, "qwen3moe")
    for name, f in r.fields.items():
        if name.startswith("tokenizer."):
            vt = f.types[0]
            sub = f.types[-1] if vt == gguf.GGUFValueType.ARRAY else None
            w.add_key_value(name, f.contents(), vt, sub_type=sub)
    vocab = len(r.fields["tokenizer.ggml.tokens"].contents())
    a = "qwen3moe"
    for key, v in [("block_count", n_layer), ("context_length", 32768), ("embedding_length", N_EMBD),
                   ("feed_forward_length", 6144), ("attention.head_count", N_HEAD),
                   ("attention.head_count_kv", N_KV), ("attention.key_length", HEAD_DIM),
                   ("attention.value_length", HEAD_DIM), ("expert_count", N_EXPERT), ("expert_used_count", USED),
                   ("expert_feed_forward_length", N_FF_EXP)]:
        w.add_uint32(f"{a}.{key}", v)
    w.add_float32(f"{a}.attention.layer_norm_rms_epsilon", 1e-6)
    w.add_float32(f"{a}.rope.freq_base", 1e6)
    w.add_uint32("general.file_type", 15)  # Q4_K_M

    # (name, shape, type) in file order; f32 tensors are norms (ones) or the router.
    plan = [("token_embd.weight", (vocab, N_EMBD), Q.Q6_K), ("output_norm.weight", (N_EMBD,), Q.F32),
            ("output.weight", (vocab, N_EMBD), Q.Q6_K)]
    for i in range(n_layer):
        p = f"blk.{i}."
        plan += [(p + "attn_norm.weight", (N_EMBD,), Q.F32), (p + "ffn_norm.weight", (N_EMBD,), Q.F32),
                 (p + "attn_q_norm.weight", (HEAD_DIM,), Q.F32), (p + "attn_k_norm.weight", (HEAD_DIM,), Q.F32),
                 (p + "attn_q.weight", (N_HEAD * HEAD_DIM, N_EMBD), Q.Q4_K),
                 (p + "attn_k.weight", (N_KV * HEAD_DIM, N_EMBD), Q.Q4_K),
                 (p + "attn_v.weight", (N_KV * HEAD_DIM, N_EMBD), Q.Q8_0),
                 (p + "attn_output.weight", (N_EMBD, N_HEAD * HEAD_DIM), Q.Q4_K),
                 (p + "ffn_gate_inp.weight", (N_EXPERT, N_EMBD), Q.F32),
                 (p + "ffn_gate_exps.weight", (N_EXPERT, N_FF_EXP, N_EMBD), Q.Q4_K),
                 (p + "ffn_up_exps.weight", (N_EXPERT, N_FF_EXP, N_EMBD), Q.Q4_K),
                 (p + "ffn_down_exps.weight", (N_EXPERT, N_EMBD, N_FF_EXP), Q.Q4_K)]

    def data(name, shape, qt):
        if qt == Q.F32:
            if "gate_inp" in name:
                return rng.standard_normal(shape, dtype=np.float32)
            return np.ones(shape, dtype=np.float32)
        return blocks(shape, qt).reshape(*shape[:-1], -1)

    for name, shape, qt in plan:
        if qt == Q.F32:
            w.add_tensor_info(name, shape, np.dtype(np.float32), int(np.prod(shape)) * 4)
        else:
            bl, bb, _ = BLOCK[qt]
            nbytes = int(np.prod(shape[:-1])) * (shape[-1] // bl) * bb
            w.add_tensor_info(name, (*shape[:-1], shape[-1] // bl * bb), np.dtype(np.uint8), nbytes, raw_dtype=qt)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    for i, (name, shape, qt) in enumerate(plan):
        w.write_tensor_data(data(name, shape, qt))
        if name.endswith("ffn_down_exps.weight"):
            print(name, flush=True)
    w.close()
    print("wrote", dst, os.path.getsize(dst) >> 20, "MiB")


main()
