// The CUDA decode kernels (cuda/decode_cuda.h; docs/design/CUDA.md), included once per storage
// dtype (kernels_f32.cu, kernels_f16.cu, kernels_bf16.cu): dense flash-decoding,
// step 1 of the selecting methods (low-rank rows, page bounds, exact scores) and step 2 (the
// GQA ranking, the exact top-k / top-p / Quest pages on chip, the gather of the chosen rows of K
// and V with the exact softmax, SparQ's mean-value term). Storage float32, float16 or bfloat16;
// arithmetic float32. The shared arithmetic is cuda/logic.h.

#include "attention/cuda/internal.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>

namespace sparqlab::attention::cuda::detail {
namespace {
// --- stored elements, 8 at a time ------------------------------------------------------------

template <typename T> struct Raw;
template <> struct Raw<float> {
    float4 a, b;
};
template <> struct Raw<__half> {
    uint4 a;
};
template <> struct Raw<__nv_bfloat16> {
    uint4 a;
};

template <typename T> __device__ __forceinline__ Raw<T> loadRaw(const T* p);
template <> __device__ __forceinline__ Raw<float> loadRaw<float>(const float* p) {
    Raw<float> r;
    r.a = __ldg(reinterpret_cast<const float4*>(p));
    r.b = __ldg(reinterpret_cast<const float4*>(p) + 1);
    return r;
}
template <> __device__ __forceinline__ Raw<__half> loadRaw<__half>(const __half* p) {
    Raw<__half> r;
    r.a = __ldg(reinterpret_cast<const uint4*>(p));
    return r;
}
template <>
__device__ __forceinline__ Raw<__nv_bfloat16> loadRaw<__nv_bfloat16>(const __nv_bfloat16* p) {
    Raw<__nv_bfloat16> r;
    r.a = __ldg(reinterpret_cast<const uint4*>(p));
    return r;
}

template <typename T> __device__ __forceinline__ Raw<T> zeroRaw() {
    Raw<T> r;
    memset(&r, 0, sizeof r);
    return r;
}

__device__ __forceinline__ void toFloat(const Raw<float>& r, float (&x)[8]) {
    x[0] = r.a.x;
    x[1] = r.a.y;
    x[2] = r.a.z;
    x[3] = r.a.w;
    x[4] = r.b.x;
    x[5] = r.b.y;
    x[6] = r.b.z;
    x[7] = r.b.w;
}
__device__ __forceinline__ void toFloat(const Raw<__half>& r, float (&x)[8]) {
    const uint32_t w[4] = {r.a.x, r.a.y, r.a.z, r.a.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        __half2 h;
        memcpy(&h, &w[i], sizeof h);
        const float2 f = __half22float2(h);
        x[2 * i] = f.x;
        x[2 * i + 1] = f.y;
    }
}
__device__ __forceinline__ void toFloat(const Raw<__nv_bfloat16>& r, float (&x)[8]) {
    const uint32_t w[4] = {r.a.x, r.a.y, r.a.z, r.a.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        __nv_bfloat162 h;
        memcpy(&h, &w[i], sizeof h);
        const float2 f = __bfloat1622float2(h);
        x[2 * i] = f.x;
        x[2 * i + 1] = f.y;
    }
}

// --- block primitives --------------------------------------------------------------------------

/// Exclusive prefix sum of one value per thread over the block; *total the block's sum. Every
/// thread must call it. `warpSums` holds kWarps entries.
template <typename V> __device__ V blockExclusiveScan(V x, V* warpSums, V* total) {
    const int lw = threadIdx.x & 31, w = threadIdx.x >> 5;
    V incl = x;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const V y = __shfl_up_sync(0xffffffffu, incl, o);
        if (lw >= o)
            incl += y;
    }
    if (lw == 31)
        warpSums[w] = incl;
    __syncthreads();
    V base = 0, tot = 0;
#pragma unroll
    for (int i = 0; i < kWarps; ++i) {
        const V s = warpSums[i];
        if (i < w)
            base += s;
        tot += s;
    }
    __syncthreads();
    *total = tot;
    return base + incl - x;
}

template <typename V> __device__ V blockSum(V x, V* warpSums) {
    V total;
    (void)blockExclusiveScan(x, warpSums, &total);
    return total;
}

/// exp(m_old − m_new) for natural-log softmax states (0 for an empty one).
__device__ __forceinline__ float rescaleNat(float mOld, float mNew) {
    return mOld == -INFINITY ? 0.0f : expf(mOld - mNew);
}

__device__ __forceinline__ void mergeNat(SoftmaxState& a, float m, float l) {
    const float M = fmaxf(a.m, m);
    if (M == -INFINITY)
        return;
    a.l = a.l * rescaleNat(a.m, M) + l * rescaleNat(m, M);
    a.m = M;
}

/// The block's merged natural-log states of `nh` heads: lanes offset `from`, 2·from, … 16 apart
/// merged first (the others of a lane group hold copies), then the warps through `buf`
/// ([kWarps][GT][2]). The result is in buf[0 … 2·GT) for every thread.
template <int GT>
__device__ void blockMergeNat(SoftmaxState (&st)[GT], int from, float* buf) {
#pragma unroll
    for (int off = from; off < 32; off <<= 1)
#pragma unroll
        for (int h = 0; h < GT; ++h) {
            const float m = __shfl_xor_sync(0xffffffffu, st[h].m, off);
            const float l = __shfl_xor_sync(0xffffffffu, st[h].l, off);
            mergeNat(st[h], m, l);
        }
    const int lw = threadIdx.x & 31, w = threadIdx.x >> 5;
    if (lw == 0)
#pragma unroll
        for (int h = 0; h < GT; ++h) {
            buf[(w * GT + h) * 2] = st[h].m;
            buf[(w * GT + h) * 2 + 1] = st[h].l;
        }
    __syncthreads();
    if (threadIdx.x < GT) {
        SoftmaxState s;
        for (int i = 0; i < kWarps; ++i)
            mergeNat(s, buf[(i * GT + threadIdx.x) * 2], buf[(i * GT + threadIdx.x) * 2 + 1]);
        buf[kWarps * GT * 2 + threadIdx.x * 2] = s.m;
        buf[kWarps * GT * 2 + threadIdx.x * 2 + 1] = s.l;
    }
    __syncthreads();
}

// --- attention over a list of rows (dense and the gather of step 2) ---------------------------

template <int GT> struct Acc {
    float m[GT], l[GT], o[GT][8];
    __device__ void reset() {
#pragma unroll
        for (int h = 0; h < GT; ++h) {
            m[h] = -INFINITY;
            l[h] = 0.0f;
#pragma unroll
            for (int e = 0; e < 8; ++e)
                o[h][e] = 0.0f;
        }
    }
};

/// Online softmax of GT heads over the rows rowOf(t), t < n: lane groups of L lanes share a row
/// (8 elements a lane), kUnroll rows in flight per group, K and V asked for together. `qr` holds
/// each head's 8 components of this lane times scale·log2(e) (base-2 logits). K and V point at
/// this lane's first element of the (batch row, KV head)'s storage.
template <typename T, int L, int GT, typename RowOf>
__device__ __forceinline__ void attendRows(const T* K, const T* V, int64_t D, bool active,
                                           int grp, RowOf rowOf, int n, const float (&qr)[GT][8],
                                           Acc<GT>& a) {
    constexpr int NG = kThreads / L;
    const int iters = (n + kUnroll * NG - 1) / (kUnroll * NG);
    for (int it = 0; it < iters; ++it) {
        Raw<T> kr[kUnroll], vr[kUnroll];
        bool ok[kUnroll];
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
            const int t = (it * kUnroll + u) * NG + grp;
            ok[u] = t < n;
            if (ok[u] && active) {
                const int64_t s = rowOf(t);
                kr[u] = loadRaw<T>(K + s * D);
                vr[u] = loadRaw<T>(V + s * D);
            } else {
                kr[u] = zeroRaw<T>();
                vr[u] = zeroRaw<T>();
            }
        }
        float sc[GT][kUnroll];
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
            float x[8];
            toFloat(kr[u], x);
#pragma unroll
            for (int h = 0; h < GT; ++h) {
                float d = 0.0f;
#pragma unroll
                for (int e = 0; e < 8; ++e)
                    d = fmaf(qr[h][e], x[e], d);
                sc[h][u] = d;
            }
        }
#pragma unroll
        for (int o = L / 2; o > 0; o >>= 1)
#pragma unroll
            for (int h = 0; h < GT; ++h)
#pragma unroll
                for (int u = 0; u < kUnroll; ++u)
                    sc[h][u] += __shfl_xor_sync(0xffffffffu, sc[h][u], o);
        // Each head's running maximum moves once per kUnroll rows; then each V row, converted
        // once, is added to every head (so that no more than one converted row is live).
#pragma unroll
        for (int h = 0; h < GT; ++h) {
            float mx = a.m[h];
#pragma unroll
            for (int u = 0; u < kUnroll; ++u)
                if (ok[u])
                    mx = fmaxf(mx, sc[h][u]);
            if (mx == -INFINITY)
                continue; // this group has no row yet (its scores stay unused)
            const float c = rescale(a.m[h], mx);
            a.l[h] *= c;
#pragma unroll
            for (int e = 0; e < 8; ++e)
                a.o[h][e] *= c;
            a.m[h] = mx;
        }
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
            if (!ok[u])
                continue;
            float vx[8];
            toFloat(vr[u], vx);
#pragma unroll
            for (int h = 0; h < GT; ++h) {
                const float w = exp2f(sc[h][u] - a.m[h]);
                a.l[h] += w;
#pragma unroll
                for (int e = 0; e < 8; ++e)
                    a.o[h][e] = fmaf(w, vx[e], a.o[h][e]);
            }
        }
    }
}

