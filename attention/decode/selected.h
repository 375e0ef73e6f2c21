#pragma once
/// \file decode/selected.h
/// Decode kernels several method units share: SparQ's step-1 setup (its components and
/// temperature, for sparq and sparq-top-p), exact attention over a selected set, the GQA
/// ranking, step 1 over r dimension-major rows (Loki, Double Sparsity) and the top-p budget
/// (oracle-top-p, sparq-top-p); the last two are compiled once, in decode/selected.cpp.

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

/// The second half of attention over the positions `sel`: heads h0..h1's logits zs[h·|sel| + j]
/// turned into their softmax over the selection (in place) and yt[h] = Σ_j p_j·V_sel[j].
/// scratch holds D floats.
template <typename T>
SPARQLAB_INLINE void softmaxValues(const GroupArgs& a, const std::vector<int64_t>& sel, int64_t h0,
                                   int64_t h1, float* zs, float* yt, float* scratch) {
    const int64_t D = a.D, n = static_cast<int64_t>(sel.size());
    const T* V = static_cast<const T*>(a.v);
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
    softmaxValues<T>(a, sel, h0, h1, zs, yt, scratch);
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

// The kernels several units share, compiled once (decode/selected.cpp).

/// Loki's and Double Sparsity's kernel of one task over `a` (its rows and coefficients set).
void lowRankGroup(at::ScalarType storage, const GroupArgs& a, const LowRankArgs& p, float* work,
                  std::vector<int64_t>& sel, int64_t* heap, int32_t* cand);
/// Their workspace and arguments for one call (the rows and coefficients: the task's own).
int64_t lowRankWork(const DecodeCall& c);
LowRankArgs lowRankArgs(const DecodeCall& c, DecodeScratch& s);
/// The top-p budgets' kernel of one task.
void topPGroup(at::ScalarType storage, const GroupArgs& a, const TopPArgs& p, float* work,
               std::vector<int64_t>& sel, int64_t* heap, int32_t* cand);
int64_t topPWork(const DecodeCall& c);
TopPArgs topPArgs(const DecodeCall& c);
/// SparQ's and sparq-top-p's: group components only.
bool groupComponents(const AttentionConfig& c);

} // namespace sparqlab::attention::decode
