#pragma once
// The pieces every kernel shares: stored elements read 8 at a time, the block primitives
// (scan, sum, the merge of softmax states) and attention over a list of rows (dense and the
// gather of step 2).
// Compiled by nvcc through kernels.cuh (or as host C++ under tests/cuda/simt).

#include "attention/cuda/internal.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>

namespace sparqlab::attention::cuda::detail {
namespace {

/// Every kernel's first statement (internal.h, SPARQLAB_LAUNCH_AFTER): wait for the kernels before
/// it on the stream, then let the next launch begin.
__device__ __forceinline__ void startAfterPrior() {
    SPARQLAB_WAIT_FOR_PRIOR();
    SPARQLAB_LET_NEXT_START();
}

template <typename T> struct Raw;
template <> struct Raw<float> { float4 a, b; };
template <> struct Raw<__half> { uint4 a; };
template <> struct Raw<__nv_bfloat16> { uint4 a; };

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

/// Inclusive prefix sum of one value per lane over the warp (every lane must call it).
template <typename V> __device__ __forceinline__ V warpInclusiveScan(V x) {
    const int lw = threadIdx.x & 31;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const V y = __shfl_up_sync(0xffffffffu, x, o);
        if (lw >= o)
            x += y;
    }
    return x;
}

/// Exclusive prefix sum of one value per thread over the block; *total the block's sum. Every
/// thread must call it. `warpSums` holds kWarps entries.
template <typename V> __device__ V blockExclusiveScan(V x, V* warpSums, V* total) {
    const int lw = threadIdx.x & 31, w = threadIdx.x >> 5;
    const V incl = warpInclusiveScan(x);
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

/// The first of `cnt` slots this lane takes in a block-wide list whose length is *count: the
/// warp's lanes take consecutive slots in lane order (a scan over the warp), the warp its range
/// by one atomicAdd. Every lane of the warp must call it.
__device__ __forceinline__ uint32_t warpReserve(uint32_t cnt, uint32_t* count) {
    const uint32_t incl = warpInclusiveScan(cnt);
    uint32_t at = 0;
    if ((threadIdx.x & 31) == 31 && incl > 0)
        at = atomicAdd(count, incl);
    return __shfl_sync(0xffffffffu, at, 31) + incl - cnt;
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

/// The warp's lanes' states merged, lanes `from`, 2·from, … 16 apart first; every lane ends with
/// the merged state of the lanes it was merged with (all 32 with from = 1).
__device__ __forceinline__ void warpMergeNat(SoftmaxState& s, int from = 1) {
    for (int off = from; off < 32; off <<= 1) {
        const float m = __shfl_xor_sync(0xffffffffu, s.m, off);
        const float l = __shfl_xor_sync(0xffffffffu, s.l, off);
        mergeNat(s, m, l);
    }
}

/// The block's merged natural-log states of `nh` heads: lanes offset `from`, 2·from, … 16 apart
/// merged first (the others of a lane group hold copies), then the warps through `buf`
/// ([kWarps][GT][2]). The result is in buf[0 … 2·GT) for every thread.
template <int GT> __device__ void blockMergeNat(SoftmaxState (&st)[GT], int from, float* buf) {
#pragma unroll
    for (int h = 0; h < GT; ++h)
        warpMergeNat(st[h], from);
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

/// This lane's 8 components of nh query heads from head hq0 (q: [.., D] float32) times
/// scale·log2(e), the attention's base-2 logits; 0 past nh or for an idle lane.
template <int GT>
__device__ __forceinline__ void loadQuery(float (&qr)[GT][8], const float* q, int64_t hq0, int nh,
                                          int64_t D, int lane, bool active, float scaleLog2) {
#pragma unroll
    for (int h = 0; h < GT; ++h)
#pragma unroll
        for (int e = 0; e < 8; ++e)
            qr[h][e] = active && h < nh ? q[(hq0 + h) * D + lane * 8 + e] * scaleLog2 : 0.0f;
}

/// Component d of `splits` partial states (o [D], m, l at base + s·rec) merged, rescaled by
/// exp2(m_s − M) with M their largest m: o / l.
__device__ __forceinline__ float mergedSplits(const float* base, int splits, int64_t rec, int64_t D,
                                              int64_t d, float M) {
    float o = 0.0f, l = 0.0f;
    for (int s = 0; s < splits; ++s) {
        const float c = rescale(base[s * rec + D], M);
        o += c * base[s * rec + d];
        l += c * base[s * rec + D + 1];
    }
    return o / l;
}

/// Each of a lane group's partial sums summed over its L lanes (xor shuffles: every lane of the
/// group ends with the sums).
template <int L, int GT, int U> __device__ __forceinline__ void laneGroupSum(float (&sc)[GT][U]) {
#pragma unroll
    for (int o = L / 2; o > 0; o >>= 1)
#pragma unroll
        for (int h = 0; h < GT; ++h)
#pragma unroll
            for (int u = 0; u < U; ++u)
                sc[h][u] += __shfl_xor_sync(0xffffffffu, sc[h][u], o);
}

/// Online softmax of GT heads over the rows rowOf(t), t < n: lane groups of L lanes share a row
/// (8 elements a lane), kUnroll rows in flight per group, K and V asked for together. `qr` holds
/// each head's 8 components of this lane times scale·log2(e) (base-2 logits). K and V point at
/// this lane's first element of the (batch row, KV head)'s storage.
template <typename T, int L, int GT, typename RowOf>
__device__ __forceinline__ void attendRows(const T* K, const T* V, int64_t D, bool active, int grp,
                                           RowOf rowOf, int n, const float (&qr)[GT][8],
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
        laneGroupSum<L>(sc);
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
__device__ __forceinline__ void mergeBlock(Acc<GT>& a, int nh, int64_t D, bool active, float* buf,
                                           Emit emit) {
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

/// Asks for the 128-byte line holding `p` to be brought into L2, not waiting for it. A hint
/// (no-op under the emulation).
__device__ __forceinline__ void prefetchL2(const void* p) {
#ifdef __CUDA_ARCH__
    asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
#else
    (void)p;
#endif
}

/// Asks for the K and V rows of `position` (D elements of `bytes` each) of (batch row × KV head)
/// `row` to be brought into L2, not waiting for them: step 2 asks for its candidates' rows while
/// it ranks them, so that the gather after finds them there. A hint (no-op under the emulation).
__device__ __forceinline__ void prefetchRows(const void* k, const void* v, int64_t row,
                                             int64_t stride, int64_t D, int bytes,
                                             int64_t position) {
    const size_t at = (static_cast<size_t>(row) * stride + position) * D * bytes;
    for (int64_t b = 0; b < D * bytes; b += 128) { // (a line at a time)
        prefetchL2(static_cast<const char*>(k) + at + b);
        prefetchL2(static_cast<const char*>(v) + at + b);
    }
}

/// The query heads [h0, h1) of (batch row × KV head) `row` (q [.., D], the heads of a row g
/// apart) attending over the rows rowOf(t), t < n, of its K and V storage (rows of D elements,
/// `stride` rows a (batch row × KV head)), GT heads at a time: emit(h, d, o, l, m) with h the
/// query head within the row, as mergeBlock gives each component. The dense kernel's and step
/// 2's attention.
template <typename T, int L, int GT, typename RowOf, typename Emit>
__device__ __forceinline__ void attendHeads(const void* k, const void* v, const float* q,
                                            float scaleLog2, int64_t row, int64_t stride, int64_t D,
                                            int g, int h0, int h1, RowOf rowOf, int n,
                                            float* mergeBuf, Emit emit) {
    const int grp = threadIdx.x / L, lane = threadIdx.x % L;
    const bool active = lane * 8 < D;
    const size_t base = static_cast<size_t>(row) * stride * D + lane * 8;
    const T* K = static_cast<const T*>(k) + base;
    const T* V = static_cast<const T*>(v) + base;
    for (int hA = h0; hA < h1; hA += GT) {
        const int nh = min(GT, h1 - hA);
        float qr[GT][8];
        loadQuery<GT>(qr, q, row * g + hA, nh, D, lane, active, scaleLog2);
        Acc<GT> a;
        a.reset();
        attendRows<T, L, GT>(K, V, D, active, grp, rowOf, n, qr, a);
        mergeBlock<L, GT>(a, nh, D, active, mergeBuf, [&](int h, int d, float o, float l, float m) {
            emit(hA + h, d, o, l, m);
        });
    }
}

} // namespace
} // namespace sparqlab::attention::cuda::detail
