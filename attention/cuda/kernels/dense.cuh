#pragma once
// Dense decode: flash-decoding over the sequence, the splits' partial states merged
// (CUDA.md §2.3).
// Compiled by nvcc through kernels.cuh (or as host C++ under tests/cuda/simt).

#include "attention/cuda/kernels/common.cuh"

namespace sparqlab::attention::cuda::detail {
namespace {

struct DenseParams {
    const void* k;
    const void* v;
    const float* q;
    float* y;
    float* alpha;
    float* part; // [rows, splits, g, D + 2]: o (D), m, l
    int64_t stride, D;
    int S, g, splits, splitLen;
    float scaleLog2;
};

/// Blocks per multiprocessor the dense kernel is compiled for (a register cap): enough rows in
/// flight to keep the memory busy, without spilling the heads' accumulators.
template <typename T, int GT> constexpr int denseMinBlocks() {
    if (sizeof(T) == 4)
        return GT <= 2 ? 2 : 1;
    return GT == 1 ? 4 : GT <= 4 ? 2 : 1;
}

template <typename T, int L, int GT>
__global__ void __launch_bounds__(kThreads, denseMinBlocks<T, GT>()) denseKernel(DenseParams p) {
    startAfterPrior();
    SPARQLAB_DYNAMIC_SHARED(float, smem);
    const int64_t row = blockIdx.y;
    const int split = blockIdx.x;
    const int s0 = split * p.splitLen, s1 = min(p.S, s0 + p.splitLen);
    attendHeads<T, L, GT>(
        p.k, p.v, p.q, p.scaleLog2, row, p.stride, p.D, p.g, 0, p.g,
        [s0](int t) { return static_cast<int64_t>(s0 + t); }, s1 - s0, smem,
        [&](int h, int d, float o, float l, float M) {
            const int64_t hq = row * p.g + h;
            if (p.splits == 1) {
                p.y[hq * p.D + d] = o / l;
                if (d == 0 && p.alpha)
                    p.alpha[hq] = 1.0f;
            } else {
                float* P = p.part + ((row * p.splits + split) * p.g + h) * (p.D + 2);
                P[d] = o;
                if (d == 0) {
                    P[p.D] = M;
                    P[p.D + 1] = l;
                }
            }
        });
}

/// The splits' partial states of one query head merged (rescaled by exp2(m_i − m)).
__global__ void __launch_bounds__(128) denseMergeKernel(DenseParams p) {
    startAfterPrior();
    const int64_t hq = blockIdx.x, row = hq / p.g, h = hq % p.g;
    const int64_t sStride = static_cast<int64_t>(p.g) * (p.D + 2);
    const float* base = p.part + (row * p.splits * p.g + h) * (p.D + 2);
    float M = -INFINITY;
    for (int s = 0; s < p.splits; ++s)
        M = fmaxf(M, base[s * sStride + p.D]);
    for (int64_t d = threadIdx.x; d < p.D; d += blockDim.x)
        p.y[hq * p.D + d] = mergedSplits(base, p.splits, sStride, p.D, d, M);
    if (threadIdx.x == 0 && p.alpha)
        p.alpha[hq] = 1.0f;
}

} // namespace
} // namespace sparqlab::attention::cuda::detail