/// The lane groups' states merged into one per head: the groups of a warp by shuffles, then the
/// warps through `buf` ([kWarps][D + 2]); emit(h, d, o, l, m) for each of the first nh heads and
/// d < D (o, l unnormalised, base 2).
template <int L, int GT, typename Emit>
__device__ __forceinline__ void mergeBlock(Acc<GT>& a, int nh, int64_t D, bool active,
                                           float* buf, Emit emit) {
#pragma unroll
    for (int off = L; off < 32; off <<= 1)
#pragma unroll
        for (int h = 0; h < GT; ++h) {
            SoftmaxState s{a.m[h], a.l[h]};
            const SoftmaxState t{__shfl_xor_sync(0xffffffffu, a.m[h], off),
                                 __shfl_xor_sync(0xffffffffu, a.l[h], off)};
            float cb;
            const float ca = mergeStates(s, t, &cb);
#pragma unroll
            for (int e = 0; e < 8; ++e) {
                const float ob = __shfl_xor_sync(0xffffffffu, a.o[h][e], off);
                a.o[h][e] = a.o[h][e] * ca + ob * cb;
            }
            a.m[h] = s.m;
            a.l[h] = s.l;
        }
    const int w = threadIdx.x >> 5, lw = threadIdx.x & 31;
    const int64_t rowF = D + 2;
#pragma unroll
    for (int h = 0; h < GT; ++h) {
        if (h >= nh)
            break;
        if (lw < L && active)
#pragma unroll
            for (int e = 0; e < 8; ++e)
                buf[w * rowF + lw * 8 + e] = a.o[h][e];
        if (lw == 0) {
            buf[w * rowF + D] = a.m[h];
            buf[w * rowF + D + 1] = a.l[h];
        }
        __syncthreads();
        for (int d = threadIdx.x; d < D; d += kThreads) {
            float M = -INFINITY;
#pragma unroll
            for (int i = 0; i < kWarps; ++i)
                M = fmaxf(M, buf[i * rowF + D]);
            float o = 0.0f, l = 0.0f;
#pragma unroll
            for (int i = 0; i < kWarps; ++i) {
                const float c = rescale(buf[i * rowF + D], M);
                o += c * buf[i * rowF + d];
                l += c * buf[i * rowF + D + 1];
            }
            emit(h, d, o, l, M);
        }
        __syncthreads();
    }
}

// --- dense ---------------------------------------------------------------------------------------

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
    SPARQLAB_DYNAMIC_SHARED(float, smem);
    const int64_t row = blockIdx.y;
    const int split = blockIdx.x;
    const int s0 = split * p.splitLen, s1 = min(p.S, s0 + p.splitLen);
    const int grp = threadIdx.x / L, lane = threadIdx.x % L;
    const bool active = lane * 8 < p.D;
    const size_t base = static_cast<size_t>(row) * p.stride * p.D + lane * 8;
    const T* K = static_cast<const T*>(p.k) + base;
    const T* V = static_cast<const T*>(p.v) + base;
    for (int h0 = 0; h0 < p.g; h0 += GT) {
        const int nh = min(GT, p.g - h0);
        float qr[GT][8];
#pragma unroll
        for (int h = 0; h < GT; ++h)
#pragma unroll
            for (int e = 0; e < 8; ++e)
                qr[h][e] = active && h < nh
                               ? p.q[(row * p.g + h0 + h) * p.D + lane * 8 + e] * p.scaleLog2
                               : 0.0f;
        Acc<GT> a;
        a.reset();
        attendRows<T, L, GT>(
            K, V, p.D, active, grp, [s0](int t) { return static_cast<int64_t>(s0 + t); }, s1 - s0,
            qr, a);
        mergeBlock<L, GT>(a, nh, p.D, active, smem,
                          [&](int h, int d, float o, float l, float M) {
                              const int64_t hq = row * p.g + h0 + h;
                              if (p.splits == 1) {
                                  p.y[hq * p.D + d] = o / l;
                                  if (d == 0 && p.alpha)
                                      p.alpha[hq] = 1.0f;
                              } else {
                                  float* P =
                                      p.part + ((row * p.splits + split) * p.g + h0 + h) * (p.D + 2);
                                  P[d] = o;
                                  if (d == 0) {
                                      P[p.D] = M;
                                      P[p.D + 1] = l;
                                  }
                              }
                          });
    }
}

/// The splits' partial states of one query head merged (rescaled by exp2(m_i − m)).
__global__ void __launch_bounds__(128) denseMergeKernel(DenseParams p) {
    const int64_t hq = blockIdx.x, row = hq / p.g, h = hq % p.g;
    const int64_t sStride = static_cast<int64_t>(p.g) * (p.D + 2);
    const float* base = p.part + (row * p.splits * p.g + h) * (p.D + 2);
    float M = -INFINITY;
    for (int s = 0; s < p.splits; ++s)
        M = fmaxf(M, base[s * sStride + p.D]);
    for (int64_t d = threadIdx.x; d < p.D; d += blockDim.x) {
        float o = 0.0f, l = 0.0f;
        for (int s = 0; s < p.splits; ++s) {
            const float c = rescale(base[s * sStride + p.D], M);
            o += c * base[s * sStride + d];
            l += c * base[s * sStride + p.D + 1];
        }
        p.y[hq * p.D + d] = o / l;
    }
    if (threadIdx.x == 0 && p.alpha)
        p.alpha[hq] = 1.0f;
}

// --- step 1 ------------------------------------------------------------------------------------

struct ScoreParams {
    const void* rows;   ///< LowRank: dimension-major [B, H, D, stride]
    const void* items;  ///< Exact: K; PageBound: page maxima ([B, H, itemStride, D])
    const void* items2; ///< PageBound: page minima
    int64_t itemStride;
    const float* q;
    const float* basis;
    const int64_t* channels;
    int64_t stride, D;
    int S, g, H, r;
    int rowsKind; ///< Rows
    int bound;    ///< PageBound (else Exact)
    int tau;
    double tauValue;
    int defaultScale;
    float scale;
    float* Z; ///< [B·H, g, Spad] scores
    int64_t Spad;
    int nItems;
    float* stats; ///< [B·H, chunks, g, 2] natural-log softmax state of each chunk
    int chunks, chunkLen;
    int64_t rowBase; ///< the first (batch row × KV head) of this launch
    /// Where step 2 ranks on one head's own scores (one head a group, or the per-head rule): the
    /// key of the best ranked position (< nRank) of each group of 8, [B·H, gUnits, Gpad]
    /// (null: none).
    uint32_t* groupMax;
    int64_t Gpad;
    int nRank, gUnits;
};

__device__ double sparqTau(int mode, double value, double num, double den, int64_t D,
                           int64_t r) {
    switch (mode) {
    case 0: { // Eq. 9
        const double ratio = num > 0 ? num / (den > 0 ? den : 1.0) : 1.0;
        return sqrt(ratio * static_cast<double>(D));
    }
    case 1:
        return sqrt(static_cast<double>(D));
    case 2:
        return sqrt(static_cast<double>(r));
    case 4:
        return value;
    default:
        return 1.0;
    }
}


