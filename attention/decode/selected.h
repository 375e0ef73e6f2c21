#pragma once
/// \file decode/selected.h
/// Decode kernels several method units share: SparQ's step-1 setup (its components and
/// temperature, for sparq and sparq-top-p), exact attention over a selected set, the GQA
/// ranking, step 1 over r dimension-major rows (Loki, Double Sparsity) and the top-p budget
/// (oracle-top-p, sparq-top-p). Each unit instantiates what it uses in its own decode*.cpp.

#include "attention/decode/kernel.h"
#include "attention/temperature.h"

namespace sparqlab::attention::decode {

/// SparQ's step 1 setup (SPARQ.md §3.1–3.3) for g heads: the r largest components of
/// Σ_h |q_h| (ties to the lower index), ascending, into comps; per head the factor folding the
/// temperature τ and a non-default logit scale into step 1's coefficients. compScore holds D
/// floats, heapIdx and heapVal D entries.
SPARQLAB_INLINE void sparqSetup(const GroupArgs& a, int64_t r, TauMode tauMode, float tauValue,
                                bool defaultScale, float* compScore, int64_t* heapIdx,
                                float* heapVal, std::vector<int64_t>& comps, float* factor) {
    const int64_t g = a.g, D = a.D;
    const int64_t rEff = std::min(r, D);
    for (int64_t i = 0; i < D; ++i) {
        float s = 0;
        for (int64_t h = 0; h < g; ++h)
            s += std::abs(a.q[h * D + i]);
        compScore[i] = s;
    }
    comps.clear();
    topByScore(compScore, D, rEff, heapIdx, heapVal, comps);
    std::sort(comps.begin(), comps.end());
    for (int64_t h = 0; h < g; ++h) {
        double num = 0, den = 0; // ‖q̂‖₁ and ‖q‖₁ of the head, for Eq. 9
        for (const int64_t i : comps)
            num += std::abs(a.q[h * D + i]);
        for (int64_t i = 0; i < D; ++i)
            den += std::abs(a.q[h * D + i]);
        const double tau = sparqTemperature(tauMode, tauValue, num, den, D, rEff);
        double f = 1.0 / tau;
        if (!defaultScale)
            f *= static_cast<double>(a.scale) * std::sqrt(static_cast<double>(D));
        factor[h] = static_cast<float>(f);
    }
}

// --- Quest, Loki, Double Sparsity and the top-p budgets (METHODS.md §3–6) ------------------

/// Exact attention of heads h0..h1 over the positions `sel` (ascending): yt[h] = Σ softmax(q_h·K_j
/// · scale)·V_j, renormalised over the selection (SPARQ.md §2.4). zs holds g·|sel| floats.
template <typename T>
SPARQLAB_INLINE void attendSelected(const GroupArgs& a, const std::vector<int64_t>& sel, int64_t h0,
                                    int64_t h1, float* zs, float* yt, float* scratch) {
    const int64_t D = a.D, n = static_cast<int64_t>(sel.size());
    const T* K = static_cast<const T*>(a.k);
    const T* V = static_cast<const T*>(a.v);
    prefetchRows(K, V, sel, D);
    for (int64_t jj = 0; jj < n; ++jj) {
        const float* kr = rowF(K + sel[static_cast<size_t>(jj)] * D, scratch, D);
        for (int64_t h = h0; h < h1; ++h)
            zs[h * n + jj] = dot(a.q + h * D, kr, D) * a.scale;
    }
    for (int64_t h = h0; h < h1; ++h) {
        const float inv = 1.0f / expInPlace(zs + h * n, n);
        float* y = yt + h * D;
        std::fill(y, y + D, 0.0f);
        for (int64_t jj = 0; jj < n; ++jj) {
            const float* vr = rowF(V + sel[static_cast<size_t>(jj)] * D, scratch, D);
            axpy(y, zs[h * n + jj] * inv, vr, D);
        }
    }
}

/// y of heads [h0, h1) from attendSelected's yt, with α = 1 (no mean-value term).
SPARQLAB_INLINE void outputSelected(const GroupArgs& a, const float* yt, int64_t h0, int64_t h1) {
    std::copy(yt + h0 * a.D, yt + h1 * a.D, a.y + h0 * a.D);
    if (a.alpha)
        std::fill(a.alpha + h0, a.alpha + h1, 1.0f);
}

/// The ranking score of SPARQ.md §2.6 from per-head logits z [g, S]: SumLogits Σ_h z_h into
/// G; SumProbs (g > 1) Σ_h softmax(z_h) into G, z turned into exp(z_h − max) with invZ[h] its
/// normaliser's inverse; PerHead z copied to G [g, S]. With g = 1 and SumProbs the rank is z
/// itself after exponentiation (rankOf picks it). invZ is always filled.
SPARQLAB_INLINE void rankScores(float* z, int64_t g, int64_t S, GroupSelect gqa, float* G,
                                float* invZ) {
    if (gqa == GroupSelect::PerHead)
        std::copy(z, z + g * S, G);
    if (gqa == GroupSelect::SumLogits) {
        std::copy(z, z + S, G);
        for (int64_t h = 1; h < g; ++h)
            for (int64_t s = 0; s < S; ++s)
                G[s] += z[h * S + s];
    }
    for (int64_t h = 0; h < g; ++h)
        invZ[h] = 1.0f / expInPlace(z + h * S, S);
    if (gqa == GroupSelect::SumProbs && g > 1) {
        for (int64_t s = 0; s < S; ++s)
            G[s] = z[s] * invZ[0];
        for (int64_t h = 1; h < g; ++h)
            for (int64_t s = 0; s < S; ++s)
                G[s] += z[h * S + s] * invZ[h];
    }
}

/// The rank row of the unit starting at head h0 (after rankScores).
SPARQLAB_INLINE const float* rankOf(const float* z, const float* G, int64_t g, int64_t S,
                                    GroupSelect gqa, int64_t h0) {
    if (gqa == GroupSelect::PerHead)
        return G + h0 * S;
    return gqa == GroupSelect::SumProbs && g == 1 ? z : G;
}

/// Loki's and Double Sparsity's step 1 (METHODS.md §4.2, §5.2): ẑ_h = Σ_i c[h, i]·row_{h,i}
/// over dimension-major rows of the cache (Loki: the keys in the calibration basis, the same
/// r rows for every head; Double Sparsity: the rows of each head's r channels).
struct LowRankArgs {
    int64_t k = 0, local = 0, nRows = 0;
    GroupSelect gqa = GroupSelect::SumProbs;
    const void* const* rows = nullptr; ///< [nRows] shared, or [g, nRows] per head
    bool perHeadRows = false;
    const float* coef = nullptr; ///< [g, nRows], the logit scale folded in
};

inline int64_t lowRankWorkFloats(int64_t g, int64_t D, int64_t S, int64_t k) {
    return 2 * g * S + std::max(k, D) + g * std::max<int64_t>(k, 1) + g * D +
           std::max({D, static_cast<int64_t>(kRows) * kChunk, 2 * S});
}

/// ẑ rows of heads [h0, h1) from the same dimension-major rows: kRows at a time, converted
/// once (half storage: the fused loops), accumulated into each head's row.
template <typename T>
SPARQLAB_INLINE void lowRankPass(const GroupArgs& a, const void* const* rows, int64_t nRows,
                                 const float* coef, int64_t coefStride, int64_t h0, int64_t h1,
                                 float* zh, float* scratch) {
    const int64_t S = a.S;
    const HalfLoops* hl = halfLoops<T>();
    for (int64_t s0 = 0; s0 < S; s0 += kChunk) {
        const int64_t n = std::min(kChunk, S - s0);
        for (int64_t b = 0; b < nRows; b += static_cast<int64_t>(kRows)) {
            const int64_t m = std::min<int64_t>(static_cast<int64_t>(kRows), nRows - b);
            const T* raw[kRows];
            const float* conv[kRows];
            for (size_t j = 0; j < kRows; ++j) {
                raw[j] = static_cast<const T*>(rows[b + std::min<int64_t>(int64_t(j), m - 1)]) + s0;
                conv[j] = hl               ? nullptr
                          : int64_t(j) < m ? rowF(raw[j], scratch + int64_t(j) * kChunk, n)
                                           : conv[0];
            }
            for (int64_t h = h0; h < h1; ++h) {
                float c[kRows];
                for (size_t j = 0; j < kRows; ++j)
                    c[j] = int64_t(j) < m ? coef[h * coefStride + b + int64_t(j)] : 0.0f;
                float* z = zh + h * S + s0;
                if (hl) {
                    const void* rr[kRows] = {raw[0], raw[1], raw[2], raw[3]};
                    hl->pass(z, rr, c, n, b == 0);
                } else if (b == 0) {
                    for (int64_t t = 0; t < n; ++t)
                        z[t] = c[0] * conv[0][t] + c[1] * conv[1][t] + c[2] * conv[2][t] +
                               c[3] * conv[3][t];
                } else {
                    for (int64_t t = 0; t < n; ++t)
                        z[t] += c[0] * conv[0][t] + c[1] * conv[1][t] + c[2] * conv[2][t] +
                                c[3] * conv[3][t];
                }
            }
        }
    }
}

/// Loki and Double Sparsity (the score-then-select template, METHODS.md §2.1) of g heads
/// sharing one KV head: ẑ from r rows, ŝ, the ranking score, the selection (SPARQ.md §2.7),
/// exact attention over it; no mean-value term.
template <typename T>
SPARQLAB_INLINE void lowRankGroupT(const GroupArgs& a, const LowRankArgs& p, float* work,
                                   std::vector<int64_t>& sel, int64_t* heapIdx, int32_t* cand) {
    const int64_t g = a.g, D = a.D, S = a.S;
    float* zh = work;
    float* G = zh + g * S;
    float* heapVal = G + g * S;
    float* zs = heapVal + std::max(p.k, D);
    float* yt = zs + g * std::max<int64_t>(p.k, 1);
    float* scratch = yt + g * D;
    if (p.perHeadRows)
        for (int64_t h = 0; h < g; ++h)
            lowRankPass<T>(a, p.rows + h * p.nRows, p.nRows, p.coef, p.nRows, h, h + 1, zh,
                           scratch);
    else
        lowRankPass<T>(a, p.rows, p.nRows, p.coef, p.nRows, 0, g, zh, scratch);
    float invZ[64];
    rankScores(zh, g, S, p.gqa, G, invZ);
    const int64_t kEff = std::min(p.k, S), lEff = std::min(p.local, kEff);
    const int64_t nRank = S - lEff, want = kEff - lEff;
    const bool perHead = p.gqa == GroupSelect::PerHead && g > 1;
    for (int64_t h0 = 0; h0 < g; h0 += perHead ? 1 : g) {
        const int64_t h1 = perHead ? h0 + 1 : g;
        sel.clear();
        topBySelection(rankOf(zh, G, g, S, p.gqa, h0), nRank, want, heapIdx, heapVal, scratch, cand,
                       sel);
        for (int64_t j = nRank; j < S; ++j)
            sel.push_back(j);
        attendSelected<T>(a, sel, h0, h1, zs, yt, scratch);
        outputSelected(a, yt, h0, h1);
    }
}

/// The top-p budgets (METHODS.md §6): oracle-top-p on the exact logits, sparq-top-p on SparQ's
/// approximate ones (step 1 from the dimension-major rows of its components).
struct TopPArgs {
    bool sparq = false;
    double p = 0.9;
    int64_t kMax = 0, local = 0;
    GroupSelect gqa = GroupSelect::SumProbs;
    bool meanValue = true;             ///< sparq-top-p's Eq. 10
    const void* const* rows = nullptr; ///< sparq: its components' rows [r]
    int64_t nRows = 0;
    const float* coef = nullptr; ///< sparq: [g, r]
};

inline int64_t topPWorkFloats(int64_t g, int64_t D, int64_t S) {
    return 3 * g * S + S + std::max(S, D) + g * D +
           std::max({D, static_cast<int64_t>(kRows) * kChunk, 2 * S});
}

template <typename T>
SPARQLAB_INLINE void topPGroupT(const GroupArgs& a, const TopPArgs& p, float* work,
                                std::vector<int64_t>& sel, int64_t* heapIdx, int32_t* cand) {
    const int64_t g = a.g, D = a.D, S = a.S;
    float* z = work;                      // [g, S] logits, then exp(z − max)
    float* G = z + g * S;                 // [g, S]
    float* mass = G + g * S;              // [S] the unit's mass
    float* heapVal = mass + S;            // [max(S, D)]
    float* zs = heapVal + std::max(S, D); // [g, S]
    float* yt = zs + g * S;               // [g, D]
    float* scratch = yt + g * D;
    const T* K = static_cast<const T*>(a.k);
    const T* V = static_cast<const T*>(a.v);
    if (p.sparq) {
        lowRankPass<T>(a, p.rows, p.nRows, p.coef, p.nRows, 0, g, z, scratch);
    } else { // exact logits: one pass over K
        const HalfLoops* hl = halfLoops<T>();
        for (int64_t s0 = 0; s0 < S; s0 += kDenseRows) {
            const int64_t m = std::min(kDenseRows, S - s0);
            if (hl) {
                for (int64_t h = 0; h < g; ++h)
                    hl->dots(a.q + h * D, K + s0 * D, m, D, a.scale, z + h * S + s0);
                continue;
            }
            const float* kb = rowF(K + s0 * D, scratch, m * D);
            for (int64_t j = 0; j < m; ++j)
                for (int64_t h = 0; h < g; ++h)
                    z[h * S + s0 + j] = dot(a.q + h * D, kb + j * D, D) * a.scale;
        }
    }
    float invZ[64];
    rankScores(z, g, S, p.gqa, G, invZ);
    const int64_t kEff = std::min(p.kMax, S), lEff = std::min(p.local, kEff);
    const int64_t nRank = S - lEff;
    const bool perHead = p.gqa == GroupSelect::PerHead && g > 1;
    for (int64_t h0 = 0; h0 < g; h0 += perHead ? 1 : g) {
        const int64_t h1 = perHead ? h0 + 1 : g;
        // The unit's mass (§2.3): a head's probabilities, or the group's mean.
        const float w = 1.0f / static_cast<float>(h1 - h0);
        for (int64_t s = 0; s < S; ++s) {
            float m = 0;
            for (int64_t h = h0; h < h1; ++h)
                m += z[h * S + s] * invZ[h];
            mass[s] = m * w;
        }
        const float* rank = rankOf(z, G, g, S, p.gqa, h0);
        // The best kEff − lEff of the rest by the rank (ascending), then in rank order.
        sel.clear();
        topBySelection(rank, nRank, kEff - lEff, heapIdx, heapVal, scratch, cand, sel);
        std::sort(sel.begin(), sel.end(), [rank](int64_t x, int64_t y) {
            const float rx = std::isnan(rank[x]) ? -INFINITY : rank[x];
            const float ry = std::isnan(rank[y]) ? -INFINITY : rank[y];
            return rx > ry || (rx == ry && x < y);
        });
        // n*: the fewest positions, local window first, whose mass reaches p (§6.1).
        double cum = 0;
        for (int64_t j = nRank; j < S; ++j)
            cum += mass[j];
        int64_t count = kEff;
        if (p.p < 1) {
            int64_t np = lEff > 0 && cum >= p.p ? lEff : -1;
            for (size_t i = 0; np < 0 && i < sel.size(); ++i) {
                cum += mass[sel[i]];
                if (cum >= p.p)
                    np = lEff + static_cast<int64_t>(i) + 1;
            }
            if (np >= 0)
                count = std::min(std::max(np, std::max<int64_t>(1, lEff)), kEff);
        }
        sel.resize(static_cast<size_t>(count - lEff));
        std::sort(sel.begin(), sel.end());
        for (int64_t j = nRank; j < S; ++j)
            sel.push_back(j);
        if (p.sparq) {
            attendSelected<T>(a, sel, h0, h1, zs, yt, scratch);
            const double invS = 1.0 / static_cast<double>(S);
            for (int64_t h = h0; h < h1; ++h) {
                float al = 1.0f;
                if (p.meanValue) {
                    al = 0;
                    for (const int64_t j : sel)
                        al += z[h * S + j];
                    al *= invZ[h];
                }
                for (int64_t i = 0; i < D; ++i)
                    a.y[h * D + i] =
                        al * yt[h * D + i] + (1.0f - al) * static_cast<float>(a.vsum[i] * invS);
                if (a.alpha)
                    a.alpha[h] = al;
            }
        } else { // the exact probabilities over the selection, renormalised
            prefetchRows(K, V, sel, D);
            for (int64_t h = h0; h < h1; ++h) {
                float total = 0;
                for (const int64_t j : sel)
                    total += z[h * S + j];
                float* y = a.y + h * D;
                std::fill(y, y + D, 0.0f);
                for (const int64_t j : sel) {
                    const float* vr = rowF(V + j * D, scratch, D);
                    axpy(y, z[h * S + j] / total, vr, D);
                }
                if (a.alpha)
                    a.alpha[h] = 1.0f;
            }
        }
    }
}

} // namespace sparqlab::attention::decode
