// The decode kernels several method units share (decode/selected.h): Loki's and Double
// Sparsity's step 1 over dimension-major rows, the top-p budgets; each compiled once, per storage
// dtype and instruction set.

#include "attention/decode/selected.h"

namespace sparqlab::attention::decode {

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

SPARQLAB_SELECTING_KERNELS(lowRankGroup, LowRankArgs)
SPARQLAB_SELECTING_KERNELS(topPGroup, TopPArgs)

int64_t lowRankWork(const DecodeCall& c) {
    return lowRankWorkFloats(c.g, c.D, c.S, c.kEff);
}

LowRankArgs lowRankArgs(const DecodeCall& c, DecodeScratch& s) {
    LowRankArgs lr;
    lr.k = c.kEff;
    lr.local = c.local;
    lr.nRows = c.rEff;
    lr.gqa = c.config->gqa;
    lr.rows = s.rows;
    lr.coef = s.coef;
    return lr;
}

int64_t topPWork(const DecodeCall& c) {
    return topPWorkFloats(c.g, c.D, c.S);
}

TopPArgs topPArgs(const DecodeCall& c) {
    TopPArgs tp;
    tp.p = c.config->p;
    tp.kMax = c.kEff;
    tp.local = c.local;
    tp.gqa = c.config->gqa;
    tp.meanValue = c.config->meanValue;
    return tp;
}

bool groupComponents(const AttentionConfig& c) {
    return c.components == ComponentSelect::Group;
}

} // namespace sparqlab::attention::decode