/// ẑ_h = Σ_i c[h, i]·row_i over 8 positions a thread, the rows of a dimension-major copy of K;
/// writes ẑ and each chunk's softmax state per head.
template <typename T, int GT>
__global__ void __launch_bounds__(kThreads) lowRankKernel(ScoreParams p) {
    SPARQLAB_DYNAMIC_SHARED(float, smem);
    const int64_t row = p.rowBase + blockIdx.y;
    const int chunk = blockIdx.x;
    const int hk = static_cast<int>(row % p.H);
    const int g = p.g, r = p.r;
    const int64_t D = p.D;
    const bool perHead = p.rowsKind == static_cast<int>(Rows::Channels);
    float* coef = smem;                                   // [g][r]
    int* rowIdx = reinterpret_cast<int*>(coef + g * r);   // [r], or [g][r] per head
    float* cs = reinterpret_cast<float*>(rowIdx + (perHead ? g * r : r)); // [D]
    int* flag = reinterpret_cast<int*>(cs + D);           // [D]
    float* factor = reinterpret_cast<float*>(flag + D);   // [g]
    float* red = factor + g;                              // [kWarps·8·2 + 8·2]
    const float* q = p.q + row * g * D;
    const int tid = threadIdx.x;

    if (p.rowsKind == static_cast<int>(Rows::SparqComponents)) {
        // SPARQ.md §3.1: the r largest of Σ_h |q_h| (ties to the lower index), ascending.
        for (int i = tid; i < D; i += kThreads) {
            float s = 0.0f;
            for (int h = 0; h < g; ++h)
                s += fabsf(q[h * D + i]);
            cs[i] = s;
        }
        __syncthreads();
        for (int i = tid; i < D; i += kThreads) {
            const float x = cs[i];
            int rank = 0;
            for (int j = 0; j < D; ++j) {
                const float y = cs[j];
                rank += (y > x) || (y == x && j < i);
            }
            flag[i] = rank < r;
        }
        __syncthreads();
        for (int i = tid; i < D; i += kThreads)
            if (flag[i]) {
                int pos = 0;
                for (int j = 0; j < i; ++j)
                    pos += flag[j];
                rowIdx[pos] = i;
            }
        __syncthreads();
        // τ (Eq. 9) and a non-default scale folded into each head's factor: a warp per head,
        // ‖q̂‖₁ and ‖q‖₁ summed in double.
        const int lw = tid & 31;
        for (int h = tid >> 5; h < g; h += kWarps) {
            double num = 0, den = 0;
            for (int j = lw; j < r; j += 32)
                num += static_cast<double>(fabsf(q[h * D + rowIdx[j]]));
            for (int i = lw; i < D; i += 32)
                den += static_cast<double>(fabsf(q[h * D + i]));
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) {
                num += __shfl_xor_sync(0xffffffffu, num, o);
                den += __shfl_xor_sync(0xffffffffu, den, o);
            }
            if (lw == 0) {
                double f = 1.0 / sparqTau(p.tau, p.tauValue, num, den, D, r);
                if (!p.defaultScale)
                    f *= static_cast<double>(p.scale) * sqrt(static_cast<double>(D));
                factor[h] = static_cast<float>(f);
            }
        }
        __syncthreads();
        for (int x = tid; x < g * r; x += kThreads)
            coef[x] = q[(x / r) * D + rowIdx[x % r]] * factor[x / r];
    } else if (p.rowsKind == static_cast<int>(Rows::Basis)) {
        // METHODS.md §4.2: the first r coordinates of q in the layer's basis, times the scale.
        const float* Bu = p.basis + static_cast<int64_t>(hk) * D * D;
        for (int x = tid; x < g * r; x += kThreads) {
            const int h = x / r, i = x % r;
            float acc = 0.0f;
            for (int d = 0; d < D; ++d)
                acc += q[h * D + d] * Bu[d * D + i];
            coef[x] = acc * p.scale;
        }
        for (int i = tid; i < r; i += kThreads)
            rowIdx[i] = i;
    } else { // METHODS.md §5.2: each head's r channels
        for (int x = tid; x < g * r; x += kThreads) {
            const int h = x / r, i = x % r;
            const int ch = static_cast<int>(p.channels[(static_cast<int64_t>(hk) * g + h) * r + i]);
            rowIdx[x] = ch;
            coef[x] = q[h * D + ch] * p.scale;
        }
    }
    __syncthreads();

    const T* base = static_cast<const T*>(p.rows) + row * D * p.stride;
    const int c0 = chunk * p.chunkLen, c1 = min(p.S, c0 + p.chunkLen);
    for (int h0 = 0; h0 < g; h0 += GT) {
        const int nh = min(GT, g - h0);
        SoftmaxState st[GT];
        for (int s = c0 + tid * 8; s < c1; s += kThreads * 8) {
            float z[GT][8];
#pragma unroll
            for (int h = 0; h < GT; ++h)
#pragma unroll
                for (int e = 0; e < 8; ++e)
                    z[h][e] = 0.0f;
            if (!perHead) {
                for (int j0 = 0; j0 < r; j0 += 8) {
                    Raw<T> raw[8];
#pragma unroll
                    for (int jj = 0; jj < 8; ++jj)
                        raw[jj] = j0 + jj < r
                                      ? loadRaw<T>(base + static_cast<int64_t>(rowIdx[j0 + jj]) *
                                                              p.stride +
                                                   s)
                                      : zeroRaw<T>();
#pragma unroll
                    for (int jj = 0; jj < 8; ++jj) {
                        if (j0 + jj >= r)
                            break;
                        float x[8];
                        toFloat(raw[jj], x);
#pragma unroll
                        for (int h = 0; h < GT; ++h) {
                            const float c = h < nh ? coef[(h0 + h) * r + j0 + jj] : 0.0f;
#pragma unroll
                            for (int e = 0; e < 8; ++e)
                                z[h][e] = fmaf(c, x[e], z[h][e]);
                        }
                    }
                }
            } else {
#pragma unroll
                for (int h = 0; h < GT; ++h) {
                    if (h >= nh)
                        break;
                    const int* ri = rowIdx + (h0 + h) * r;
                    const float* ci = coef + (h0 + h) * r;
                    for (int j0 = 0; j0 < r; j0 += 8) {
                        Raw<T> raw[8];
#pragma unroll
                        for (int jj = 0; jj < 8; ++jj)
                            raw[jj] = j0 + jj < r
                                          ? loadRaw<T>(base +
                                                       static_cast<int64_t>(ri[j0 + jj]) * p.stride +
                                                       s)
                                          : zeroRaw<T>();
#pragma unroll
                        for (int jj = 0; jj < 8; ++jj) {
                            if (j0 + jj >= r)
                                break;
                            float x[8];
                            toFloat(raw[jj], x);
                            const float c = ci[j0 + jj];
#pragma unroll
                            for (int e = 0; e < 8; ++e)
                                z[h][e] = fmaf(c, x[e], z[h][e]);
                        }
                    }
                }
            }
#pragma unroll
            for (int h = 0; h < GT; ++h) {
                if (h >= nh)
                    break;
                float v[8];
                float mx = -INFINITY;
#pragma unroll
                for (int e = 0; e < 8; ++e) {
                    v[e] = s + e < c1 ? z[h][e] : -INFINITY;
                    mx = fmaxf(mx, v[e]);
                }
                float4* zo = reinterpret_cast<float4*>(p.Z + (row * g + h0 + h) * p.Spad + s);
                zo[0] = make_float4(v[0], v[1], v[2], v[3]);
                zo[1] = make_float4(v[4], v[5], v[6], v[7]);
                if (p.groupMax && (p.gUnits > 1 || h0 + h == 0)) {
                    uint32_t gm = 0;
#pragma unroll
                    for (int e = 0; e < 8; ++e)
                        gm = s + e < p.nRank ? max(gm, orderedKey(v[e])) : gm;
                    p.groupMax[(row * p.gUnits + (p.gUnits > 1 ? h0 + h : 0)) * p.Gpad + s / 8] =
                        gm;
                }
                if (mx > -INFINITY) {
                    float sum = 0.0f;
#pragma unroll
                    for (int e = 0; e < 8; ++e)
                        sum += expf(v[e] - mx);
                    mergeNat(st[h], mx, sum);
                }
            }
        }
        blockMergeNat<GT>(st, 1, red);
        if (tid < nh) {
            float* out = p.stats + ((row * p.chunks + chunk) * g + h0 + tid) * 2;
            out[0] = red[kWarps * GT * 2 + tid * 2];
            out[1] = red[kWarps * GT * 2 + tid * 2 + 1];
        }
        __syncthreads();
    }
}

