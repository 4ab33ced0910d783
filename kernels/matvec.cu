// toolgate's CUDA matrix-vector products for decode: up to 8 activation rows (f32)
// times a GGUF-quantized weight, read in its file layout, in one launch per
// projection — or per group of up to three projections of the same input (q, k, v),
// or a gate and up pair with the gated activation applied on the way out. Compiled to
// PTX by build.rs when the `cuda` feature is on, launched from
// src/model/cuda/kernels.rs (`matvec`).
//
// Why: candle's decode matmul quantizes the activations to 8 bits in a kernel of its
// own, allocates and zeroes its output, then multiplies (and a bias is one more op);
// in a decode step of a small model those launches, not the weight reads, are the
// time. Here the activations stay f32 (read through the cache; they are a few KB), the
// bias is added in the kernel, and the output is written once.
//
// Layout: the weight of `n` outputs and `k` inputs is `n` rows of k / B blocks of the
// type's block (B weights, the bytes ggml writes); a warp computes one output row for
// every activation row, its 32 lanes taking the row's chunks (8 or 16 weights:
// `chunk_weights`) in turn, consecutive lanes consecutive chunks so that each load
// instruction of the warp reads contiguous bytes; 4 warps a block of threads.
//
// The chunk decoders below are plain C++ (host and device): the test
// cuda_matvec::the_cuda_matvec_decodes_every_weight_type_as_candle_does compiles them
// for the host and checks them against candle's dequantization, with no GPU.

#include <stdint.h>

#ifdef __CUDACC__
#include <cuda_fp16.h>
#define TG_HD __host__ __device__ __forceinline__
#else
#define TG_HD inline
#endif

// ggml's type ids (ggml.h's enum ggml_type).
#define T_F32 0
#define T_F16 1
#define T_Q4_0 2
#define T_Q4_1 3
#define T_Q5_0 6
#define T_Q5_1 7
#define T_Q8_0 8
#define T_Q4_K 12
#define T_Q5_K 13
#define T_Q6_K 14

TG_HD float f16(const uint8_t* p) {
    const uint16_t h = (uint16_t)p[0] | ((uint16_t)p[1] << 8);
#ifdef __CUDA_ARCH__
    return __half2float(__ushort_as_half(h));
#else
    const uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
    if (exp == 0) {
        if (man == 0) {
            bits = sign;
        } else {
            exp = 127 - 15 + 1;
            while (!(man & 0x400)) { man <<= 1; exp--; }
            bits = sign | (exp << 23) | ((man & 0x3ff) << 13);
        }
    } else if (exp == 31) {
        bits = sign | 0x7f800000 | (man << 13);
    } else {
        bits = sign | ((exp + 127 - 15) << 23) | (man << 13);
    }
    float f;
    __builtin_memcpy(&f, &bits, 4);
    return f;
#endif
}

