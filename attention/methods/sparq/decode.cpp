// SparQ decode attention on the CPU (SPARQ.md §3, decode/engine.h): step 1 over r rows of the
// dimension-major K, the top-k by selection while ẑ is written, the k rows gathered, Eq. 10.

#include "attention/decode/selected.h"

namespace sparqlab::attention {
namespace decode {
namespace {

struct SparqArgs {
    int64_t r = 0, k = 0, local = 0;
    TauMode tau = TauMode::Adaptive;
    float tauValue = 1;
    GroupSelect gqa = GroupSelect::SumProbs;
    bool meanValue = true;
    bool defaultScale = true;
};

/// Workspace floats one SparQ group task needs.
int64_t sparqWorkFloats(int64_t g, int64_t D, int64_t S, int64_t k) {
    return 2 * g * S + S + std::max(k, D) + g * k + g * D + D +
           std::max({D, static_cast<int64_t>(kRows) * kChunk, 2 * S}); // rows, then selection
}

/// SparQ Attention (SPARQ.md §3) of g heads sharing one KV head.
template <typename T>
SPARQLAB_INLINE void sparqGroupT(const GroupArgs& a, const SparqArgs& p, float* work,
                                 std::vector<int64_t>& sel, int64_t* heapIdx, int32_t* cand) {
    const int64_t g = a.g, D = a.D, S = a.S;
    float* zh = work;      // [g, S] approximate logits, then probabilities
    float* G = zh + g * S; // [S] group ranking score ([g, S] per head)
    float* heapVal = G + (p.gqa == GroupSelect::PerHead ? g : 1) * S; // [max(k, D)]
    float* zs = heapVal + std::max(p.k, D); // [g, k] exact logits over the selection
    float* yt = zs + g * p.k;               // [g, D] attention over the selection
    float* compScore = yt + g * D;          // [D]
    float* scratch = compScore + D; // [max(D, kRows·kChunk, 2·S)] converted rows, selection
    const T* K = static_cast<const T*>(a.k);
    const T* KT = static_cast<const T*>(a.kt);
    const T* V = static_cast<const T*>(a.v);
    const HalfLoops* hl = halfLoops<T>();

    std::vector<int64_t>& comps = sel; // components first, positions later
    float factor[64];
    sparqSetup(a, p.r, p.tau, p.tauValue, p.defaultScale, compScore, heapIdx, heapVal, comps,
               factor);
    const int64_t kEff = std::min(p.k, S);
    const int64_t lEff = std::min(p.local, kEff);
    const int64_t nRank = S - lEff, want = kEff - lEff; // ranked positions, positions to pick
    // One head per selection (g = 1): ranking by ŝ is ranking by ẑ (SPARQ.md §2.6), so the row
    // is ranked on ẑ, with what the selection and α need gathered as step 1 finishes each
    // block of ẑ (RowTracker, its maxima in G), and ẑ is never exponentiated as a whole.
    const bool longRow = longRowPath(nRank, want);
    bool fused = g == 1 && want > 0;
    RowTracker track;
    if (fused)
        track.reset(G, longRow ? 2 * want : 0, nRank);

    // ẑ_h = q̂_h · K̂ᵀ / τ_h from r dimension-major rows of K, kRows rows at a time so that several
    // contiguous streams are in flight and ẑ is loaded and stored once per kRows rows.
    const size_t nComps = comps.size();
    for (int64_t s0 = 0; s0 < S; s0 += kChunk) {
        const int64_t n = std::min(kChunk, S - s0);
        for (size_t b = 0; b < nComps; b += kRows) {
            const size_t m = std::min<size_t>(kRows, nComps - b);
            // The hardware prefetcher finds each row's stream only after a few misses: ask
            // for the start of the next pass's rows now, so their streams start warm.
            for (size_t j = b + kRows; j < std::min(nComps, b + 2 * kRows); ++j) {
                const char* next = reinterpret_cast<const char*>(KT + comps[j] * a.cap + s0);
                for (int64_t o = 0; o < kWarmBytes; o += 64)
                    __builtin_prefetch(next + o, 0, 1);
            }
            const float* rows[kRows];
            const T* raw[kRows]; // the stored rows, for the fused loops
            for (size_t j = 0; j < kRows; ++j) {
                raw[j] = KT + comps[b + std::min(j, m - 1)] * a.cap + s0; // (c = 0 past m)
                rows[j] = hl      ? nullptr
                          : j < m ? rowF(raw[j], scratch + static_cast<int64_t>(j) * kChunk, n)
                                  : rows[0];
            }
            for (int64_t h = 0; h < g; ++h) {
                float c[kRows];
                for (size_t j = 0; j < kRows; ++j)
                    c[j] = j < m ? a.q[h * D + comps[b + j]] * factor[h] : 0.0f;
                float* z = zh + h * S + s0;
                const float *r0 = rows[0], *r1 = rows[1], *r2 = rows[2], *r3 = rows[3];
                auto pass = [&](int64_t t0, int64_t t1) {
                    if (hl) {
                        const void* rr[kRows] = {raw[0] + t0, raw[1] + t0, raw[2] + t0,
                                                 raw[3] + t0};
                        hl->pass(z + t0, rr, c, t1 - t0, b == 0);
                    } else if (b == 0) {
                        for (int64_t t = t0; t < t1; ++t)
                            z[t] = c[0] * r0[t] + c[1] * r1[t] + c[2] * r2[t] + c[3] * r3[t];
                    } else {
                        for (int64_t t = t0; t < t1; ++t)
                            z[t] += c[0] * r0[t] + c[1] * r1[t] + c[2] * r2[t] + c[3] * r3[t];
                    }
                };
                if (fused && b + kRows >= nComps) { // the last pass: ẑ is final, block by block
                    for (int64_t t0 = 0; t0 < n; t0 += kBlock) {
                        const int64_t t1 = std::min(n, t0 + kBlock);
                        pass(t0, t1);
                        track.add(z + t0, s0 + t0, t1 - t0); // while the block is in L1
                    }
                } else {
                    pass(0, n);
                }
            }
        }
    }
    if (fused) { // step 2 on ẑ (topBySelection); the ranking is ŝ's unless ŝ underflows
        const float least = longRow ? kthLargest(G, 2 * want, want - 1, scratch)
                                    : -std::numeric_limits<float>::infinity();
        sel.clear();
        float v = 0;
        fused = selectAtLeast(zh, nRank, want, least, scratch, cand, sel, &v) &&
                v >= track.m - kUnderflowGap;
    }
    if (!fused && p.gqa == GroupSelect::PerHead) // rank on ẑ itself, per head
        std::copy(zh, zh + g * S, G);
    if (!fused && p.gqa == GroupSelect::SumLogits) {
        std::copy(zh, zh + S, G);
        for (int64_t h = 1; h < g; ++h)
            for (int64_t s = 0; s < S; ++s)
                G[s] += zh[h * S + s];
    }
    // ŝ_h = softmax(ẑ_h), kept unnormalised (e_h and 1/Σe_h): ranking by e_h alone is ranking
    // by ŝ_h, and α only needs the sum over the selection.
    float invZ[64];
    for (int64_t h = 0; h < g && !fused; ++h)
        invZ[h] = 1.0f / expInPlace(zh + h * S, S);
    if (p.gqa == GroupSelect::SumProbs && g > 1) {
        for (int64_t s = 0; s < S; ++s)
            G[s] = zh[s] * invZ[0];
        for (int64_t h = 1; h < g; ++h) {
            const float* e = zh + h * S;
            const float iz = invZ[h];
            for (int64_t s = 0; s < S; ++s)
                G[s] += e[s] * iz;
        }
    }
    const bool perHead = p.gqa == GroupSelect::PerHead && g > 1;
    const double invS = 1.0 / static_cast<double>(S);
    // Selection units: the whole group, or each head on its own (§2.6).
    for (int64_t h0 = 0; h0 < g; h0 += perHead ? 1 : g) {
        const int64_t h1 = perHead ? h0 + 1 : g;
        const float* rank = p.gqa == GroupSelect::PerHead                ? G + h0 * S
                            : (p.gqa == GroupSelect::SumProbs && g == 1) ? zh
                                                                         : G;
        // Step 2 (§2.7): the l_eff most recent positions, then the best of the rest.
        if (!fused) { // (fused: selected above)
            sel.clear();
            topBySelection(rank, nRank, want, heapIdx, heapVal, scratch, cand, sel);
        }
        for (int64_t j = nRank; j < S; ++j) // after every candidate: sel stays ascending
            sel.push_back(j);
        const int64_t n = static_cast<int64_t>(sel.size());
        prefetchRows(K, V, sel, D);

        // α (Eq. 10): the approximate mass on the selection.
        float alpha[64];
        for (int64_t h = h0; h < h1; ++h) {
            float s = 0;
            if (p.meanValue && fused) // ẑ itself (g = 1): exp(ẑ − m) / Σ exp(ẑ − m)
                for (const int64_t j : sel)
                    s += expNeg(zh[j] - track.m);
            else if (p.meanValue)
                for (const int64_t j : sel)
                    s += zh[h * S + j];
            alpha[h] = !p.meanValue ? 1.0f : fused ? s / track.sum : s * invZ[h];
        }
        // Exact attention over the selection (Eq. 8): gathered rows of K, then of V.
        for (int64_t jj = 0; jj < n; ++jj) {
            const float* kr = rowF(K + sel[static_cast<size_t>(jj)] * D, scratch, D);
            for (int64_t h = h0; h < h1; ++h)
                zs[h * n + jj] = dot(a.q + h * D, kr, D) * a.scale;
        }
        float inv[64];
        for (int64_t h = h0; h < h1; ++h)
            inv[h] = 1.0f / expInPlace(zs + h * n, n);
        std::fill(yt + h0 * D, yt + h1 * D, 0.0f);
        for (int64_t jj = 0; jj < n; ++jj) {
            const float* vr = rowF(V + sel[static_cast<size_t>(jj)] * D, scratch, D);
            for (int64_t h = h0; h < h1; ++h)
                axpy(yt + h * D, zs[h * n + jj], vr, D);
        }
        // Step 3: y = α·y_topk + (1 − α)·v̄.
        for (int64_t h = h0; h < h1; ++h) {
            const float al = alpha[h];
            for (int64_t i = 0; i < D; ++i) {
                const float vbar = static_cast<float>(a.vsum[i] * invS);
                a.y[h * D + i] = al * (yt[h * D + i] * inv[h]) + (1.0f - al) * vbar;
            }
            if (a.alpha)
                a.alpha[h] = alpha[h];
        }
    }
}

SPARQLAB_SELECTING_KERNELS(sparqGroup, SparqArgs)

int64_t sparqWork(const DecodeCall& c) {
    return sparqWorkFloats(c.g, c.D, c.S, c.kEff);
}

void sparqTask(const DecodeCall& c, const GroupArgs& a, int64_t, DecodeScratch& s) {
    const AttentionConfig& config = *c.config;
    SparqArgs sp;
    sp.r = config.r;
    sp.k = c.kEff;
    sp.local = c.local;
    sp.tau = config.tau;
    sp.tauValue = static_cast<float>(config.tauValue);
    sp.gqa = config.gqa;
    sp.meanValue = config.meanValue;
    sp.defaultScale = c.defaultScale;
    sparqGroup(c.storage, a, sp, s.work, *s.sel, s.heap, s.cand);
}

/// On CUDA: step 1 over the r components' rows of the dimension-major K, the exact top-k and
/// Eq. 10 (cuda/decode_cuda.h).
void sparqGpu(const DecodeCall& c, cuda::Request& r) {
    r.score = cuda::Score::LowRank;
    r.rows = cuda::Rows::SparqComponents;
    r.select = cuda::Select::TopK;
    r.meanValue = c.config->meanValue;
}

} // namespace
} // namespace decode

namespace detail {
const DecodeKernel& sparqDecodeKernel() {
    static const DecodeKernel kernel{.dimensionMajor = true,
                                     .supports = decode::groupComponents,
                                     .workFloats = decode::sparqWork,
                                     .task = decode::sparqTask,
                                     .gpu = decode::sparqGpu};
    return kernel;
}
} // namespace detail
} // namespace sparqlab::attention