/// Scores of rows of D elements, a lane group per row: q·K_j·scale (Exact) or Quest's bound
/// scale·(max(q, 0)·M_π + min(q, 0)·m_π) (PageBound); with each chunk's softmax state.
template <typename T, int L, int GT>
__global__ void __launch_bounds__(kThreads) rowScoreKernel(ScoreParams p) {
    __shared__ float red[kWarps * GT * 2 + GT * 2];
    constexpr int NG = kThreads / L;
    const int64_t row = p.rowBase + blockIdx.y;
    const int chunk = blockIdx.x;
    const int grp = threadIdx.x / L, lane = threadIdx.x % L;
    const bool active = lane * 8 < p.D;
    const int64_t D = p.D;
    const size_t base = static_cast<size_t>(row) * p.itemStride * D + lane * 8;
    const T* A = static_cast<const T*>(p.items) + base;
    const T* Bm = p.bound ? static_cast<const T*>(p.items2) + base : nullptr;
    const int c0 = chunk * p.chunkLen, c1 = min(p.nItems, c0 + p.chunkLen), n = c1 - c0;
    const int iters = (n + NG * kUnroll - 1) / (NG * kUnroll);
    for (int h0 = 0; h0 < p.g; h0 += GT) {
        const int nh = min(GT, p.g - h0);
        float qa[GT][8], qb[GT][8];
#pragma unroll
        for (int h = 0; h < GT; ++h)
#pragma unroll
            for (int e = 0; e < 8; ++e) {
                const float x = active && h < nh ? p.q[(row * p.g + h0 + h) * D + lane * 8 + e] : 0;
                qa[h][e] = p.bound ? fmaxf(x, 0.0f) : x;
                qb[h][e] = p.bound ? fminf(x, 0.0f) : 0.0f;
            }
        SoftmaxState st[GT];
        for (int it = 0; it < iters; ++it) {
            Raw<T> ra[kUnroll], rb[kUnroll];
            bool ok[kUnroll];
#pragma unroll
            for (int u = 0; u < kUnroll; ++u) {
                const int t = (it * kUnroll + u) * NG + grp;
                ok[u] = t < n;
                const int64_t i = c0 + t;
                ra[u] = ok[u] && active ? loadRaw<T>(A + i * D) : zeroRaw<T>();
                rb[u] = ok[u] && active && Bm ? loadRaw<T>(Bm + i * D) : zeroRaw<T>();
            }
            float sc[GT][kUnroll];
#pragma unroll
            for (int u = 0; u < kUnroll; ++u) {
                float xa[8], xb[8];
                toFloat(ra[u], xa);
                toFloat(rb[u], xb);
#pragma unroll
                for (int h = 0; h < GT; ++h) {
                    float d = 0.0f;
#pragma unroll
                    for (int e = 0; e < 8; ++e)
                        d = fmaf(qb[h][e], xb[e], fmaf(qa[h][e], xa[e], d));
                    sc[h][u] = d;
                }
            }
#pragma unroll
            for (int o = L / 2; o > 0; o >>= 1)
#pragma unroll
                for (int h = 0; h < GT; ++h)
#pragma unroll
                    for (int u = 0; u < kUnroll; ++u)
                        sc[h][u] += __shfl_xor_sync(0xffffffffu, sc[h][u], o);
#pragma unroll
            for (int u = 0; u < kUnroll; ++u) {
                if (!ok[u])
                    continue;
                const int64_t i = c0 + (it * kUnroll + u) * NG + grp;
#pragma unroll
                for (int h = 0; h < GT; ++h) {
                    if (h >= nh)
                        break;
                    const float z = sc[h][u] * p.scale;
                    if (lane == 0)
                        p.Z[(row * p.g + h0 + h) * p.Spad + i] = z;
                    mergeNat(st[h], z, 1.0f);
                }
            }
        }
        blockMergeNat<GT>(st, L, red);
        if (static_cast<int>(threadIdx.x) < nh) {
            float* out = p.stats + ((row * p.chunks + chunk) * p.g + h0 + threadIdx.x) * 2;
            out[0] = red[kWarps * GT * 2 + threadIdx.x * 2];
            out[1] = red[kWarps * GT * 2 + threadIdx.x * 2 + 1];
        }
        __syncthreads();
    }
}

// --- step 2 ------------------------------------------------------------------------------------

struct SelectParams {
    const void* k;
    const void* v;
    const double* vsum;
    int64_t stride, D;
    int S, g;
    const float* q;
    float scaleLog2;
    float* y;
    float* alpha;
    const float* Z;
    int64_t Spad;
    const float* stats;
    int chunks;
    float* rankBuf; ///< [B·H, Spad] (SumLogits, SumProbs with g > 1)
    int gqa, units, select;
    int nRank, want, lEff, kEff;
    double p;
    int pageSize, f0, pages;
    int meanValue;
    int32_t* selOut;
    int32_t* selCount;
    int64_t selStride;
    int64_t rowBase; ///< the first (batch row × KV head) of this launch
    const uint32_t* groupMax; ///< step 1's group maxima (ScoreParams::groupMax), or null
    int64_t Gpad;
    int rankReady; ///< rankKernel wrote rankBuf and groupMax (a rule combining the group's heads)
};

/// The natural-log softmax state (m, 1/Z) of each of the group's heads over every item of `row`,
/// the chunks' states of step 1 merged in chunk order, into m[0, g) and invZ[0, g).
__device__ void headStates(const SelectParams& p, int64_t row, float* m, float* invZ) {
    for (int h = threadIdx.x; h < p.g; h += kThreads) {
        SoftmaxState s;
        for (int c = 0; c < p.chunks; ++c) {
            const float* st = p.stats + ((row * p.chunks + c) * p.g + h) * 2;
            mergeNat(s, st[0], st[1]);
        }
        m[h] = s.m;
        invZ[h] = 1.0f / s.l;
    }
}

/// The group's ranking score of a position from its heads' scores z (SPARQ.md §2.6): the sum of
/// the logits, or of the probabilities under each head's softmax (m, 1/Z).
__device__ __forceinline__ float combinedScore(const float* Zrow, int64_t Spad, int g, int64_t i,
                                               bool probs, const float* m, const float* invZ) {
    float s = 0.0f;
    for (int h = 0; h < g; ++h) {
        const float z = Zrow[h * Spad + i];
        s += probs ? expf(z - m[h]) * invZ[h] : z;
    }
    return s;
}

/// Where the GQA rule combines the group's heads (sum of logits or of probabilities): each
/// position's combined score into rankBuf and the best key of each group of 8 ranked positions
/// into groupMax, a thread a group, over every block of rows × groups — the pass step 2 would
/// otherwise make alone with one block a row; step 2 then reads only the groups whose maximum
/// reaches its threshold, as with one head a group.
__global__ void __launch_bounds__(kThreads) rankKernel(SelectParams p, uint32_t* groupMax) {
    __shared__ float headM[kMaxHeadsPerGroup];
    __shared__ float headInvZ[kMaxHeadsPerGroup];
    const int64_t row = p.rowBase + blockIdx.y;
    headStates(p, row, headM, headInvZ);
    __syncthreads();
    const int64_t grp = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
    if (grp >= p.Gpad)
        return;
    const float* Zrow = p.Z + row * p.g * p.Spad;
    const bool probs = p.gqa == static_cast<int>(Gqa::SumProbs);
    float x[8];
    uint32_t gm = 0;
#pragma unroll
    for (int e = 0; e < 8; ++e) {
        const int64_t i = grp * 8 + e;
        x[e] = combinedScore(Zrow, p.Spad, p.g, i, probs, headM, headInvZ);
        gm = i < p.nRank ? max(gm, orderedKey(x[e])) : gm;
    }
    float4* out = reinterpret_cast<float4*>(p.rankBuf + row * p.Spad + grp * 8);
    out[0] = make_float4(x[0], x[1], x[2], x[3]);
    out[1] = make_float4(x[4], x[5], x[6], x[7]);
    groupMax[row * p.Gpad + grp] = gm;
}


/// Sorts a[0, n) descending (n a power of two; every thread calls it).
__device__ void bitonicSortDesc(uint64_t* a, int n) {
    for (int size = 2; size <= n; size <<= 1)
        for (int stride = size >> 1; stride > 0; stride >>= 1) {
            for (int i = threadIdx.x; i < n / 2; i += kThreads) {
                const int lo = 2 * i - (i & (stride - 1)), hi = lo + stride;
                const bool desc = (lo & size) == 0;
                const uint64_t x = a[lo], y = a[hi];
                if ((x < y) == desc) {
                    a[lo] = y;
                    a[hi] = x;
                }
            }
            __syncthreads();
        }
}

