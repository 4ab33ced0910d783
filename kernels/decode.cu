// toolgate's CUDA kernels for a decode step (one new token per sequence), compiled to
// PTX by build.rs when the `cuda` feature is on and launched from
// src/model/cuda/kernels.rs. Every kernel reads the token's position from device
// memory, not from a launch parameter, so one captured CUDA graph of a decode step
// replays at every position (src/model/cuda/graph.rs).
//
// Layouts (f32 throughout; the KV cache is what src/model/kv_cache.rs allocates):
//   new keys   k (n_kv, d)         new values v (n_kv, dv)    -- one token; head h at
//                                                                h * k_hs / h * v_hs
//   cache      K (n_kv, cap, d)    V (n_kv, cap, dv)          -- row p = position p
//   queries    q (n_head, d)       output     o (n_head, dv)  -- q's head h at h * q_hs
//   position   pos[row]            (int32: the new token's position; it sees keys 0..=pos)

#include <stdint.h>

#include "common.cuh"

#define ATTN_WARPS 4
#define MAX_D 512

__device__ __forceinline__ float block_sum(float x, float* red) {
    x = warp_sum(x);
    const int warp = threadIdx.x / WARP, lane = threadIdx.x % WARP, n = (blockDim.x + WARP - 1) / WARP;
    __syncthreads();
    if (lane == 0) red[warp] = x;
    __syncthreads();
    float t = 0.f;
    for (int w = 0; w < n; w++) t += red[w];
    return t;
}

// One decode row's queries, keys and values, from the projections to where attention
// reads them: block h < n_head takes query head h, block n_head + j key/value head j.
// Each head gets its bias (qb, kb, vb: the projection's whole bias, or null), is
// (optionally) RMS-normed with the per-head weight (Qwen 3, Gemma 3),
// rotated by RoPE at position pos[row] (rope_dim 0: no rotation; pairs (i, i + r/2),
// or (2i, 2i + 1) when `interleaved`; angle pos * inv_freq[i], cos and sin times
// mscale), then queries go to q_out (head h at h * qo_hs) and keys and values into the
// cache at row pos[row] (a position at or past `cap` is not written).
// Input head h of q starts at q + h * q_hs (the host applies the row offset); same for
// k, v.
extern "C" __global__ void tg_qkv_store_f32(
    const float* __restrict__ q, const float* __restrict__ k, const float* __restrict__ v,
    int q_hs, int k_hs, int v_hs,
    const float* __restrict__ qb, const float* __restrict__ kb, const float* __restrict__ vb,
    const float* __restrict__ q_norm, const float* __restrict__ k_norm, float eps,
    const float* __restrict__ inv_freq, float mscale, int rope_dim, int interleaved,
    const int* __restrict__ pos, int row, int n_head, int cap, int d, int dv,
    float* __restrict__ q_out, int qo_hs, float* __restrict__ kc, float* __restrict__ vc) {
    __shared__ float buf[MAX_D];
    __shared__ float red[WARP];
    const int h = blockIdx.x;
    const bool is_q = h < n_head;
    const int kh = h - n_head;
    const long p = pos[row];
    const float* src = is_q ? q + (long)h * q_hs : k + (long)kh * k_hs;
    const float* w = is_q ? q_norm : k_norm;
    const float* bias = is_q ? (qb ? qb + (long)h * d : nullptr) : (kb ? kb + (long)kh * d : nullptr);
    float ss = 0.f;
    for (int i = threadIdx.x; i < d; i += blockDim.x) {
        const float x = src[i] + (bias ? bias[i] : 0.f);
        buf[i] = x;
        ss += x * x;
    }
    if (w != nullptr) {
        const float scale = rsqrtf(block_sum(ss, red) / d + eps);
        for (int i = threadIdx.x; i < d; i += blockDim.x) buf[i] = buf[i] * scale * w[i];
    }
    __syncthreads();
    const int half = rope_dim / 2;
    for (int i = threadIdx.x; i < half; i += blockDim.x) {
        const float a = (float)p * inv_freq[i];
        const float c = cosf(a) * mscale, s = sinf(a) * mscale;
        const int i0 = interleaved ? 2 * i : i, i1 = interleaved ? 2 * i + 1 : i + half;
        const float x0 = buf[i0], x1 = buf[i1];
        buf[i0] = x0 * c - x1 * s;
        buf[i1] = x0 * s + x1 * c;
    }
    __syncthreads();
    if (is_q) {
        for (int i = threadIdx.x; i < d; i += blockDim.x) q_out[(long)h * qo_hs + i] = buf[i];
    } else if (p >= 0 && p < cap) {
        for (int i = threadIdx.x; i < d; i += blockDim.x) kc[((long)kh * cap + p) * d + i] = buf[i];
        for (int i = threadIdx.x; i < dv; i += blockDim.x) vc[((long)kh * cap + p) * dv + i] = v[(long)kh * v_hs + i] + (vb ? vb[(long)kh * dv + i] : 0.f);
    }
}

