#pragma once
/// \file cuda/logic.h
/// The arithmetic of the CUDA decode kernels that host and device share, written once and
/// unit-tested on the CPU (tests/cuda/test_cuda_logic.cpp): the order-preserving keys of the
/// exact top-k (SPARQ.md §2.3: descending score, ties to the lower index, NaN last), the radix
/// step that finds the k-th largest key, the merge of partial softmax states (flash-decoding),
/// how the sequence is split over blocks, Quest's page plan (METHODS.md §3.3) and the top-p
/// count (METHODS.md §6.1). docs/design/CUDA.md describes the kernels built on them.

#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define SPARQLAB_HD __host__ __device__ __forceinline__
#else
#define SPARQLAB_HD inline
#endif

namespace sparqlab::attention::cuda {

/// The bits of a float (host and device).
SPARQLAB_HD uint32_t floatBits(float x) {
#if defined(__CUDA_ARCH__)
    return __float_as_uint(x);
#else
    uint32_t u;
    std::memcpy(&u, &x, sizeof u);
    return u;
#endif
}

/// A key whose unsigned order is the order of the scores: −0 and +0 equal (they compare equal,
/// so the tie rule decides between them), −inf above nothing but NaN, NaN lowest of all (0),
/// so that NaN is never preferred to a number (topByScore's rule).
SPARQLAB_HD uint32_t orderedKey(float x) {
    if (x != x)
        return 0u;
    if (x == 0.0f)
        x = 0.0f;
    const uint32_t u = floatBits(x);
    const uint32_t k = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
    return k == 0u ? 1u : k; // (no float maps to 0, but keep NaN strictly lowest)
}

/// One ranked item, (key, index) packed so that the larger item is the better one: the higher
/// key, and for equal keys the lower index (SPARQ.md §2.3). 0 is below every real item.
SPARQLAB_HD uint64_t rankedItem(uint32_t key, uint32_t index) {
    return (static_cast<uint64_t>(key) << 32) | (0xFFFFFFFFu - index);
}
SPARQLAB_HD uint32_t itemIndex(uint64_t item) {
    return 0xFFFFFFFFu - static_cast<uint32_t>(item & 0xFFFFFFFFu);
}
SPARQLAB_HD uint32_t itemKey(uint64_t item) {
    return static_cast<uint32_t>(item >> 32);
}

/// The radix select's step: among the keys that share the prefix found so far, `countFrom` of
/// them have a digit ≥ d (a suffix sum of the histogram) and `count` have digit d. The
/// `remaining`-th largest of them (1-based) has digit d exactly when countFrom ≥ remaining >
/// countFrom − count; the search then goes on inside digit d with remaining − (countFrom − count).
SPARQLAB_HD bool digitHolds(uint32_t countFrom, uint32_t count, uint32_t remaining) {
    return countFrom >= remaining && countFrom - count < remaining;
}

/// The same step on a whole histogram (256 bins, the host's and the tests' version): the digit
/// holding the remaining-th largest, and `remaining` updated to its rank inside that digit.
inline int pickDigit(const uint32_t* hist, uint32_t& remaining) {
    uint32_t from = 0;
    for (int d = 255; d >= 0; --d) {
        from += hist[d];
        if (digitHolds(from, hist[d], remaining)) {
            remaining -= from - hist[d];
            return d;
        }
    }
    return -1; // fewer than `remaining` keys
}

/// exp2(m_old − m_new) as the rescale of a partial softmax state whose running maximum moves
/// from m_old to m_new ≥ m_old (base-2 logits); 0 for an empty state (m_old = −inf), so that
/// an empty state never turns into NaN.
SPARQLAB_HD float rescale(float mOld, float mNew) {
    return mOld == -INFINITY ? 0.0f : exp2f(mOld - mNew);
}

/// Two partial softmax states (m: the maximum base-2 logit, l: Σ 2^(z − m), o: Σ 2^(z − m)·v
/// for one component) merged into the first: the flash-decoding merge.
struct SoftmaxState {
    float m = -INFINITY, l = 0.0f;
};
SPARQLAB_HD float mergeStates(SoftmaxState& a, const SoftmaxState& b, float* scaleB) {
    const float m = a.m > b.m ? a.m : b.m;
    const float ca = rescale(a.m, m), cb = rescale(b.m, m);
    a.l = a.l * ca + b.l * cb;
    a.m = m;
    *scaleB = cb;
    return ca; // the factor for a's accumulators
}

/// How dense decode splits each (batch row, KV head)'s positions over blocks (flash-decoding,
/// CUDA.md §2.3): no split once the rows alone fill the resident blocks; otherwise the fewest
/// splits whose blocks fill the waves they take to within 85% of the best such filling (the
/// last wave of blocks counts whole), each split at least `minLen` positions.
struct SplitPlan {
    int64_t splits = 1, len = 0;
};
inline SplitPlan splitPlan(int64_t rows, int64_t S, int64_t resident, int64_t minLen = 256) {
    SplitPlan p;
    int64_t want = 1;
    if (rows < resident) {
        const int64_t most = (S + minLen - 1) / minLen;
        auto filling = [&](int64_t s) {
            const int64_t blocks = rows * s, waves = (blocks + resident - 1) / resident;
            return static_cast<double>(blocks) / static_cast<double>(waves * resident);
        };
        double best = 0;
        for (int64_t s = 1; s <= most && s <= 1024; ++s)
            best = filling(s) > best ? filling(s) : best;
        for (int64_t s = 1; s <= most && s <= 1024; ++s)
            if (filling(s) >= 0.85 * best) {
                want = s;
                break;
            }
    }
    p.len = (S + want - 1) / want;
    p.splits = (S + p.len - 1) / p.len;
    return p;
}

/// Step 2's attention splits for `blocks` select blocks (units) on `sms` multiprocessors, each
/// attending up to `attended` rows: one split where the units fill the device or attend few rows;
/// else as many as fill it, each keeping at least kSplitRows rows, at most `most`.
constexpr int64_t kSplitRows = 128;
inline int selectSplitsFor(int64_t blocks, int64_t sms, int64_t attended, int most) {
    if (blocks <= 0 || blocks >= sms || most <= 1)
        return 1;
    int64_t n = sms / blocks;
    n = n < attended / kSplitRows ? n : attended / kSplitRows;
    n = n < most ? n : most;
    return n > 1 ? static_cast<int>(n) : 1;
}

/// Quest's pages for one step (METHODS.md §3.3), as the CPU kernel takes them: ⌈S/P⌉ pages,
/// the forced ones f0 … pages − 1 (those holding the m = max(1, l_eff) most recent positions),
/// np pages in all (⌈k/P⌉, at least the forced ones, at most all), `want` of them ranked.
struct PagePlan {
    int64_t pages = 0, f0 = 0, np = 0, want = 0;
};
inline PagePlan pagePlan(int64_t S, int64_t P, int64_t k, int64_t local) {
    PagePlan p;
    const int64_t kEff = k < S ? k : S;
    const int64_t lEff = local < kEff ? local : kEff;
    const int64_t m = lEff > 1 ? lEff : 1;
    p.pages = (S + P - 1) / P;
    p.f0 = (S - m) / P;
    const int64_t need = (k + P - 1) / P, forced = p.pages - p.f0;
    p.np = need > forced ? need : forced;
    p.np = p.np < p.pages ? p.np : p.pages;
    p.want = p.np - forced;
    return p;
}

/// The top-p count (METHODS.md §6.1): np the fewest positions (the local window first) whose
/// mass reaches p, −1 when even all kEff − lEff ranked ones do not, clamped to [max(1, lEff),
/// kEff].
SPARQLAB_HD int64_t topPCount(int64_t np, int64_t lEff, int64_t kEff) {
    if (np < 0)
        return kEff;
    const int64_t lo = lEff > 1 ? lEff : 1;
    const int64_t c = np > lo ? np : lo;
    return c < kEff ? c : kEff;
}

/// The lanes that share one row of D stored elements (8 elements, 16 or 32 bytes, each): the
/// power of two ≥ D/8 (D a multiple of 8, at most 256); 0 when the kernels do not take D.
inline int lanesPerRow(int64_t D) {
    if (D < 8 || D > 256 || D % 8 != 0)
        return 0;
    int l = 8; // at least 8 lanes: D ≤ 64 share one shape
    while (l * 8 < D)
        l *= 2;
    return l;
}

/// Threads that rank one of D components together in step 1's prologue (score.cuh), each over
/// every P-th key, summed by shuffles: the most, a power of two up to 8, with which `threads`
/// threads rank every component at once (1 where D > threads / 2). 128 components at 256
/// threads: 2, a loop of 64 comparisons where it was 128.
SPARQLAB_HD int rankThreadsPerComponent(int64_t D, int threads) {
    int p = 1;
    while (p < 8 && 2 * p * D <= threads)
        p *= 2;
    return p;
}

/// The paths of step 2's selection the select kernel notes (SPARQLAB_NOTE_PATH, cuda/internal.h),
/// one name each for the kernel and the emulated test that counts them: the threshold from the
/// group maxima in two stages or in one, too few candidates through them (the whole row
/// then), the few candidates ranked in one pass, the exact select over the whole row.
namespace notedPath {
inline constexpr char kTwoStages[] = "select: group maxima, two stages";
inline constexpr char kOneStage[] = "select: group maxima, one stage";
inline constexpr char kTooFew[] = "select: group maxima too few candidates";
inline constexpr char kOnePass[] = "select: few candidates ranked in one pass";
inline constexpr char kWholeRow[] = "select: the whole row";
} // namespace notedPath

} // namespace sparqlab::attention::cuda