/// The want-th largest of n keys (1 ≤ want ≤ n) by four 8-bit radix passes, and how many keys
/// equal to it belong to the best `want` (the lowest indices first). keyAt(i) for i < n.
template <typename KeyAt>
__device__ void radixKth(KeyAt keyAt, int n, uint32_t want, uint32_t* hist, uint32_t* warpSums,
                         uint32_t* shared2, uint32_t* kthOut, uint32_t* remainingOut) {
    uint32_t prefix = 0, mask = 0, remaining = want;
    const int lw = threadIdx.x & 31;
    for (int shift = 24; shift >= 0; shift -= 8) {
        hist[threadIdx.x] = 0;
        __syncthreads();
        for (int i0 = 0; i0 < n; i0 += kThreads) {
            const int i = i0 + threadIdx.x;
            uint32_t digit = 256;
            if (i < n) {
                const uint32_t key = keyAt(i);
                if ((key & mask) == prefix)
                    digit = (key >> shift) & 0xFFu;
            }
            const unsigned peers = __match_any_sync(0xffffffffu, digit);
            if (digit < 256 && lw == __ffs(peers) - 1)
                atomicAdd(&hist[digit], static_cast<uint32_t>(__popc(peers)));
        }
        __syncthreads();
        const uint32_t c = hist[255 - threadIdx.x];
        uint32_t total;
        const uint32_t above = blockExclusiveScan(c, warpSums, &total);
        if (digitHolds(above + c, c, remaining)) {
            shared2[0] = 255 - threadIdx.x;
            shared2[1] = remaining - above;
        }
        __syncthreads();
        prefix |= shared2[0] << shift;
        mask |= 0xFFu << shift;
        remaining = shared2[1];
        __syncthreads();
    }
    *kthOut = prefix;
    *remainingOut = remaining;
}