// Flash-decoding, first pass: block (h, s) of grid (n_head, n_split) attends query
// head h to its share s of the visible keys [first, pos + 1) and writes the share's
// running max m, sum l = sum exp(score - m) and acc = sum exp(score - m) v.
// Each of the ATTN_WARPS warps takes every ATTN_WARPS-th key of the share (lanes split
// the head's width), keeping its own online softmax; the warps are merged at the end.
// `window` 0 means none; `softcap` 0 means none.
extern "C" __global__ void tg_attn_partial_f32(
    const float* __restrict__ q, int q_hs, const float* __restrict__ kc, const float* __restrict__ vc,
    const int* __restrict__ pos, int row,
    int n_head, int n_kv, int cap, int d, int dv,
    int window, float scale, float softcap,
    float* __restrict__ part_m, float* __restrict__ part_l, float* __restrict__ part_acc) {
    const int h = blockIdx.x, s = blockIdx.y, n_split = gridDim.y;
    const int warp = threadIdx.x / WARP, lane = threadIdx.x % WARP;
    const int kvh = h / (n_head / n_kv);
    const int len = pos[row] + 1;
    const int first = (window > 0 && len > window) ? len - window : 0;
    const int total = len - first;
    const int per = (total + n_split - 1) / n_split;
    const int start = first + s * per;
    const int end = min(start + per, len);

    __shared__ float qs[MAX_D];
    __shared__ float wm[ATTN_WARPS], wl[ATTN_WARPS];
    __shared__ float wacc[ATTN_WARPS][MAX_D];
    for (int i = threadIdx.x; i < d; i += blockDim.x) qs[i] = q[(long)h * q_hs + i];
    __syncthreads();

    const float* K = kc + (long)kvh * cap * d;
    const float* V = vc + (long)kvh * cap * dv;
    float m = -INFINITY, l = 0.f;
    float acc[MAX_D / WARP];
    const int nv = (dv + WARP - 1) / WARP;
#pragma unroll
    for (int j = 0; j < MAX_D / WARP; j++) acc[j] = 0.f;
    for (int key = start + warp; key < end; key += ATTN_WARPS) {
        const float* kr = K + (long)key * d;
        float dot = 0.f;
        for (int i = lane; i < d; i += WARP) dot += qs[i] * kr[i];
        dot = warp_sum(dot);
        float sc = dot * scale;
        if (softcap > 0.f) sc = softcap * tanhf(sc / softcap);
        const float m2 = fmaxf(m, sc);
        const float old = __expf(m - m2), p = __expf(sc - m2);
        l = l * old + p;
        const float* vr = V + (long)key * dv;
#pragma unroll
        for (int j = 0; j < MAX_D / WARP; j++) {
            const int i = lane + j * WARP;
            if (j < nv && i < dv) acc[j] = acc[j] * old + p * vr[i];
        }
        m = m2;
    }
    if (lane == 0) { wm[warp] = m; wl[warp] = l; }
#pragma unroll
    for (int j = 0; j < MAX_D / WARP; j++) {
        const int i = lane + j * WARP;
        if (j < nv && i < dv) wacc[warp][i] = acc[j];
    }
    __syncthreads();
    const long slot = (long)h * n_split + s;
    float M = -INFINITY;
#pragma unroll
    for (int w = 0; w < ATTN_WARPS; w++) M = fmaxf(M, wm[w]);
    if (threadIdx.x == 0) {
        float L = 0.f;
        for (int w = 0; w < ATTN_WARPS; w++) if (wm[w] > -INFINITY) L += wl[w] * __expf(wm[w] - M);
        part_m[slot] = M;
        part_l[slot] = L;
    }
    for (int i = threadIdx.x; i < dv; i += blockDim.x) {
        float a = 0.f;
        for (int w = 0; w < ATTN_WARPS; w++) if (wm[w] > -INFINITY) a += wacc[w][i] * __expf(wm[w] - M);
        part_acc[slot * dv + i] = a;
    }
}

