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
// every activation row, its 32 lanes taking the row's "units" (a block, or a quarter
// of a 256-weight super-block) in turn; 4 warps a block of threads.
//
// The unit decoders below are plain C++ (host and device): scripts/check-matvec.py
// compiles them for the host and checks them against gguf-py's dequantization.

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

// F32/F16 units are 8 weights; 32-weight blocks are one unit; 256-weight super-blocks
// four units of 64.
TG_HD int unit_weights(int t) {
    switch (t) {
        case T_F32: case T_F16: return 8;
        case T_Q4_K: case T_Q5_K: case T_Q6_K: return 64;
        default: return 32;
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

// Unit `u` of a row (`row` its first byte): calls emit(column, weight) for each of its
// weights. Columns are absolute within the row.
template <class Emit>
TG_HD void unit_weights_of(int t, const uint8_t* row, int u, Emit& emit) {
    switch (t) {
        case T_F32: {
            const float* w = (const float*)row + u * 8;
            for (int i = 0; i < 8; i++) emit(u * 8 + i, w[i]);
            break;
        }
        case T_F16: {
            const uint8_t* w = row + u * 16;
            for (int i = 0; i < 8; i++) emit(u * 8 + i, f16(w + 2 * i));
            break;
        }
        case T_Q4_0: case T_Q4_1: {
            const uint8_t* b = row + u * block_bytes(t);
            const float d = f16(b);
            const float m = t == T_Q4_1 ? f16(b + 2) : -8.f * d;
            const uint8_t* qs = b + (t == T_Q4_1 ? 4 : 2);
            for (int i = 0; i < 16; i++) {
                emit(u * 32 + i, d * (float)(qs[i] & 0xF) + m);
                emit(u * 32 + i + 16, d * (float)(qs[i] >> 4) + m);
            }
            break;
        }
        case T_Q5_0: case T_Q5_1: {
            const uint8_t* b = row + u * block_bytes(t);
            const float d = f16(b);
            const float m = t == T_Q5_1 ? f16(b + 2) : -16.f * d;
            const uint8_t* hp = b + (t == T_Q5_1 ? 4 : 2);
            const uint32_t qh = u32le(hp);
            const uint8_t* qs = hp + 4;
            for (int i = 0; i < 16; i++) {
                const int lo = (qs[i] & 0xF) | (((qh >> i) & 1) << 4);
                const int hi = (qs[i] >> 4) | (((qh >> (i + 16)) & 1) << 4);
                emit(u * 32 + i, d * (float)lo + m);
                emit(u * 32 + i + 16, d * (float)hi + m);
            }
            break;
        }
        case T_Q8_0: {
            const uint8_t* b = row + u * 34;
            const float d = f16(b);
            for (int i = 0; i < 32; i++) emit(u * 32 + i, d * (float)(int8_t)b[2 + i]);
            break;
        }
        case T_Q4_K: case T_Q5_K: {
            // Unit g (0..3) of super-block s: 32 bytes of quants, low nibbles sub-block
            // 2g, high nibbles 2g + 1 (Q5_K: the fifth bits in qh, bits 2g and 2g + 1).
            const int s = u >> 2, g = u & 3;
            const uint8_t* b = row + s * block_bytes(t);
            const float d = f16(b), dmin = f16(b + 2);
            float sc0, m0, sc1, m1;
            scale_min_k4(2 * g, b + 4, &sc0, &m0);
            scale_min_k4(2 * g + 1, b + 4, &sc1, &m1);
            const float d0 = d * sc0, o0 = dmin * m0, d1 = d * sc1, o1 = dmin * m1;
            const bool five = t == T_Q5_K;
            const uint8_t* qh = b + 16;
            const uint8_t* qs = b + (five ? 48 : 16) + 32 * g;
            const int col = s * 256 + 64 * g;
            for (int i = 0; i < 32; i++) {
                int lo = qs[i] & 0xF, hi = qs[i] >> 4;
                if (five) {
                    lo |= ((qh[i] >> (2 * g)) & 1) << 4;
                    hi |= ((qh[i] >> (2 * g + 1)) & 1) << 4;
                }
                emit(col + i, d0 * (float)lo - o0);
                emit(col + 32 + i, d1 * (float)hi - o1);
            }
            break;
        }
        case T_Q6_K: {
            // Unit (n, h) of super-block s, n, h in 0..1: l in 16h..16h + 15 of half n,
            // four weights each (columns 128n + l + 0/32/64/96).
            const int s = u >> 2, n = (u >> 1) & 1, h = u & 1;
            const uint8_t* b = row + s * 210;
            const uint8_t* ql = b + 64 * n;
            const uint8_t* qh = b + 128 + 32 * n;
            const int8_t* sc = (const int8_t*)(b + 192) + 8 * n + h;
            const float d = f16(b + 208);
            const float s0 = d * sc[0], s1 = d * sc[2], s2 = d * sc[4], s3 = d * sc[6];
            const int col = s * 256 + 128 * n;
            for (int l = 16 * h; l < 16 * h + 16; l++) {
                const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
                const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
                const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                emit(col + l, s0 * (float)q1);
                emit(col + l + 32, s1 * (float)q2);
                emit(col + l + 64, s2 * (float)q3);
                emit(col + l + 96, s3 * (float)q4);
            }
            break;
        }
        default: break;
    }
}

// Accumulates weight · x[r][column] for NR activation rows.
template <int NR>
struct Dot {
    const float* x;
    int k;
    float acc[NR];
    TG_HD void operator()(int col, float w) {
#pragma unroll
        for (int r = 0; r < NR; r++) acc[r] += w * x[(long)r * k + col];
    }
};

// The dot products of weight row `row` (k inputs, type t) with NR activation rows,
// over the units `first`, `first + step`, ...: partial sums in dot.acc.
template <int NR>
TG_HD void row_dot(int t, const uint8_t* row, int k, int first, int step, Dot<NR>& dot) {
    const int units = k / unit_weights(t);
    for (int u = first; u < units; u += step) unit_weights_of(t, row, u, dot);
}

#ifdef __CUDACC__

#define WARP 32
#define MV_WARPS 4

__device__ __forceinline__ float mv_warp_sum(float x) {
#pragma unroll
    for (int o = WARP / 2; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffff, x, o);
    return x;
}

__device__ __forceinline__ float gated(float g, float u, int mode, float alpha, float limit) {
    if (mode == 0) return g / (1.f + expf(-g)) * u;
    if (mode == 1) return 0.5f * g * (1.f + tanhf(0.7978845608028654f * (g + 0.044715f * g * g * g))) * u;
    g = fminf(g, limit);
    return g / (1.f + expf(-alpha * g)) * (fminf(fmaxf(u, -limit), limit) + 1.f);
}

// One warp's output row: the NR dot products of weight row `r` of (w, t) (row bytes
// rb) with x, summed over the warp, plus the bias; every lane gets the totals.
template <int NR>
__device__ __forceinline__ void warp_row(const float* x, int k, const uint8_t* w, int t, long rb, int r,
                                         const float* bias, float out[NR]) {
    Dot<NR> dot;
    dot.x = x;
    dot.k = k;
#pragma unroll
    for (int i = 0; i < NR; i++) dot.acc[i] = 0.f;
    row_dot<NR>(t, w + rb * r, k, threadIdx.x % WARP, WARP, dot);
    const float b = bias ? bias[r] : 0.f;
#pragma unroll
    for (int i = 0; i < NR; i++) out[i] = mv_warp_sum(dot.acc[i]) + b;
}

// y[i][o] for activation rows i < NR (x row i at x + i * k), outputs o over the
// concatenated rows of up to three weights (wj of type tj, nj rows, bias bj or null;
// n1 = n2 = 0 for fewer), written at y + i * ys + o.
// With mode >= 0 (0 SiLU, 1 GELU tanh, 2 gpt-oss's clamped SwiGLU with alpha, limit)
// weights 0 and 1 are gate and up of n0 rows each and y[i][o] = act(gate_o) · up_o.
template <int NR>
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
        warp_row<NR>(x, k, w0, t0, (long)(k / block_weights(t0)) * block_bytes(t0), (int)o, b0, a);
        warp_row<NR>(x, k, w1, t1, (long)(k / block_weights(t1)) * block_bytes(t1), (int)o, b1, u);
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
    warp_row<NR>(x, k, w, t, (long)(k / block_weights(t)) * block_bytes(t), (int)r, b, a);
    if (lane == 0) {
#pragma unroll
        for (int i = 0; i < NR; i++) y[(long)i * ys + o] = a[i];
    }
}

#define TG_MATVEC(NR)                                                                                        \
    extern "C" __global__ void __launch_bounds__(MV_WARPS * WARP) tg_matvec_##NR(                            \
        const float* x, int k, const uint8_t* w0, const uint8_t* w1, const uint8_t* w2, int t0, int t1,      \
        int t2, int n0, int n1, int n2, const float* b0, const float* b1, const float* b2, float* y, int ys, \
        int mode, float alpha, float limit) {                                                                \
        matvec<NR>(x, k, w0, w1, w2, t0, t1, t2, n0, n1, n2, b0, b1, b2, y, ys, mode, alpha, limit);         \
    }

TG_MATVEC(1)
TG_MATVEC(2)
TG_MATVEC(3)
TG_MATVEC(4)
TG_MATVEC(5)
TG_MATVEC(6)
TG_MATVEC(7)
TG_MATVEC(8)

#endif