template <typename T, int L, int GT>
__global__ void __launch_bounds__(kThreads, sizeof(T) == 4 ? (GT == 1 ? 2 : 1) : (GT == 1 ? 3 : 2))
    selectKernel(SelectParams p) {
    SPARQLAB_DYNAMIC_SHARED(unsigned char, smemRaw);
    uint64_t* cand = reinterpret_cast<uint64_t*>(smemRaw);
    int32_t* sel = reinterpret_cast<int32_t*>(smemRaw);
    uint32_t* keysW = reinterpret_cast<uint32_t*>(smemRaw + kCandMax * 8);
    float* mergeBuf = reinterpret_cast<float*>(keysW + kMaxW);
    uint32_t* hist = reinterpret_cast<uint32_t*>(mergeBuf + kWarps * (256 + 2));
    float* headM = reinterpret_cast<float*>(hist + 256);
    float* headInvZ = headM + kMaxHeadsPerGroup;
    float* headAlpha = headInvZ + kMaxHeadsPerGroup;
    __shared__ uint32_t warpSums[kWarps];
    __shared__ double warpSumsD[kWarps];
    __shared__ float warpSumsF[kWarps];
    __shared__ uint32_t sh[8];
    __shared__ int shInt[4];

    const int tid = threadIdx.x;
    const int64_t row = p.rowBase + blockIdx.x / p.units;
    const int unit = blockIdx.x % p.units;
    const int g = p.g;
    const int hA = p.units > 1 ? unit : 0, nhU = p.units > 1 ? 1 : g;
    const int64_t D = p.D;

    // The heads' softmax normalisers over every item (the chunks' states merged).
    headStates(p, row, headM, headInvZ);
    __syncthreads();

    // The ranking score (SPARQ.md §2.6): one head's own scores, or the group's sum of logits or
    // of probabilities (written once to rankBuf).
    const float* Zrow = p.Z + row * g * p.Spad;
    const float* rank = Zrow + static_cast<int64_t>(hA) * p.Spad;
    const bool combined = g > 1 && p.units == 1 && p.gqa != static_cast<int>(Gqa::PerHead);
    if (combined) {
        float* R = p.rankBuf + row * p.Spad;
        if (!p.rankReady) {
            const bool probs = p.gqa == static_cast<int>(Gqa::SumProbs);
            for (int i = tid; i < p.nRank; i += kThreads)
                R[i] = combinedScore(Zrow, p.Spad, g, i, probs, headM, headInvZ);
            __syncthreads();
        }
        rank = R;
    }
    auto keyAt = [rank](int i) { return orderedKey(rank[i]); };

    // Step 2: the best `want` of the nRank ranked items (SPARQ.md §2.3), read four at a time.
    const int nRank = p.nRank, want = p.want;
    const int n4 = (nRank + 3) / 4;
    const bool topP = p.select == static_cast<int>(Select::TopP);
    // The keys of items 4c … 4c + 3 (0 and invalid past nRank; rank rows are padded to 8), read
    // kIlp chunks a thread at a time so that that many loads are in flight.
    constexpr int kIlp = 8;
    auto load4 = [rank, n4](int c) {
        return c < n4 ? *reinterpret_cast<const float4*>(rank + 4 * static_cast<int64_t>(c))
                      : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    };
    auto keys4 = [nRank](const float4& v, int c, uint32_t (&k)[4], bool (&ok)[4]) {
        const float x[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            ok[e] = 4 * c + e < nRank;
            k[e] = ok[e] ? orderedKey(x[e]) : 0u;
        }
    };
    // Every ranked item with a key ≥ thr into cand (unordered, at most kCandMax kept); how many.
    auto collect = [&](uint32_t thr) -> uint32_t {
        if (tid == 0)
            sh[2] = 0;
        __syncthreads();
        const int lw = tid & 31;
        for (int c0 = 0; c0 < n4; c0 += kIlp * kThreads) {
            float4 v[kIlp];
#pragma unroll
            for (int u = 0; u < kIlp; ++u)
                v[u] = load4(c0 + u * kThreads + tid);
            uint32_t k[kIlp][4];
            bool ok[kIlp][4];
            uint32_t cnt = 0;
#pragma unroll
            for (int u = 0; u < kIlp; ++u) {
                keys4(v[u], c0 + u * kThreads + tid, k[u], ok[u]);
#pragma unroll
                for (int e = 0; e < 4; ++e)
                    cnt += ok[u][e] && k[u][e] >= thr;
            }
            uint32_t incl = cnt;
#pragma unroll
            for (int o = 1; o < 32; o <<= 1) {
                const uint32_t y = __shfl_up_sync(0xffffffffu, incl, o);
                if (lw >= o)
                    incl += y;
            }
            uint32_t at = 0;
            if (lw == 31 && incl > 0)
                at = atomicAdd(&sh[2], incl);
            uint32_t slot = __shfl_sync(0xffffffffu, at, 31) + incl - cnt;
#pragma unroll
            for (int u = 0; u < kIlp; ++u)
#pragma unroll
                for (int e = 0; e < 4; ++e)
                    if (ok[u][e] && k[u][e] >= thr) {
                        if (slot < static_cast<uint32_t>(kCandMax))
                            cand[slot] = rankedItem(
                                k[u][e], static_cast<uint32_t>(4 * (c0 + u * kThreads + tid) + e));
                        ++slot;
                    }
        }
        __syncthreads();
        const uint32_t nc = sh[2];
        __syncthreads();
        return nc;
    };
    auto sortCandidates = [&](int nc) { // cand[0, nc) best first
        int n2 = 1;
        while (n2 < nc)
            n2 <<= 1;
        for (int i = nc + tid; i < n2; i += kThreads)
            cand[i] = 0;
        __syncthreads();
        bitonicSortDesc(cand, n2);
    };
    bool sorted = false; // the chosen are cand[0, want), best first
    bool listed = false; // the chosen are sel[0, want), in any order
    if (want >= nRank) {
        if (topP) {
            for (int i = tid; i < nRank; i += kThreads)
                cand[i] = rankedItem(keyAt(i), static_cast<uint32_t>(i));
            __syncthreads();
            sortCandidates(nRank);
            sorted = true;
        } else {
            for (int i = tid; i < nRank; i += kThreads)
                sel[i] = i;
            listed = true;
        }
    } else if (want > 0) {
        // Candidates: every item of a short row; on a long one those ≥ T, the want-th largest
        // of the maxima of 2·want disjoint groups (the chunks of four items c ≡ j mod 2·want):
        // each such maximum is a distinct item ≥ T, so at least `want` items qualify (the CPU
        // kernels' threshold, topBySelection; here from n ≥ 1024 and n ≥ 8·want).
        uint32_t thr = 0;
        bool filtered = false;
        uint32_t nc = kCandMax + 1u;
        bool collected = false; // the candidates are in cand (nc of them)
        const int G = (nRank + 7) / 8;
        if (p.groupMax && want <= G && G <= 2 * kCandMax) {
            // Step 1 wrote the best key of each group of 8 ranked positions: T, the want-th
            // largest of those maxima, leaves at least `want` positions ≥ T, all in the groups
            // whose maximum is ≥ T — only those groups' scores are read.
            uint32_t* gm = reinterpret_cast<uint32_t*>(cand); // [G] (cand is not in use yet)
            const uint32_t* gsrc = p.groupMax + (row * p.units + unit) * p.Gpad;
            for (int j = tid; j < G; j += kThreads)
                gm[j] = gsrc[j];
            __syncthreads();
            uint32_t rem;
            radixKth([gm](int j) { return gm[j]; }, G, static_cast<uint32_t>(want), hist, warpSums,
                     sh, &thr, &rem);
            // The groups at or above T, into keysW (at most kMaxW of them).
            if (tid == 0)
                sh[3] = 0;
            __syncthreads();
            const int lw = tid & 31;
            for (int j0 = 0; j0 < G; j0 += kThreads) {
                const int j = j0 + tid;
                const bool in = j < G && gm[j] >= thr;
                const unsigned b = __ballot_sync(0xffffffffu, in);
                uint32_t at = 0;
                if (lw == 0 && b)
                    at = atomicAdd(&sh[3], static_cast<uint32_t>(__popc(b)));
                at = __shfl_sync(0xffffffffu, at, 0) + __popc(b & ((1u << lw) - 1u));
                if (in && at < static_cast<uint32_t>(kMaxW))
                    keysW[at] = static_cast<uint32_t>(j);
            }
            __syncthreads();
            const uint32_t ng = sh[3];
            if (ng <= static_cast<uint32_t>(kMaxW)) {
                // Their positions ≥ T into cand (gm is done with).
                if (tid == 0)
                    sh[2] = 0;
                __syncthreads();
                for (int j0 = 0; j0 < static_cast<int>(ng); j0 += kThreads) {
                    const int j = j0 + tid;
                    uint32_t k[8];
                    bool ok[8];
                    uint32_t cnt = 0;
                    if (j < static_cast<int>(ng)) {
                        const int base = 8 * static_cast<int>(keysW[j]);
                        const float4 a = *reinterpret_cast<const float4*>(rank + base);
                        const float4 b4 = *reinterpret_cast<const float4*>(rank + base + 4);
                        const float x[8] = {a.x, a.y, a.z, a.w, b4.x, b4.y, b4.z, b4.w};
#pragma unroll
                        for (int e = 0; e < 8; ++e) {
                            k[e] = orderedKey(x[e]);
                            ok[e] = base + e < nRank && k[e] >= thr;
                            cnt += ok[e];
                        }
                    } else {
#pragma unroll
                        for (int e = 0; e < 8; ++e) {
                            k[e] = 0;
                            ok[e] = false;
                        }
                    }
                    uint32_t incl = cnt;
#pragma unroll
                    for (int o = 1; o < 32; o <<= 1) {
                        const uint32_t y = __shfl_up_sync(0xffffffffu, incl, o);
                        if (lw >= o)
                            incl += y;
                    }
                    uint32_t at = 0;
                    if (lw == 31 && incl > 0)
                        at = atomicAdd(&sh[2], incl);
                    uint32_t slot = __shfl_sync(0xffffffffu, at, 31) + incl - cnt;
                    if (j < static_cast<int>(ng)) {
                        const int base = 8 * static_cast<int>(keysW[j]);
#pragma unroll
                        for (int e = 0; e < 8; ++e)
                            if (ok[e]) {
                                if (slot < static_cast<uint32_t>(kCandMax))
                                    cand[slot] =
                                        rankedItem(k[e], static_cast<uint32_t>(base + e));
                                ++slot;
                            }
                    }
                }
                __syncthreads();
                nc = sh[2];
                __syncthreads();
                filtered = collected = true;
            }
            __syncthreads();
        }
        if (!filtered && 2 * want <= kMaxW && nRank >= 8 * want && nRank >= 1024) {
            const int W = 2 * want;
            for (int j = tid; j < W; j += kThreads)
                keysW[j] = 0;
            __syncthreads();
            for (int c0 = 0; c0 < n4; c0 += kIlp * kThreads) {
                float4 v[kIlp];
#pragma unroll
                for (int u = 0; u < kIlp; ++u)
                    v[u] = load4(c0 + u * kThreads + tid);
#pragma unroll
                for (int u = 0; u < kIlp; ++u) {
                    const int c = c0 + u * kThreads + tid;
                    if (c < n4) {
                        uint32_t k[4];
                        bool ok[4];
                        keys4(v[u], c, k, ok);
                        uint32_t m = 0;
#pragma unroll
                        for (int e = 0; e < 4; ++e)
                            m = ok[e] ? max(m, k[e]) : m;
                        atomicMax(&keysW[c % W], m);
                    }
                }
            }
            __syncthreads();
            uint32_t rem;
            radixKth([keysW](int j) { return keysW[j]; }, W, static_cast<uint32_t>(want), hist,
                     warpSums, sh, &thr, &rem);
            filtered = true;
        }
        if (collected && nc < static_cast<uint32_t>(want)) {
            // (Only when the group maxima do not match the scores — step 2 timed alone over a
            // stale workspace: never pick from fewer than `want` candidates.)
            collected = filtered = false;
            thr = 0;
        }
        if (!collected && (filtered || nRank <= kCandMax))
            nc = collect(thr);
        if (nc <= static_cast<uint32_t>(kCandMax)) {
            if (!topP) {
                // The want-th largest candidate; when the candidates equal to it are exactly the
                // ties to take (no tie to break by index), the chosen are those ≥ it, unsorted.
                uint32_t kth, rem;
                radixKth([cand](int i) { return itemKey(cand[i]); }, static_cast<int>(nc),
                         static_cast<uint32_t>(want), hist, warpSums, sh, &kth, &rem);
                constexpr int kPer = kCandMax / kThreads;
                int idx[kPer];
                bool take[kPer];
                uint32_t eq = 0, cnt = 0;
#pragma unroll
                for (int j = 0; j < kPer; ++j) {
                    const int i = tid + j * kThreads;
                    const uint64_t it = i < static_cast<int>(nc) ? cand[i] : 0;
                    const uint32_t key = itemKey(it);
                    take[j] = i < static_cast<int>(nc) && key >= kth;
                    eq += i < static_cast<int>(nc) && key == kth;
                    idx[j] = static_cast<int>(itemIndex(it));
                    cnt += take[j];
                }
                const uint32_t eqTotal = blockSum<uint32_t>(eq, warpSums);
                if (eqTotal == rem) {
                    uint32_t total;
                    uint32_t pos = blockExclusiveScan<uint32_t>(cnt, warpSums, &total);
#pragma unroll
                    for (int j = 0; j < kPer; ++j)
                        if (take[j])
                            sel[pos++] = idx[j];
                    listed = true;
                }
                __syncthreads();
            }
            if (!listed) {
                sortCandidates(static_cast<int>(nc));
                sorted = true;
            }
        }
        if (!sorted && !listed) { // exact radix select over the whole row, in index order
            uint32_t kth, remaining;
            radixKth(keyAt, nRank, static_cast<uint32_t>(want), hist, warpSums, sh, &kth,
                     &remaining);
            uint32_t eqBase = 0, outBase = 0;
            for (int i0 = 0; i0 < nRank && outBase < static_cast<uint32_t>(want);
                 i0 += kThreads) {
                const int i = i0 + tid;
                const uint32_t key = i < nRank ? keyAt(i) : 0u;
                const bool gt = i < nRank && key > kth, eq = i < nRank && key == kth;
                uint32_t eqTotal, takeTotal;
                const uint32_t eqRank =
                    eqBase + blockExclusiveScan<uint32_t>(eq, warpSums, &eqTotal);
                const bool take = gt || (eq && eqRank < remaining);
                const uint32_t pos =
                    outBase + blockExclusiveScan<uint32_t>(take, warpSums, &takeTotal);
                if (take) {
                    if (topP)
                        cand[pos] = rankedItem(key, static_cast<uint32_t>(i));
                    else
                        sel[pos] = i;
                }
                eqBase += eqTotal;
                outBase += takeTotal;
            }
            __syncthreads();
            if (topP) { // the budget needs them best first
                sortCandidates(want);
                sorted = true;
            } else {
                listed = true;
            }
        }
    }
    __syncthreads();

    // The top-p budget (METHODS.md §6.1): the unit's mass of the local window first, then of
    // the chosen best first, until it reaches p; at least max(1, l), at most k.
    int nSel = want;
    const float wUnit = 1.0f / static_cast<float>(nhU);
    auto massOf = [&](int j) {
        float m = 0.0f;
        for (int h = hA; h < hA + nhU; ++h)
            m += expf(Zrow[h * p.Spad + j] - headM[h]) * headInvZ[h];
        return m * wUnit;
    };
    if (topP && p.p < 1.0) {
        double local = 0;
        for (int j = nRank + tid; j < p.S; j += kThreads)
            local += static_cast<double>(massOf(j));
        const double cum0 = blockSum<double>(local, warpSumsD);
        if (tid == 0)
            shInt[0] = 0x7fffffff; // the first rank reaching p (none yet)
        __syncthreads();
        const int per = (want + kThreads - 1) / kThreads;
        const int a0 = min(want, tid * per), a1 = min(want, a0 + per);
        double mine = 0;
        for (int t = a0; t < a1; ++t)
            mine += static_cast<double>(massOf(static_cast<int>(itemIndex(cand[t]))));
        double total;
        double run = cum0 + blockExclusiveScan<double>(mine, warpSumsD, &total);
        for (int t = a0; t < a1; ++t) {
            run += static_cast<double>(massOf(static_cast<int>(itemIndex(cand[t]))));
            if (run >= p.p) {
                atomicMin(&shInt[0], t);
                break;
            }
        }
        __syncthreads();
        const int first = shInt[0];
        const int64_t np = p.lEff > 0 && cum0 >= p.p ? p.lEff
                           : first != 0x7fffffff     ? p.lEff + first + 1
                                                     : -1;
        const int64_t count = topPCount(np, p.lEff, p.kEff);
        nSel = static_cast<int>(count - p.lEff);
        __syncthreads();
    }

    // The chosen as int32 positions (or pages) in sel[0, nSel).
    if (sorted) {
        int tmp[kCandMax / kThreads];
#pragma unroll
        for (int j = 0; j < kCandMax / kThreads; ++j) {
            const int t = tid + j * kThreads;
            tmp[j] = t < nSel ? static_cast<int>(itemIndex(cand[t])) : 0;
        }
        __syncthreads();
#pragma unroll
        for (int j = 0; j < kCandMax / kThreads; ++j) {
            const int t = tid + j * kThreads;
            if (t < nSel)
                sel[t] = tmp[j];
        }
        __syncthreads();
    }
    const bool pages = p.select == static_cast<int>(Select::Pages);
    int n; // rows attended
    if (pages) {
        const int forced = p.pages - p.f0;
        for (int i = tid; i < forced; i += kThreads)
            sel[nSel + i] = p.f0 + i;
        __syncthreads();
        const int chosen = nSel + forced;
        n = (chosen - 1) * p.pageSize + (p.S - (p.pages - 1) * p.pageSize);
    } else {
        n = nSel + p.lEff;
    }
    const int P = p.pageSize, nS = nSel, nR = nRank;
    auto rowOf = [=](int t) -> int64_t {
        if (pages)
            return static_cast<int64_t>(sel[t / P]) * P + t % P;
        return t < nS ? sel[t] : nR + (t - nS);
    };

    if (p.selOut) {
        int32_t* out = p.selOut + (row * p.units + unit) * p.selStride;
        for (int t = tid; t < p.selStride; t += kThreads)
            out[t] = t < n ? static_cast<int32_t>(rowOf(t)) : -1;
        if (tid == 0)
            p.selCount[row * p.units + unit] = n;
    }

    // α (Eq. 10): each head's approximate mass on what is attended.
    for (int h = hA; h < hA + nhU; ++h) {
        float a = 1.0f;
        if (p.meanValue) {
            const float* zh = Zrow + h * p.Spad;
            float s = 0.0f;
            for (int t = tid; t < n; t += kThreads)
                s += expf(zh[rowOf(t)] - headM[h]);
            a = blockSum<float>(s, warpSumsF) * headInvZ[h];
        }
        if (tid == 0)
            headAlpha[h] = a;
    }
    __syncthreads();

    // Exact attention over the chosen rows (Eq. 8), then y = α·y_top + (1 − α)·v̄ (Eq. 10).
    const int grp = tid / L, lane = tid % L;
    const bool active = lane * 8 < D;
    const size_t base = static_cast<size_t>(row) * p.stride * D + lane * 8;
    const T* K = static_cast<const T*>(p.k) + base;
    const T* V = static_cast<const T*>(p.v) + base;
    const double invS = 1.0 / static_cast<double>(p.S);
    for (int h0 = hA; h0 < hA + nhU; h0 += GT) {
        const int nh = min(GT, hA + nhU - h0);
        float qr[GT][8];
#pragma unroll
        for (int h = 0; h < GT; ++h)
#pragma unroll
            for (int e = 0; e < 8; ++e)
                qr[h][e] = active && h < nh
                               ? p.q[(row * g + h0 + h) * D + lane * 8 + e] * p.scaleLog2
                               : 0.0f;
        Acc<GT> a;
        a.reset();
        attendRows<T, L, GT>(K, V, D, active, grp, rowOf, n, qr, a);
        mergeBlock<L, GT>(a, nh, D, active, mergeBuf, [&](int h, int d, float o, float l, float) {
            const int64_t hq = row * g + h0 + h;
            const float al = headAlpha[h0 + h];
            const float vbar = static_cast<float>(p.vsum[row * D + d] * invS);
            p.y[hq * D + d] = p.meanValue ? al * (o / l) + (1.0f - al) * vbar : o / l;
            if (d == 0 && p.alpha)
                p.alpha[hq] = al;
        });
    }
}

