#pragma once
// The fused operations around attention in a decode step (cuda/step.h): RMSNorm with its
// residual add, rotate-half RoPE of q and k, a decode cache's append of one position, the
// linear layers at one to four rows.
// Compiled by nvcc through cuda/step.cu (or as host C++ under tests/cuda/simt).

#include "attention/cuda/internal.h"
#include "attention/cuda/kernels/common.cuh"
#include "attention/cuda/step.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace sparqlab::attention::cuda::detail {
namespace {

__device__ __forceinline__ float asFloat(float v) {
    return v;
}
__device__ __forceinline__ float asFloat(__half v) {
    return __half2float(v);
}
__device__ __forceinline__ float asFloat(__nv_bfloat16 v) {
    return __bfloat162float(v);
}
/// float → the storage dtype, rounded to nearest even (as libtorch rounds).
template <typename T> __device__ __forceinline__ T rounded(float v);
template <> __device__ __forceinline__ float rounded<float>(float v) {
    return v;
}
template <> __device__ __forceinline__ __half rounded<__half>(float v) {
    return __float2half_rn(v);
}
template <> __device__ __forceinline__ __nv_bfloat16 rounded<__nv_bfloat16>(float v) {
    return __float2bfloat16_rn(v);
}
/// The value a float takes once stored in T.
template <typename T> __device__ __forceinline__ float roundTo(float v) {
    return asFloat(rounded<T>(v));
}

/// One block a row: the residual add (stored, then read back rounded), the mean of squares over
/// the block, then each element normalised, rounded, times its weight, rounded.
template <typename T> __global__ void __launch_bounds__(kThreads) rmsNormKernel(RmsNormStep p) {
    startAfterPrior();
    SPARQLAB_SHARED(float, warpSums, kWarps);
    const int64_t row = blockIdx.x;
    const T* x = static_cast<const T*>(p.x) + row * p.width;
    const T* r = p.residual ? static_cast<const T*>(p.residual) + row * p.width : nullptr;
    T* s = r ? static_cast<T*>(p.sum) + row * p.width : nullptr;
    T* y = static_cast<T*>(p.y) + row * p.width;
    const T* w = static_cast<const T*>(p.w);
    float squares = 0;
    for (int64_t i = threadIdx.x; i < p.width; i += kThreads) {
        float v = asFloat(x[i]);
        if (r) {
            const T sum = rounded<T>(v + asFloat(r[i]));
            s[i] = sum;
            v = asFloat(sum);
        }
        squares += v * v;
    }
    const float total = blockSum(squares, warpSums);
    // HF: x · torch.rsqrt(variance + eps) in float32: here a correctly rounded 1/√ (libtorch's
    // on the CPU; on a GPU libtorch takes rsqrtf's approximation). With the other order of the
    // sum, y agrees with either to one unit in the last place of the storage dtype.
    const float inv = 1.0f / sqrtf(total / static_cast<float>(p.width) + p.eps);
    for (int64_t i = threadIdx.x; i < p.width; i += kThreads) {
        const float v = r ? asFloat(s[i]) : asFloat(x[i]);
        y[i] = rounded<T>(asFloat(w[i]) * roundTo<T>(v * inv));
    }
}

/// A thread an output element of one of the two tensors.
template <typename T> __global__ void __launch_bounds__(kThreads) ropeKernel(RopeStep p) {
    startAfterPrior();
    const int64_t perHead = p.T * p.D;
    const int64_t nA = p.B * p.a.heads * perHead;
    const int64_t nB = p.b.x ? p.B * p.b.heads * perHead : 0;
    const int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
    if (i >= nA + nB)
        return;
    const bool first = i < nA;
    const RopeTensor& t = first ? p.a : p.b;
    const int64_t j = first ? i : i - nA; // [b, h, pos, e] in out's order
    const int64_t e = j % p.D, pos = (j / p.D) % p.T, h = (j / perHead) % t.heads,
                  b = j / (perHead * t.heads);
    const T* x = static_cast<const T*>(t.x) + b * t.strideB + h * t.strideH + pos * t.strideT;
    T* out = static_cast<T*>(t.out) + j;
    if (e >= p.rot) {
        *out = x[e];
        return;
    }
    const int64_t half = p.rot / 2;
    const float rotated = e < half ? -asFloat(x[e + half]) : asFloat(x[e - half]);
    const float c = asFloat(static_cast<const T*>(p.cos)[pos * p.rot + e]);
    const float sn = asFloat(static_cast<const T*>(p.sin)[pos * p.rot + e]);
    // Each product and the sum rounded on their own, as libtorch's three operations round them
    // (no fused multiply-add, also in float32).
    *out = rounded<T>(
        __fadd_rn(roundTo<T>(__fmul_rn(asFloat(x[e]), c)), roundTo<T>(__fmul_rn(rotated, sn))));
}

/// A thread an element of a row of K and V.
template <typename T> __global__ void __launch_bounds__(kThreads) appendKernel(AppendStep p) {
    startAfterPrior();
    const int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
    if (i >= p.B * p.H * p.D)
        return;
    const int64_t d = i % p.D, bh = i / p.D;
    const T k = static_cast<const T*>(p.k)[i], v = static_cast<const T*>(p.v)[i];
    static_cast<T*>(p.K)[(bh * p.cap + p.pos) * p.D + d] = k;
    static_cast<T*>(p.V)[(bh * p.cap + p.pos) * p.D + d] = v;
    if (p.Kt)
        static_cast<T*>(p.Kt)[(bh * p.D + d) * p.cap + p.pos] = k;
    p.vsum[i] += static_cast<double>(asFloat(v));
}

constexpr int kGemvUnroll = 4; // chunks of 8 weights a lane has in flight (gemvKernel)

/// Asks for a lane's first kGemvUnroll chunks of 8 weights of one row (and of its pair's row)
/// to be brought into L2, not waiting for them (no-op under the emulation).
template <typename T>
__device__ __forceinline__ void prefetchWeights(const T* wA, const T* wB, int64_t K, int lane) {
#ifdef __CUDA_ARCH__
    for (int u = 0; u < kGemvUnroll; ++u) {
        const int64_t c = lane + 32 * u;
        if (8 * c >= K)
            break;
        asm volatile("prefetch.global.L2 [%0];" ::"l"(wA + 8 * c));
        if (wB)
            asm volatile("prefetch.global.L2 [%0];" ::"l"(wB + 8 * c));
    }
#else
    (void)wA, (void)wB, (void)K, (void)lane;
#endif
}

/// A warp an output feature (kWarps of them a block, the outputs' features in turn; with Pair,
/// feature n of outputs 0 and 1 both): each lane takes 8 consecutive inputs at a time,
/// kGemvUnroll chunks in flight, for every x row; the lanes' sums reduced by shuffles.
template <typename T, int R, bool Pair>
__global__ void __launch_bounds__(kThreads) gemvKernel(GemvStep p) {
    const int lane = threadIdx.x & 31;
    int64_t n = static_cast<int64_t>(blockIdx.x) * kWarps + (threadIdx.x >> 5);
    int o = 0;
    if (!Pair)
        while (o + 1 < p.outputs && n >= p.out[o].N)
            n -= p.out[o++].N;
    const bool mine = n < p.out[o].N;
    const T* wA = static_cast<const T*>(p.out[o].w) + n * p.K;
    const T* wB = Pair ? static_cast<const T*>(p.out[1].w) + n * p.K : nullptr;
    // The weights no kernel writes: their first chunks are asked for into L2 while the kernel
    // before this one (which writes x) finishes, then the wait. At one row of x only (batch 1):
    // with four, the pointers kept across the wait cost the paired kernel a block an SM.
    if (R == 1 && mine)
        prefetchWeights(wA, wB, p.K, lane);
    startAfterPrior();
    if (!mine)
        return;
    const T* x = static_cast<const T*>(p.x);
    float acc[R], accB[R];
#pragma unroll
    for (int r = 0; r < R; ++r)
        acc[r] = accB[r] = 0.0f;
    const int64_t chunks = p.K / 8;
    for (int64_t c0 = lane; c0 < chunks; c0 += 32 * kGemvUnroll) {
        Raw<T> ra[kGemvUnroll], rb[kGemvUnroll];
#pragma unroll
        for (int u = 0; u < kGemvUnroll; ++u) {
            const int64_t c = c0 + 32 * u;
            ra[u] = c < chunks ? loadRaw<T>(wA + 8 * c) : zeroRaw<T>();
            if (Pair)
                rb[u] = c < chunks ? loadRaw<T>(wB + 8 * c) : zeroRaw<T>();
        }
#pragma unroll
        for (int u = 0; u < kGemvUnroll; ++u) {
            const int64_t c = c0 + 32 * u;
            if (c >= chunks)
                break;
            float wa[8], wb[8];
            toFloat(ra[u], wa);
            if (Pair)
                toFloat(rb[u], wb);
#pragma unroll
            for (int r = 0; r < R; ++r) {
                float xv[8];
                toFloat(loadRaw<T>(x + r * p.K + 8 * c), xv);
#pragma unroll
                for (int e = 0; e < 8; ++e) {
                    acc[r] += wa[e] * xv[e];
                    if (Pair)
                        accB[r] += wb[e] * xv[e];
                }
            }
        }
    }
#pragma unroll
    for (int r = 0; r < R; ++r)
        for (int off = 16; off > 0; off >>= 1) {
            acc[r] += __shfl_xor_sync(0xffffffffu, acc[r], off);
            if (Pair)
                accB[r] += __shfl_xor_sync(0xffffffffu, accB[r], off);
        }
    if (lane != 0)
        return;
    const GemvOutput& out = p.out[o];
    const float bA = out.bias ? asFloat(static_cast<const T*>(out.bias)[n]) : 0.0f;
    const float bB =
        Pair && p.out[1].bias ? asFloat(static_cast<const T*>(p.out[1].bias)[n]) : 0.0f;
#pragma unroll
    for (int r = 0; r < R; ++r) {
        float v = acc[r] + bA;
        if (Pair) { // HF: act(gate) * up, each operation's result rounded to the dtype
            const float g = roundTo<T>(v), up = roundTo<T>(accB[r] + bB);
            v = roundTo<T>(g / (1.0f + expf(-g))) * up;
        }
        static_cast<T*>(out.y)[r * out.N + n] = rounded<T>(v);
    }
}

} // namespace
} // namespace sparqlab::attention::cuda::detail