// Flash-decoding, second pass: block h merges the n_split shares of head h (and the
// head's sink logit, when `sinks` is not null: a key with that score and no value)
// into o[h] = acc / l.
extern "C" __global__ void tg_attn_combine_f32(
    const float* __restrict__ part_m, const float* __restrict__ part_l, const float* __restrict__ part_acc,
    const float* __restrict__ sinks, int n_split, int dv, float* __restrict__ out) {
    const int h = blockIdx.x;
    const float* pm = part_m + (long)h * n_split;
    const float* pl = part_l + (long)h * n_split;
    float M = sinks ? sinks[h] : -INFINITY;
    for (int s = 0; s < n_split; s++) M = fmaxf(M, pm[s]);
    float L = sinks ? __expf(sinks[h] - M) : 0.f;
    for (int s = 0; s < n_split; s++) if (pm[s] > -INFINITY) L += pl[s] * __expf(pm[s] - M);
    const float inv = L > 0.f ? 1.f / L : 0.f;
    for (int i = threadIdx.x; i < dv; i += blockDim.x) {
        float a = 0.f;
        for (int s = 0; s < n_split; s++)
            if (pm[s] > -INFINITY) a += part_acc[((long)h * n_split + s) * dv + i] * __expf(pm[s] - M);
        out[(long)h * dv + i] = a * inv;
    }
}

// The gated activation of `rows` rows: out[r][i] = act(g[r * rs + i]) * u[r * rs + i]
// for i < n, where act is SiLU (mode 0), GELU's tanh form (mode 1) or gpt-oss's
// clamped SwiGLU (mode 2: g = min(g, limit), g * sigmoid(alpha * g) * (clamp(u,
// -limit, limit) + 1)). One thread per output.
extern "C" __global__ void tg_glu_f32(
    const float* __restrict__ g, const float* __restrict__ u, int rs, int n, int rows,
    int mode, float alpha, float limit, float* __restrict__ out) {
    const long idx = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (long)rows * n) return;
    const long r = idx / n, i = idx % n;
    float x = g[r * rs + i], y = u[r * rs + i];
    float a;
    if (mode == 0) {
        a = x / (1.f + expf(-x));
    } else if (mode == 1) {
        a = 0.5f * x * (1.f + tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x)));
    } else {
        x = fminf(x, limit);
        a = x / (1.f + expf(-alpha * x));
        y = fminf(fmaxf(y, -limit), limit) + 1.f;
    }
    out[idx] = a * y;
}

// The residual sum and the next RMS norm of `rows` rows of width n in one pass:
// x_out = x + o, h = x_out / sqrt(mean(x_out^2) + eps) * w. Block r takes row r.
extern "C" __global__ void tg_add_rms_norm_f32(
    const float* __restrict__ x, const float* __restrict__ o, const float* __restrict__ w,
    float eps, int n, float* __restrict__ x_out, float* __restrict__ h) {
    __shared__ float red[WARP];
    const long base = (long)blockIdx.x * n;
    float ss = 0.f;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        const float y = x[base + i] + o[base + i];
        x_out[base + i] = y;
        ss += y * y;
    }
    const float scale = rsqrtf(block_sum(ss, red) / n + eps);
    for (int i = threadIdx.x; i < n; i += blockDim.x) h[base + i] = x_out[base + i] * scale * w[i];
}
