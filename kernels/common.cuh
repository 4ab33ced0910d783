// What toolgate's CUDA kernels share (included by decode.cu and matvec.cu; not
// compiled on its own: build.rs compiles the *.cu files).
#pragma once

#define WARP 32

// The sum of x over the 32 lanes of a warp; every lane gets it.
__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
    for (int o = WARP / 2; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffff, x, o);
    return x;
}