// --- launchers ---------------------------------------------------------------------------------





template <typename T, int L, int GT> int denseResident() {
    static int perSm = -1;
    if (perSm < 0) {
        int n = 0;
        check(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
                  &n, denseKernel<T, L, GT>, kThreads, kWarps * (256 + 2) * sizeof(float)),
              "occupancy");
        perSm = std::max(n, 1);
    }
    return perSm * device().sms;
}

template <typename T, int L> int denseResidentL(int gt) {
    switch (gt) {
    case 1:
        return denseResident<T, L, 1>();
    case 2:
        return denseResident<T, L, 2>();
    case 4:
        return denseResident<T, L, 4>();
    default:
        return denseResident<T, L, 8>();
    }
}
template <typename T> int denseResidentForT(int lanes, int gt) {
    return lanes == 8 ? denseResidentL<T, 8>(gt)
           : lanes == 16 ? denseResidentL<T, 16>(gt)
                         : denseResidentL<T, 32>(gt);
}


/// Raises a kernel's dynamic shared memory limit to `bytes` (beyond the default 48 KiB), once per
/// kernel and size.
template <typename F> void setSmem(F* kernel, size_t bytes) {
    if (bytes <= 48 * 1024)
        return;
    static std::mutex mu;
    static std::map<const void*, size_t> done; // each kernel's limit set so far
    std::lock_guard<std::mutex> lock(mu);
    size_t& at = done[reinterpret_cast<const void*>(kernel)];
    if (bytes <= at)
        return;
    check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               static_cast<int>(bytes)),
          "shared memory attribute");
    at = bytes;
}

template <typename T, int L, int GT>
void launchDenseT(const DenseParams& p, int64_t rows, cudaStream_t s) {
    const size_t smem = kWarps * (p.D + 2) * sizeof(float);
    SPARQLAB_LAUNCH(dim3(p.splits, static_cast<unsigned>(rows)), kThreads, smem, s,
                    denseKernel<T, L, GT>)(p);
    check(cudaGetLastError(), "dense kernel");
    if (p.splits > 1) {
        SPARQLAB_LAUNCH(static_cast<unsigned>(rows * p.g), 128, 0, s, denseMergeKernel)(p);
        check(cudaGetLastError(), "dense merge kernel");
    }
}

template <typename T, int L>
void launchDenseL(const DenseParams& p, int64_t rows, int gt, cudaStream_t s) {
    switch (gt) {
    case 1:
        return launchDenseT<T, L, 1>(p, rows, s);
    case 2:
        return launchDenseT<T, L, 2>(p, rows, s);
    case 4:
        return launchDenseT<T, L, 4>(p, rows, s);
    default:
        return launchDenseT<T, L, 8>(p, rows, s);
    }
}

/// A stream of this thread's beside the caller's, and events to order them: step 2 of one part
/// of the rows runs there while step 1 of the next part runs on the caller's stream. Made once
/// per thread and device (outside any graph capture: a step runs once before it is recorded).
struct SideStream {
    static constexpr int kParts = 4;
    int device = -1;
    cudaStream_t stream = nullptr;
    cudaEvent_t part[kParts] = {}, join = nullptr;
};
SideStream& sideStream() {
    thread_local SideStream side;
    int dev = 0;
    check(cudaGetDevice(&dev), "cudaGetDevice");
    if (side.device != dev) {
        check(cudaStreamCreateWithFlags(&side.stream, cudaStreamNonBlocking), "side stream");
        for (cudaEvent_t& e : side.part)
            check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "event");
        check(cudaEventCreateWithFlags(&side.join, cudaEventDisableTiming), "event");
        side.device = dev;
    }
    return side;
}