TG_HD uint32_t u32le(const uint8_t* p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

// Bytes and weights of a type's block, and weights per unit (what one lane takes).
TG_HD int block_bytes(int t) {
    switch (t) {
        case T_F32: return 4;
        case T_F16: return 2;
        case T_Q4_0: return 18;
        case T_Q4_1: return 20;
        case T_Q5_0: return 22;
        case T_Q5_1: return 24;
        case T_Q8_0: return 34;
        case T_Q4_K: return 144;
        case T_Q5_K: return 176;
        case T_Q6_K: return 210;
        default: return 0;
    }
}

TG_HD int block_weights(int t) {
    switch (t) {
        case T_F32: case T_F16: return 1;
        case T_Q4_K: case T_Q5_K: case T_Q6_K: return 256;
        default: return 32;
    }
}

// Weights per chunk (what one lane takes at a time): 16 for the 256-weight
// super-blocks (16 lanes a super-block), 8 for everything else (4 lanes a 32-weight
// block). Consecutive lanes take consecutive chunks, so a warp's loads of weights and
// activations are contiguous.
TG_HD int chunk_weights(int t) {
    switch (t) {
        case T_Q4_K: case T_Q5_K: case T_Q6_K: return 16;
        default: return 8;
    }
}

// Q4_K/Q5_K's 6-bit scale and min of sub-block j (0..7) from the 12 packed bytes.
TG_HD void scale_min_k4(int j, const uint8_t* q, float* sc, float* m) {
    if (j < 4) {
        *sc = (float)(q[j] & 63);
        *m = (float)(q[j + 4] & 63);
    } else {
        *sc = (float)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
        *m = (float)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

// Chunk `q` of a row (`row` its first byte): calls dot.add4(column, w0, w1, w2, w3)
// for its weights, four consecutive columns at a time (columns absolute in the row).
template <int t, class Dot>
TG_HD void chunk_dot(const uint8_t* row, int q, Dot& dot) {
    switch (t) {
        case T_F32: {
            const float* w = (const float*)row + q * 8;
            dot.add4(q * 8, w[0], w[1], w[2], w[3]);
            dot.add4(q * 8 + 4, w[4], w[5], w[6], w[7]);
            break;
        }
        case T_F16: {
            const uint8_t* w = row + q * 16;
            dot.add4(q * 8, f16(w), f16(w + 2), f16(w + 4), f16(w + 6));
            dot.add4(q * 8 + 4, f16(w + 8), f16(w + 10), f16(w + 12), f16(w + 14));
            break;
        }
        case T_Q4_0: case T_Q4_1: case T_Q5_0: case T_Q5_1: {
            // Four chunks a block; chunk c: quant bytes 4c..4c+3, low nibbles columns
            // 4c.., high nibbles 16 + 4c.. (Q5: the fifth bits from qh, bit i and i + 16).
            const int b = q >> 2, c = q & 3;
            const bool one = t == T_Q4_1 || t == T_Q5_1, five = t == T_Q5_0 || t == T_Q5_1;
            const uint8_t* blk = row + b * block_bytes(t);
            const float d = f16(blk);
            const float m = one ? f16(blk + 2) : (five ? -16.f : -8.f) * d;
            const uint8_t* hp = blk + (one ? 4 : 2);
            const uint32_t qh = five ? u32le(hp) : 0;
            const uint8_t* qs = hp + (five ? 4 : 0) + 4 * c;
            float lo[4], hi[4];
            for (int i = 0; i < 4; i++) {
                const int j = 4 * c + i;
                lo[i] = d * (float)((qs[i] & 0xF) | (((qh >> j) & 1) << 4)) + m;
                hi[i] = d * (float)((qs[i] >> 4) | (((qh >> (j + 16)) & 1) << 4)) + m;
            }
            dot.add4(b * 32 + 4 * c, lo[0], lo[1], lo[2], lo[3]);
            dot.add4(b * 32 + 16 + 4 * c, hi[0], hi[1], hi[2], hi[3]);
            break;
        }
        case T_Q8_0: {
            const int b = q >> 2, c = q & 3;
            const uint8_t* blk = row + b * 34;
            const float d = f16(blk);
            const int8_t* qs = (const int8_t*)(blk + 2 + 8 * c);
            dot.add4(b * 32 + 8 * c, d * qs[0], d * qs[1], d * qs[2], d * qs[3]);
            dot.add4(b * 32 + 8 * c + 4, d * qs[4], d * qs[5], d * qs[6], d * qs[7]);
            break;
        }
        case T_Q4_K: case T_Q5_K: {
            // 16 chunks a super-block: chunk c = 4g + j takes quant bytes 32g + 8j..+7,
            // low nibbles sub-block 2g (columns 64g + 8j..), high nibbles 2g + 1 (+32);
            // Q5_K's fifth bits are bits 2g, 2g + 1 of qh[8j..].
            const int s = q >> 4, g = (q >> 2) & 3, j = q & 3;
            const bool five = t == T_Q5_K;
            const uint8_t* blk = row + s * block_bytes(t);
            const float d = f16(blk), dmin = f16(blk + 2);
            float sc0, m0, sc1, m1;
            scale_min_k4(2 * g, blk + 4, &sc0, &m0);
            scale_min_k4(2 * g + 1, blk + 4, &sc1, &m1);
            const float d0 = d * sc0, o0 = dmin * m0, d1 = d * sc1, o1 = dmin * m1;
            const uint8_t* qh = blk + 16 + 8 * j;
            const uint8_t* qs = blk + (five ? 48 : 16) + 32 * g + 8 * j;
            const int col = s * 256 + 64 * g + 8 * j;
            float lo[8], hi[8];
            for (int i = 0; i < 8; i++) {
                int l = qs[i] & 0xF, h = qs[i] >> 4;
                if (five) {
                    l |= ((qh[i] >> (2 * g)) & 1) << 4;
                    h |= ((qh[i] >> (2 * g + 1)) & 1) << 4;
                }
                lo[i] = d0 * (float)l - o0;
                hi[i] = d1 * (float)h - o1;
            }
            dot.add4(col, lo[0], lo[1], lo[2], lo[3]);
            dot.add4(col + 4, lo[4], lo[5], lo[6], lo[7]);
            dot.add4(col + 32, hi[0], hi[1], hi[2], hi[3]);
            dot.add4(col + 36, hi[4], hi[5], hi[6], hi[7]);
            break;
        }
        case T_Q6_K: {
            // 16 chunks a super-block: chunk c = 8n + e takes l = 4e..4e+3 of half n,
            // four weights each (columns 128n + l + 0/32/64/96).
            const int s = q >> 4, n = (q >> 3) & 1, l0 = 4 * (q & 7);
            const uint8_t* blk = row + s * 210;
            const uint8_t* ql = blk + 64 * n + l0;
            const uint8_t* qh = blk + 128 + 32 * n + l0;
            const int8_t* sc = (const int8_t*)(blk + 192) + 8 * n + l0 / 16;
            const float d = f16(blk + 208);
            const float s0 = d * sc[0], s1 = d * sc[2], s2 = d * sc[4], s3 = d * sc[6];
            float w1[4], w2[4], w3[4], w4[4];
            for (int i = 0; i < 4; i++) {
                w1[i] = s0 * (float)(((ql[i] & 0xF) | (((qh[i] >> 0) & 3) << 4)) - 32);
                w2[i] = s1 * (float)(((ql[i + 32] & 0xF) | (((qh[i] >> 2) & 3) << 4)) - 32);
                w3[i] = s2 * (float)(((ql[i] >> 4) | (((qh[i] >> 4) & 3) << 4)) - 32);
                w4[i] = s3 * (float)(((ql[i + 32] >> 4) | (((qh[i] >> 6) & 3) << 4)) - 32);
            }
            const int col = s * 256 + 128 * n + l0;
            dot.add4(col, w1[0], w1[1], w1[2], w1[3]);
            dot.add4(col + 32, w2[0], w2[1], w2[2], w2[3]);
            dot.add4(col + 64, w3[0], w3[1], w3[2], w3[3]);
            dot.add4(col + 96, w4[0], w4[1], w4[2], w4[3]);
            break;
        }
        default: break;
    }
}

// Accumulates weights · x[r][columns] for NR activation rows (x row r at x + r * k;
// 16-byte aligned rows on the device, read four floats at a time).
template <int NR>
struct Dot {
    const float* x;
    int k;
    float acc[NR];
    TG_HD void add4(int col, float w0, float w1, float w2, float w3) {
#pragma unroll
        for (int r = 0; r < NR; r++) {
            const float* p = x + (long)r * k + col;
#ifdef __CUDA_ARCH__
            const float4 v = __ldg((const float4*)p);
            acc[r] += w0 * v.x + w1 * v.y + w2 * v.z + w3 * v.w;
#else
            acc[r] += w0 * p[0] + w1 * p[1] + w2 * p[2] + w3 * p[3];
#endif
        }
    }
};

// The chunks `first`, `first + step`, ... of a row of type T, U at a time (so that
// their loads are in flight together).
template <int T, int U, int NR>
TG_HD void chunks_dot(const uint8_t* row, int k, int first, int step, Dot<NR>& dot) {
    const int chunks = k / chunk_weights(T);
    int q = first;
    for (; q + (U - 1) * step < chunks; q += U * step) {
#pragma unroll
        for (int u = 0; u < U; u++) chunk_dot<T>(row, q + u * step, dot);
    }
    for (; q < chunks; q += step) chunk_dot<T>(row, q, dot);
}

// The dot products of weight row `row` (k inputs, type t) with NR activation rows,
// over the chunks `first`, `first + step`, ... (U at a time): partial sums in dot.acc.
template <int NR, int U = 1>
TG_HD void row_dot(int t, const uint8_t* row, int k, int first, int step, Dot<NR>& dot) {
    switch (t) {
        case T_F32: chunks_dot<T_F32, U>(row, k, first, step, dot); break;
        case T_F16: chunks_dot<T_F16, U>(row, k, first, step, dot); break;
        case T_Q4_0: chunks_dot<T_Q4_0, U>(row, k, first, step, dot); break;
        case T_Q4_1: chunks_dot<T_Q4_1, U>(row, k, first, step, dot); break;
        case T_Q5_0: chunks_dot<T_Q5_0, U>(row, k, first, step, dot); break;
        case T_Q5_1: chunks_dot<T_Q5_1, U>(row, k, first, step, dot); break;
        case T_Q8_0: chunks_dot<T_Q8_0, U>(row, k, first, step, dot); break;
        case T_Q4_K: chunks_dot<T_Q4_K, U>(row, k, first, step, dot); break;
        case T_Q5_K: chunks_dot<T_Q5_K, U>(row, k, first, step, dot); break;
        case T_Q6_K: chunks_dot<T_Q6_K, U>(row, k, first, step, dot); break;
        default: break;
    }
}

#ifdef __CUDACC__

#include "common.cuh"

#define MV_WARPS 4

__device__ __forceinline__ float gated(float g, float u, int mode, float alpha, float limit) {
    if (mode == 0) return g / (1.f + expf(-g)) * u;
    if (mode == 1) return 0.5f * g * (1.f + tanhf(0.7978845608028654f * (g + 0.044715f * g * g * g))) * u;
    g = fminf(g, limit);
    return g / (1.f + expf(-alpha * g)) * (fminf(fmaxf(u, -limit), limit) + 1.f);
}

// One warp's output row: the NR dot products of weight row `r` of (w, t) (row bytes
// rb) with x, summed over the warp, plus the bias; every lane gets the totals.
template <int NR, int U>
__device__ __forceinline__ void warp_row(const float* x, int k, const uint8_t* w, int t, long rb, int r,
                                         const float* bias, float out[NR]) {
    Dot<NR> dot;
    dot.x = x;
    dot.k = k;
#pragma unroll
    for (int i = 0; i < NR; i++) dot.acc[i] = 0.f;
    row_dot<NR, U>(t, w + rb * r, k, threadIdx.x % WARP, WARP, dot);
    const float b = bias ? bias[r] : 0.f;
#pragma unroll
    for (int i = 0; i < NR; i++) out[i] = warp_sum(dot.acc[i]) + b;
}

// y[i][o] for activation rows i < NR (x row i at x + i * k), outputs o over the
// concatenated rows of up to three weights (wj of type tj, nj rows, bias bj or null;
// n1 = n2 = 0 for fewer), written at y + i * ys + o.
// With mode >= 0 (0 SiLU, 1 GELU tanh, 2 gpt-oss's clamped SwiGLU with alpha, limit)
// weights 0 and 1 are gate and up of n0 rows each and y[i][o] = act(gate_o) · up_o.
template <int NR, int U>
__device__ void matvec(const float* __restrict__ x, int k,
                       const uint8_t* __restrict__ w0, const uint8_t* __restrict__ w1, const uint8_t* __restrict__ w2,
                       int t0, int t1, int t2, int n0, int n1, int n2,
                       const float* __restrict__ b0, const float* __restrict__ b1, const float* __restrict__ b2,
                       float* __restrict__ y, int ys, int mode, float alpha, float limit) {
    const long o = (long)blockIdx.x * MV_WARPS + threadIdx.x / WARP;
    const int lane = threadIdx.x % WARP;
    float a[NR];
    if (mode >= 0) {
        if (o >= n0) return;
        float u[NR];
        warp_row<NR, U>(x, k, w0, t0, (long)(k / block_weights(t0)) * block_bytes(t0), (int)o, b0, a);
        warp_row<NR, U>(x, k, w1, t1, (long)(k / block_weights(t1)) * block_bytes(t1), (int)o, b1, u);
        if (lane == 0) {
#pragma unroll
            for (int i = 0; i < NR; i++) y[(long)i * ys + o] = gated(a[i], u[i], mode, alpha, limit);
        }
        return;
    }
    const uint8_t* w;
    const float* b;
    int t;
    long r;
    if (o < n0) {
        w = w0; b = b0; t = t0; r = o;
    } else if (o < n0 + n1) {
        w = w1; b = b1; t = t1; r = o - n0;
    } else if (o < (long)n0 + n1 + n2) {
        w = w2; b = b2; t = t2; r = o - n0 - n1;
    } else {
        return;
    }
    warp_row<NR, U>(x, k, w, t, (long)(k / block_weights(t)) * block_bytes(t), (int)r, b, a);
    if (lane == 0) {
#pragma unroll
        for (int i = 0; i < NR; i++) y[(long)i * ys + o] = a[i];
    }
}

// tg_matvec_NR: NR activation rows; tg_matvec_1_uU: one row, U chunks a lane in
// flight at a time. BLOCKS: the thread blocks per multiprocessor the registers are
// sized for.
#define TG_MATVEC(NAME, NR, U, BLOCKS)                                                                       \
    extern "C" __global__ void __launch_bounds__(MV_WARPS * WARP, BLOCKS) NAME(                                   \
        const float* x, int k, const uint8_t* w0, const uint8_t* w1, const uint8_t* w2, int t0, int t1,      \
        int t2, int n0, int n1, int n2, const float* b0, const float* b1, const float* b2, float* y, int ys, \
        int mode, float alpha, float limit) {                                                                \
        matvec<NR, U>(x, k, w0, w1, w2, t0, t1, t2, n0, n1, n2, b0, b1, b2, y, ys, mode, alpha, limit);      \
    }

TG_MATVEC(tg_matvec_1, 1, 1, 6)
TG_MATVEC(tg_matvec_2, 2, 1, 6)
TG_MATVEC(tg_matvec_3, 3, 1, 6)
TG_MATVEC(tg_matvec_4, 4, 1, 6)
TG_MATVEC(tg_matvec_5, 5, 1, 6)
TG_MATVEC(tg_matvec_6, 6, 1, 6)
TG_MATVEC(tg_matvec_7, 7, 1, 6)
TG_MATVEC(tg_matvec_8, 8, 1, 6)
TG_MATVEC(tg_matvec_1_u2, 1, 2, 4)
TG_MATVEC(tg_matvec_1_u4, 1, 4, 3)

// Mixture-of-experts decode of one row on the device (no host round trip, so a decode
// step with experts can be captured in a graph): tg_moe_route picks the experts from
// the router's logits, tg_moe_gate_up runs the chosen experts' gate and up with the
// activation, tg_moe_down their down projections summed with the routing weights.
// Expert e's weights are at gate_tab[e], up_tab[e], down_tab[e] (device addresses,
// one type per table); its biases at *_btab[e] (0: none; a null table: no biases).

#define MOE_MAX_EXPERTS 512
#define MOE_MAX_USED 32

// One warp: probabilities of n experts from logits (gating 0 softmax, 1 sigmoid), the
// `used` best by probability plus sel_bias (ties to the lower index), their weights
// (probability, over the chosen sum when norm_topk, floored at an f16's smallest
// normal; times scale) into ids[j], weights[j], best first.
extern "C" __global__ void tg_moe_route(const float* __restrict__ logits, int n, int used, int gating,
                                        const float* __restrict__ sel_bias, int norm_topk, float scale,
                                        int* __restrict__ ids, float* __restrict__ weights) {
    __shared__ float prob[MOE_MAX_EXPERTS], key[MOE_MAX_EXPERTS];
    __shared__ int chosen[MOE_MAX_USED];
    const int lane = threadIdx.x;
    float mx = -INFINITY;
    for (int e = lane; e < n; e += WARP) mx = fmaxf(mx, logits[e]);
#pragma unroll
    for (int o = WARP / 2; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffff, mx, o));
    float sum = 0.f;
    for (int e = lane; e < n; e += WARP) {
        const float p = gating == 0 ? expf(logits[e] - mx) : 1.f / (1.f + expf(-logits[e]));
        prob[e] = p;
        sum += p;
    }
    sum = warp_sum(sum);
    for (int e = lane; e < n; e += WARP) {
        if (gating == 0) prob[e] /= sum;
        key[e] = prob[e] + (sel_bias ? sel_bias[e] : 0.f);
    }
    __syncwarp();
    for (int j = 0; j < used; j++) {
        float best = -INFINITY;
        int at = n;
        for (int e = lane; e < n; e += WARP) {
            if (key[e] > best || (key[e] == best && e < at)) { best = key[e]; at = e; }
        }
#pragma unroll
        for (int o = WARP / 2; o > 0; o >>= 1) {
            const float b2 = __shfl_xor_sync(0xffffffff, best, o);
            const int a2 = __shfl_xor_sync(0xffffffff, at, o);
            if (b2 > best || (b2 == best && a2 < at)) { best = b2; at = a2; }
        }
        if (lane == 0) {
            chosen[j] = at;
            key[at] = -INFINITY;
        }
        __syncwarp();
    }
    if (lane == 0) {
        float total = 0.f;
        for (int j = 0; j < used; j++) total += prob[chosen[j]];
        total = fmaxf(total, 6.103515625e-5f);
        for (int j = 0; j < used; j++) {
            ids[j] = chosen[j];
            weights[j] = (norm_topk ? prob[chosen[j]] / total : prob[chosen[j]]) * scale;
        }
    }
}

// act[j][o] = act(gate_e · x + b) · (up_e · x + b) for chosen expert j (e = ids[j],
// blockIdx.y), output o < n_ff; x one row of k.
extern "C" __global__ void __launch_bounds__(MV_WARPS * WARP, 6)
tg_moe_gate_up(const float* __restrict__ x, int k, const unsigned long long* __restrict__ gate_tab,
               const unsigned long long* __restrict__ up_tab, int t_gate, int t_up,
               const unsigned long long* __restrict__ gate_btab, const unsigned long long* __restrict__ up_btab,
               int n_ff, const int* __restrict__ ids, int mode, float alpha, float limit, float* __restrict__ act) {
    const int o = blockIdx.x * MV_WARPS + threadIdx.x / WARP, j = blockIdx.y;
    if (o >= n_ff) return;
    const int e = ids[j];
    const float* bg = gate_btab ? (const float*)gate_btab[e] : nullptr;
    const float* bu = up_btab ? (const float*)up_btab[e] : nullptr;
    float g[1], u[1];
    warp_row<1, 1>(x, k, (const uint8_t*)gate_tab[e], t_gate, (long)(k / block_weights(t_gate)) * block_bytes(t_gate), o,
                   bg, g);
    warp_row<1, 1>(x, k, (const uint8_t*)up_tab[e], t_up, (long)(k / block_weights(t_up)) * block_bytes(t_up), o, bu, u);
    if (threadIdx.x % WARP == 0) act[(long)j * n_ff + o] = gated(g[0], u[0], mode, alpha, limit);
}

// y[o] = sum over chosen experts j of weights[j] · (down_e · act[j] + b), o < n_embd.
extern "C" __global__ void __launch_bounds__(MV_WARPS * WARP, 6)
tg_moe_down(const float* __restrict__ act, int n_ff, const unsigned long long* __restrict__ down_tab, int t_down,
            const unsigned long long* __restrict__ down_btab, int n_embd, const int* __restrict__ ids,
            const float* __restrict__ weights, int used, float* __restrict__ y) {
    const int o = blockIdx.x * MV_WARPS + threadIdx.x / WARP;
    if (o >= n_embd) return;
    const long rb = (long)(n_ff / block_weights(t_down)) * block_bytes(t_down);
    float total = 0.f;
    for (int j = 0; j < used; j++) {
        const int e = ids[j];
        float d[1];
        warp_row<1, 1>(act + (long)j * n_ff, n_ff, (const uint8_t*)down_tab[e], t_down, rb, o,
                       down_btab ? (const float*)down_btab[e] : nullptr, d);
        total += weights[j] * d[0];
    }
    if (threadIdx.x % WARP == 0) y[o] = total;
}

#endif
