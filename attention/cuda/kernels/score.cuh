#pragma once
// Step 1 of the selecting methods: low-rank scores from a dimension-major K (SparQ,
// sparq-top-p, Loki, Double Sparsity), page bounds (Quest) or exact scores (oracle-top-p), with
// each chunk's softmax state (CUDA.md §2.1).
// Compiled by nvcc through kernels.cuh (or as host C++ under tests/cuda/simt).

#include "attention/cuda/kernels/common.cuh"

namespace sparqlab::attention::cuda::detail {
namespace {

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

__device__ double sparqTau(int mode, double value, double num, double den, int64_t D, int64_t r) {
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
/// writes ẑ and each chunk's softmax state per head. A thread reads its rows in batches of 8;
/// `Staged` (2-byte storage): each batch by asynchronous copies into the thread's own slots of
/// shared memory, the next batch's copies issued before this one's arithmetic (CUDA.md §2.1).
template <typename T, int GT, bool Staged>
__global__ void __launch_bounds__(kThreads, GT == 1 && sizeof(T) == 2 ? 4 : 1)
    lowRankKernel(ScoreParams p) {
    static_assert(!Staged || sizeof(Raw<T>) == 16, "staged loads are 16 bytes a row");
    startAfterPrior();
    SPARQLAB_DYNAMIC_SHARED(float, smem);
    const int64_t row = p.rowBase + blockIdx.y;
    const int chunk = blockIdx.x;
    const int hk = static_cast<int>(row % p.H);
    const int g = p.g, r = p.r;
    const int64_t D = p.D;
    const bool perHead = p.rowsKind == static_cast<int>(Rows::Channels);
    float* coef = smem;                                 // [g][r]
    int* rowIdx = reinterpret_cast<int*>(coef + g * r); // [r], or [g][r] per head
    float* factor = reinterpret_cast<float*>(rowIdx + (perHead ? g * r : r)); // [g]
    float* red = factor + g; // [kWarps·8·2 + 8·2]
    const float* q = p.q + row * g * D;
    const int tid = threadIdx.x;
    const T* base = static_cast<const T*>(p.rows) + row * D * p.stride;
    const int c0 = chunk * p.chunkLen, c1 = min(p.S, c0 + p.chunkLen);
    // This thread's slot of each of the 8 rows of a batch: consecutive threads, consecutive 16
    // bytes (no bank conflicts).
    Raw<T>* stage = Staged ? reinterpret_cast<Raw<T>*>(reinterpret_cast<char*>(smem) +
                                                       lowRankStageAt(g, r, perHead)) +
                                 tid
                           : nullptr;
    // The rows j0 … j0 + 7 of `ri` at positions s … s + 7 copied into the stage (Staged).
    auto copyBatch = [&](const int* ri, int j0, int s) {
#pragma unroll
        for (int jj = 0; jj < 8; ++jj)
            if (j0 + jj < r)
                SPARQLAB_COPY_ASYNC_16(stage + jj * kThreads,
                                       base + static_cast<int64_t>(ri[j0 + jj]) * p.stride + s);
    };
    bool firstCopied = false; // the first batch's copies issued in the prologue

    if (p.rowsKind == static_cast<int>(Rows::SparqComponents)) {
        // SPARQ.md §3.1: the r largest of Σ_h |q_h| (ties to the lower index), ascending. Each
        // component's key: its sum's ordered bits above, the index's complement below, so that
        // one 64-bit comparison ranks a pair, ties included, in a strict order (exactly r
        // chosen, a NaN sum too: it ranks lowest, as orderedKey puts it).
        SPARQLAB_SHARED(uint64_t, keys, kMaxHeadDim);
        for (int i = tid; i < D; i += kThreads) {
            float s = 0.0f;
            for (int h = 0; h < g; ++h)
                s += fabsf(q[h * D + i]);
            keys[i] = rankedItem(orderedKey(s), static_cast<uint32_t>(i));
        }
        __syncthreads();
        // Each component's rank, counted by P consecutive threads over every P-th key and summed
        // by shuffles (the keys' loads unrolled: a loop of D dependent shared loads each waited
        // on was a good part of the prologue every block of step 1 runs before its first load of
        // K), then the chosen in ascending order by a block scan of the flags (the first of the
        // P threads holds its component's).
        SPARQLAB_SHARED(uint32_t, scanSums, kWarps);
        const int P = rankThreadsPerComponent(D, kThreads);
        int placed = 0;
        for (int i0 = 0; i0 < D; i0 += kThreads / P) {
            const int i = i0 + tid / P, part = tid % P;
            int rank = 0;
            if (i < D) {
                const uint64_t x = keys[i];
#pragma unroll 8
                for (int j = part; j < D; j += P)
                    rank += keys[j] > x;
            }
            for (int o = 1; o < P; o <<= 1)
                rank += __shfl_xor_sync(0xffffffffu, rank, o);
            const uint32_t chosen = i < D && part == 0 && rank < r;
            uint32_t total;
            const uint32_t before = blockExclusiveScan<uint32_t>(chosen, scanSums, &total);
            if (chosen)
                rowIdx[placed + static_cast<int>(before)] = i;
            placed += static_cast<int>(total);
        }
        __syncthreads();
        // The components known, the first batch's rows are asked for while τ and the
        // coefficients are computed (the loop below issues the rest).
        if constexpr (Staged) {
            if (c0 + tid * 8 < c1)
                copyBatch(rowIdx, 0, c0 + tid * 8);
            firstCopied = true;
        }
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

    for (int h0 = 0; h0 < g; h0 += GT) {
        const int nh = min(GT, g - h0);
        // The next batch to copy (Staged): its positions, its head within the tile (each head's
        // own rows where perHead) and its first row, advanced in the order the loop below reads.
        int ns = c0 + tid * 8, nhh = 0, nj0 = 0;
        // `copy` false: the batch was issued already (the prologue's first one).
        auto issueNext = [&](bool copy = true) {
            if (ns >= c1)
                return;
            if (copy)
                copyBatch(rowIdx + (perHead ? (h0 + nhh) * r : 0), nj0, ns);
            nj0 += 8;
            if (nj0 >= r) {
                nj0 = 0;
                if (!perHead || ++nhh >= nh) {
                    nhh = 0;
                    ns += kThreads * 8;
                }
            }
        };
        // The rows j0 … j0 + 7 of `ri` at positions s … s + 7: from the stage, once the copies are
        // in, the next batch's copies issued; or loaded here.
        auto batch = [&](Raw<T>(&raw)[8], const int* ri, int j0, int s) {
            if constexpr (Staged) {
                SPARQLAB_COPY_ASYNC_WAIT_ALL();
#pragma unroll
                for (int jj = 0; jj < 8; ++jj)
                    raw[jj] = j0 + jj < r ? stage[jj * kThreads] : zeroRaw<T>();
                issueNext();
            } else {
#pragma unroll
                for (int jj = 0; jj < 8; ++jj)
                    raw[jj] =
                        j0 + jj < r
                            ? loadRaw<T>(base + static_cast<int64_t>(ri[j0 + jj]) * p.stride + s)
                            : zeroRaw<T>();
            }
        };
        if constexpr (Staged)
            issueNext(!(h0 == 0 && firstCopied));
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
                    batch(raw, rowIdx, j0, s);
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
                        batch(raw, ri, j0, s);
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
    startAfterPrior();
    SPARQLAB_SHARED(float, red, kWarps* GT * 2 + GT * 2);
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
            laneGroupSum<L>(sc);
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

} // namespace
} // namespace sparqlab::attention::cuda::detail