template <typename T>
void launchSelectingT(const CacheView& c, const Request& r, const Layout& l, char* ws,
                      cudaStream_t s) {
    const int64_t rows = c.B * c.H, g = r.Hq / c.H;
    float* Z = reinterpret_cast<float*>(ws);
    float* stats = reinterpret_cast<float*>(ws + (l.zBytes + 255) / 256 * 256);
    auto up = [](size_t b) { return (b + 255) / 256 * 256; };
    float* rankBuf = reinterpret_cast<float*>(ws + up(l.zBytes) + up(l.statsBytes));
    uint32_t* groupMax = l.groups ? reinterpret_cast<uint32_t*>(ws + up(l.zBytes) +
                                                                up(l.statsBytes) + up(l.rankBytes))
                                  : nullptr;
    const int64_t nRankAll =
        r.select == Select::Pages ? l.pages.f0 : c.S - std::min(r.local, std::min(r.k, c.S));

    ScoreParams sp{};
    sp.q = r.q;
    sp.stride = c.stride;
    sp.D = c.D;
    sp.S = static_cast<int>(c.S);
    sp.g = static_cast<int>(g);
    sp.H = static_cast<int>(c.H);
    sp.r = static_cast<int>(r.r);
    sp.rowsKind = static_cast<int>(r.rows);
    sp.tau = r.tau;
    sp.tauValue = r.tauValue;
    sp.defaultScale = r.defaultScale;
    sp.scale = r.scale;
    sp.basis = c.basis;
    sp.channels = r.channels;
    sp.Z = Z;
    sp.Spad = l.Spad;
    sp.nItems = static_cast<int>(l.nItems);
    sp.stats = stats;
    sp.chunks = static_cast<int>(l.chunks);
    sp.chunkLen = static_cast<int>(l.chunkLen);
    const bool bound = r.score == Score::PageBound;
    sp.bound = bound;
    sp.items = bound ? c.pmax : c.k;
    sp.items2 = bound ? c.pmin : nullptr;
    sp.itemStride = bound ? c.pagesCap : c.stride;
    sp.rows = r.rows == Rows::Basis ? c.kp : c.kt;
    sp.groupMax = l.rankKernel ? nullptr : groupMax; // (else the rank kernel writes them)
    sp.Gpad = l.Gpad;
    sp.nRank = static_cast<int>(nRankAll);
    sp.gUnits = static_cast<int>(l.units);
    const size_t lowRankSmem = lowRankSmemBytes(g, r.r, c.D, r.rows == Rows::Channels);
    // Step 1 of rows [row0, row0 + n) on stream st.
    auto step1 = [&](int64_t row0, int64_t n, cudaStream_t st) {
        if (!(l.stages & 1))
            return; // (left out: timing step 2 alone)
        ScoreParams pp = sp;
        pp.rowBase = row0;
        const dim3 grid(static_cast<unsigned>(l.chunks), static_cast<unsigned>(n));
        if (r.score == Score::LowRank) {
            auto go = [&](auto kernel) {
                setSmem(kernel, lowRankSmem);
                SPARQLAB_LAUNCH(grid, kThreads, lowRankSmem, st, kernel)(pp);
            };
            if (g <= 1)
                go(lowRankKernel<T, 1>);
            else if (g <= 4)
                go(lowRankKernel<T, 4>);
            else
                go(lowRankKernel<T, 8>);
        } else {
            auto go = [&](auto kernel) { SPARQLAB_LAUNCH(grid, kThreads, 0, st, kernel)(pp); };
            const bool one = g <= 1;
            switch (l.lanes) {
            case 8:
                one ? go(rowScoreKernel<T, 8, 1>) : go(rowScoreKernel<T, 8, 4>);
                break;
            case 16:
                one ? go(rowScoreKernel<T, 16, 1>) : go(rowScoreKernel<T, 16, 4>);
                break;
            default:
                one ? go(rowScoreKernel<T, 32, 1>) : go(rowScoreKernel<T, 32, 4>);
            }
        }
        check(cudaGetLastError(), "step 1 kernel");
    };

    SelectParams q{};
    q.k = c.k;
    q.v = c.v;
    q.vsum = c.vsum;
    q.stride = c.stride;
    q.D = c.D;
    q.S = static_cast<int>(c.S);
    q.g = static_cast<int>(g);
    q.q = r.q;
    q.scaleLog2 = r.scale * kLog2e;
    q.y = r.y;
    q.alpha = r.alpha;
    q.Z = Z;
    q.Spad = l.Spad;
    q.stats = stats;
    q.chunks = static_cast<int>(l.chunks);
    q.rankBuf = rankBuf;
    q.gqa = static_cast<int>(r.gqa);
    q.units = static_cast<int>(l.units);
    q.select = static_cast<int>(r.select);
    q.meanValue = r.meanValue;
    q.p = r.p;
    q.pageSize = static_cast<int>(c.pageSize);
    if (r.select == Select::Pages) {
        q.nRank = static_cast<int>(l.pages.f0);
        q.want = static_cast<int>(l.pages.want);
        q.f0 = static_cast<int>(l.pages.f0);
        q.pages = static_cast<int>(l.pages.pages);
        q.lEff = 0;
        q.kEff = static_cast<int>(r.k);
    } else {
        const int64_t kEff = std::min(r.k, c.S), lEff = std::min(r.local, kEff);
        q.kEff = static_cast<int>(kEff);
        q.lEff = static_cast<int>(lEff);
        q.nRank = static_cast<int>(c.S - lEff);
        q.want = static_cast<int>(kEff - lEff);
    }
    q.selOut = r.selOut;
    q.selCount = r.selCount;
    q.selStride = r.selStride;
    q.groupMax = groupMax;
    q.Gpad = l.Gpad;
    q.rankReady = l.rankKernel;
    const bool one = g <= 1 || l.units > 1;
    // Step 2 of rows [row0, row0 + n) on stream st.
    auto step2 = [&](int64_t row0, int64_t n, cudaStream_t st) {
        if (!(l.stages & 2))
            return; // (left out: timing step 1 alone)
        SelectParams pp = q;
        pp.rowBase = row0;
        if (l.rankKernel) {
            const dim3 grid(static_cast<unsigned>((l.Gpad + kThreads - 1) / kThreads),
                            static_cast<unsigned>(n));
            SPARQLAB_LAUNCH(grid, kThreads, 0, st, rankKernel)(pp, groupMax);
            check(cudaGetLastError(), "rank kernel");
        }
        const unsigned blocks = static_cast<unsigned>(n * l.units);
        auto go = [&](auto kernel) {
            setSmem(kernel, selectSmemBytes());
            SPARQLAB_LAUNCH(blocks, kThreads, selectSmemBytes(), st, kernel)(pp);
        };
        switch (l.lanes) {
        case 8:
            one ? go(selectKernel<T, 8, 1>) : go(selectKernel<T, 8, 4>);
            break;
        case 16:
            one ? go(selectKernel<T, 16, 1>) : go(selectKernel<T, 16, 4>);
            break;
        default:
            one ? go(selectKernel<T, 32, 1>) : go(selectKernel<T, 32, 4>);
        }
        check(cudaGetLastError(), "step 2 kernel");
    };

    // With many rows, step 2 of each part runs beside step 1 of the next (a side stream), so
    // that step 2's latency-bound selection hides behind step 1's bandwidth-bound reads.
    const int parts = l.parts;
    if (parts <= 1) {
        step1(0, rows, s);
        step2(0, rows, s);
        return;
    }
    SideStream& side = sideStream();
    for (int i = 0; i < parts; ++i) {
        const int64_t r0 = rows * i / parts, r1 = rows * (i + 1) / parts;
        step1(r0, r1 - r0, s);
        check(cudaEventRecord(side.part[i], s), "event record");
        check(cudaStreamWaitEvent(side.stream, side.part[i], 0), "stream wait");
        step2(r0, r1 - r0, side.stream);
    }
    check(cudaEventRecord(side.join, side.stream), "event record");
    check(cudaStreamWaitEvent(s, side.join, 0), "stream wait");
}

template <typename T>
void launchT(const CacheView& c, const Request& r, const Layout& l, char* ws, cudaStream_t s) {
    if (r.score != Score::None)
        return launchSelectingT<T>(c, r, l, ws, s);
    DenseParams p{};
    p.k = c.k;
    p.v = c.v;
    p.q = r.q;
    p.y = r.y;
    p.alpha = r.alpha;
    p.part = reinterpret_cast<float*>(ws);
    p.stride = c.stride;
    p.D = c.D;
    p.S = static_cast<int>(c.S);
    p.g = static_cast<int>(r.Hq / c.H);
    p.splits = static_cast<int>(l.split.splits);
    p.splitLen = static_cast<int>(l.split.len);
    p.scaleLog2 = r.scale * kLog2e;
    const int64_t rows = c.B * c.H;
    switch (l.lanes) {
    case 8:
        return launchDenseL<T, 8>(p, rows, l.gtDense, s);
    case 16:
        return launchDenseL<T, 16>(p, rows, l.gtDense, s);
    default:
        return launchDenseL<T, 32>(p, rows, l.gtDense, s);
    }
}

} // namespace

template <typename T>
void launchStorage(const CacheView& c, const Request& r, const Layout& l, char* ws, cudaStream_t s) {
    launchT<T>(c, r, l, ws, s);
}

template <typename T> int denseResidentFor(int lanes, int gt) {
    return denseResidentForT<T>(lanes, gt);
}

} // namespace sparqlab::attention::cuda::detail
