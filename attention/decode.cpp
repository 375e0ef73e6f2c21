#include "decode.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define SPARQLAB_X86_DISPATCH 1
#endif
#include <limits>
#include <string>
#include <sys/mman.h>

// The hot kernels are compiled for AVX-512, AVX2+FMA and baseline x86-64 and picked at load
// time; the helpers they call are inlined into each version.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define SPARQLAB_KERNEL                                                                            \
    __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define SPARQLAB_KERNEL
#endif
#define SPARQLAB_INLINE inline __attribute__((always_inline))

namespace sparqlab::attention {

namespace {

[[noreturn]] void fail(const std::string& what) {
    throw AttentionError(what);
}

std::string shapeOf(const at::Tensor& t) {
    std::string s = "[";
    for (int64_t d = 0; d < t.dim(); ++d)
        s += (d ? ", " : "") + std::to_string(t.size(d));
    return s + "]";
}

// --- element access ------------------------------------------------------------------------

SPARQLAB_INLINE float toF(float x) {
    return x;
}
SPARQLAB_INLINE float toF(c10::BFloat16 x) {
    const uint32_t bits = static_cast<uint32_t>(x.x) << 16;
    float f;
    std::memcpy(&f, &bits, sizeof f);
    return f;
}
SPARQLAB_INLINE float toF(c10::Half x) {
    return c10::detail::fp16_ieee_to_fp32_value(x.x);
}

/// A row as float32: the storage itself for float, else converted into `scratch`.
template <typename T> SPARQLAB_INLINE const float* rowF(const T* src, float* scratch, int64_t n) {
    if constexpr (std::is_same_v<T, float>) {
        (void)scratch;
        (void)n;
        return src;
    } else {
        for (int64_t i = 0; i < n; ++i)
            scratch[i] = toF(src[i]);
        return scratch;
    }
}

SPARQLAB_INLINE float dot(const float* a, const float* b, int64_t n) {
    float acc[16] = {};
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        for (int j = 0; j < 16; ++j)
            acc[j] += a[i + j] * b[i + j];
    float s = 0;
    for (; i < n; ++i)
        s += a[i] * b[i];
    for (int j = 0; j < 16; ++j)
        s += acc[j];
    return s;
}

SPARQLAB_INLINE void axpy(float* y, float a, const float* x, int64_t n) {
    for (int64_t i = 0; i < n; ++i)
        y[i] += a * x[i];
}

/// exp(x) for x ≤ 0 to a few ulp (Cephes' polynomial), written so that loops vectorise: n is
/// x·log2(e) rounded to the nearest integer by adding and removing 1.5·2²³ (exact for
/// |n| < 2²²), since std::floor keeps GCC from vectorising unless traps are off.
SPARQLAB_INLINE float expNeg(float x) {
    x = std::max(x, -87.0f); // (NaN stays NaN)
    constexpr float kRound = 12582912.0f;
    const float n = (x * 1.44269504088896341f + kRound) - kRound;
    float r = x - n * 0.693359375f;
    r = r + n * 2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    const int32_t e = (static_cast<int32_t>(n) + 127) << 23;
    float scale;
    std::memcpy(&scale, &e, sizeof scale);
    return p * scale;
}

SPARQLAB_INLINE float maxOf(const float* x, int64_t n) {
    float acc[16];
    std::fill(acc, acc + 16, -std::numeric_limits<float>::infinity());
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        for (int j = 0; j < 16; ++j)
            acc[j] = acc[j] > x[i + j] ? acc[j] : x[i + j];
    float m = -std::numeric_limits<float>::infinity();
    for (; i < n; ++i)
        m = m > x[i] ? m : x[i];
    for (int j = 0; j < 16; ++j)
        m = m > acc[j] ? m : acc[j];
    return m;
}

SPARQLAB_INLINE float sumOf(const float* x, int64_t n) {
    float acc[16] = {};
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        for (int j = 0; j < 16; ++j)
            acc[j] += x[i + j];
    float s = 0;
    for (; i < n; ++i)
        s += x[i];
    for (int j = 0; j < 16; ++j)
        s += acc[j];
    return s;
}

/// x ← exp(x − max x) in place; returns Σ.
SPARQLAB_INLINE float expInPlace(float* x, int64_t n) {
    const float m = maxOf(x, n);
    for (int64_t i = 0; i < n; ++i)
        x[i] = expNeg(x[i] - m);
    return sumOf(x, n);
}

/// A min-heap of (score, index) with the worst at the root: the lower score, or for equal
/// scores the higher index (SPARQ.md §2.3 keeps the lower index).
struct WorstHeap {
    float* val;
    int64_t* idx;
    int64_t size = 0;

    SPARQLAB_INLINE bool worse(int64_t a, int64_t b) const {
        return val[a] < val[b] || (val[a] == val[b] && idx[a] > idx[b]);
    }
    SPARQLAB_INLINE void swapAt(int64_t a, int64_t b) {
        std::swap(val[a], val[b]);
        std::swap(idx[a], idx[b]);
    }
    SPARQLAB_INLINE void siftDown(int64_t i) {
        for (;;) {
            int64_t c = 2 * i + 1;
            if (c >= size)
                return;
            if (c + 1 < size && worse(c + 1, c))
                ++c;
            if (!worse(c, i))
                return;
            swapAt(c, i);
            i = c;
        }
    }
};

/// SPARQ.md §2.3 on candidates 0..n−1: the `want` best by descending score, ties to the
/// lower index (NaN ranks last), appended to `out`. A bounded heap of the current best;
/// scanning in index order, a newcomer displaces the worst only when strictly better.
SPARQLAB_INLINE void topByScore(const float* score, int64_t n, int64_t want, int64_t* heapIdx,
                                float* heapVal, std::vector<int64_t>& out) {
    if (want <= 0)
        return;
    if (want >= n) {
        for (int64_t i = 0; i < n; ++i)
            out.push_back(i);
        return;
    }
    constexpr float kNegInf = -std::numeric_limits<float>::infinity();
    WorstHeap heap{heapVal, heapIdx, want};
    for (int64_t i = 0; i < want; ++i) {
        heapVal[i] = std::isnan(score[i]) ? kNegInf : score[i];
        heapIdx[i] = i;
    }
    for (int64_t i = want / 2 - 1; i >= 0; --i)
        heap.siftDown(i);
    for (int64_t i = want; i < n; ++i)
        if (score[i] > heapVal[0]) { // NaN compares false
            heapVal[0] = score[i];
            heapIdx[0] = i;
            heap.siftDown(0);
        }
    for (int64_t i = 0; i < want; ++i)
        out.push_back(heapIdx[i]);
}

/// bm[j] = max of x[j], x[j+W], x[j+2W], … over the whole blocks of W (−inf for none); NaN
/// never enters, the comparison being false.
SPARQLAB_INLINE void stridedMax(const float* __restrict x, int64_t n, int64_t W,
                                float* __restrict bm) {
    std::fill(bm, bm + W, -std::numeric_limits<float>::infinity());
    for (int64_t t = 0; t + W <= n; t += W)
        for (int64_t j = 0; j < W; ++j)
            bm[j] = x[t + j] > bm[j] ? x[t + j] : bm[j];
}

/// The first block of 16 scores x[i, i+16) with i ≥ from, i a multiple of 16 below `end` (a
/// multiple of 16), holding a score ≥ t; `end` when none. *mask gets bit j for x[i+j] ≥ t.
/// NaN is never ≥ t. One version per instruction set, picked once.
using NextAtLeastFn = int64_t (*)(const float* x, int64_t from, int64_t end, float t,
                                  uint32_t* mask);

int64_t nextAtLeastScalar(const float* x, int64_t from, int64_t end, float t, uint32_t* mask) {
    for (int64_t i = from; i < end; i += 16) {
        uint32_t m = 0;
        for (int j = 0; j < 16; ++j)
            m |= static_cast<uint32_t>(x[i + j] >= t) << j;
        if (m != 0) {
            *mask = m;
            return i;
        }
    }
    return end;
}

#ifdef SPARQLAB_X86_DISPATCH
__attribute__((target("avx512f"))) int64_t nextAtLeastAvx512(const float* x, int64_t from,
                                                             int64_t end, float t, uint32_t* mask) {
    const __m512 tv = _mm512_set1_ps(t);
    for (int64_t i = from; i < end; i += 16) {
        const __mmask16 m = _mm512_cmp_ps_mask(_mm512_loadu_ps(x + i), tv, _CMP_GE_OQ);
        if (m != 0) {
            *mask = m;
            return i;
        }
    }
    return end;
}

__attribute__((target("avx2"))) int64_t nextAtLeastAvx2(const float* x, int64_t from, int64_t end,
                                                        float t, uint32_t* mask) {
    const __m256 tv = _mm256_set1_ps(t);
    for (int64_t i = from; i < end; i += 16) {
        const int lo = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(x + i), tv, _CMP_GE_OQ));
        const int hi =
            _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(x + i + 8), tv, _CMP_GE_OQ));
        if ((lo | hi) != 0) {
            *mask = static_cast<uint32_t>(lo) | static_cast<uint32_t>(hi) << 8;
            return i;
        }
    }
    return end;
}
#endif

NextAtLeastFn nextAtLeast() {
#ifdef SPARQLAB_X86_DISPATCH
    static const NextAtLeastFn fn = __builtin_cpu_supports("avx512f") ? nextAtLeastAvx512
                                    : __builtin_cpu_supports("avx2")  ? nextAtLeastAvx2
                                                                      : nextAtLeastScalar;
    return fn;
#else
    return nextAtLeastScalar;
#endif
}

/// topByScore for long rows: the same result from fewer comparisons, and in ascending index
/// order. A threshold T is taken with at least `want` scores ≥ T (the want-th largest of the
/// maxima of W strided blocks {j, j+W, j+2W, …}: each of those maxima is a distinct score ≥ T),
/// so every score of the answer is ≥ T. A vectorised pass copies those candidates' scores out,
/// a selection among them gives the want-th largest score v, and a second pass emits, in index
/// order, every score > v and the first of the scores = v (the tie rule). `scratch` holds
/// max(2·want, n) floats.
SPARQLAB_INLINE void topByScoreLong(const float* score, int64_t n, int64_t want, int64_t* heapIdx,
                                    float* heapVal, float* scratch, std::vector<int64_t>& out) {
    const int64_t W = 2 * want;
    auto byHeap = [&] { // the plain scan, its answer put in index order
        const size_t first = out.size();
        topByScore(score, n, want, heapIdx, heapVal, out);
        std::sort(out.begin() + static_cast<std::ptrdiff_t>(first), out.end());
    };
    if (want <= 0 || n < 2048 || n < 8 * W)
        return byHeap();
    constexpr float kNegInf = -std::numeric_limits<float>::infinity();
    float* bm = scratch;
    stridedMax(score, n, W, bm);
    for (int64_t i = (n / W) * W; i < n; ++i)
        bm[i % W] = score[i] > bm[i % W] ? score[i] : bm[i % W];
    std::nth_element(bm, bm + (want - 1), bm + W, std::greater<float>());
    const float T = bm[want - 1];
    if (!(T > kNegInf))
        return byHeap();
    const int64_t end = n & ~int64_t{15};
    const NextAtLeastFn next = nextAtLeast();
    uint32_t mask = 0;
    float* cand = scratch; // the candidates' scores, over the block maxima (done with)
    int64_t nc = 0;
    int64_t i = 0;
    while ((i = next(score, i, end, T, &mask)) < end) {
        for (; mask != 0; mask &= mask - 1)
            cand[nc++] = score[i + __builtin_ctz(mask)];
        i += 16;
    }
    for (i = end; i < n; ++i)
        if (score[i] >= T)
            cand[nc++] = score[i];
    // v: the want-th largest candidate (nc ≥ want); `above` of them are > v.
    std::nth_element(cand, cand + (want - 1), cand + nc, std::greater<float>());
    const float v = cand[want - 1];
    int64_t above = 0;
    for (int64_t j = 0; j < nc; ++j)
        above += cand[j] > v;
    int64_t ties = want - above; // scores = v to take, the lowest indices first
    auto emit = [&](int64_t j) {
        if (score[j] > v) {
            out.push_back(j);
        } else if (ties > 0) {
            out.push_back(j);
            --ties;
        }
    };
    for (i = 0; (i = next(score, i, end, v, &mask)) < end; i += 16)
        for (; mask != 0; mask &= mask - 1)
            emit(i + __builtin_ctz(mask));
    for (i = end; i < n; ++i)
        if (score[i] >= v)
            emit(i);
}

/// What one (batch row, KV head) task needs.
struct GroupArgs {
    const float* q = nullptr; // [g, D] float32
    float* y = nullptr;       // [g, D] output
    float* alpha = nullptr;   // [g] or null
    const void* k = nullptr;  // [cap, D]
    const void* kt = nullptr; // [D, cap]
    const void* v = nullptr;  // [cap, D]
    const double* vsum = nullptr;
    int64_t g = 0, D = 0, S = 0, cap = 0;
    float scale = 0;
};

/// Asks for the bytes kPrefetchAhead beyond a row of a sequential pass: one core's hardware
/// prefetcher alone leaves part of the memory bandwidth unused (dense decode at batch 4,
/// S = 16384 went from 49 to 67 GB/s with it on the 2-core development VM). Prefetching past
/// the end is harmless.
constexpr int64_t kPrefetchAhead = 4096;
SPARQLAB_INLINE void prefetchRow(const void* row, int64_t bytes) {
    const char* p = static_cast<const char*>(row) + kPrefetchAhead;
    for (int64_t o = 0; o < bytes; o += 64)
        __builtin_prefetch(p + o);
}

/// Dense attention of g heads sharing one KV head: one pass over K, one over V.
template <typename T> SPARQLAB_INLINE void denseGroupT(const GroupArgs& a, float* work) {
    const int64_t g = a.g, D = a.D, S = a.S;
    float* z = work;            // [g, S]
    float* scratch = z + g * S; // [D]
    const T* K = static_cast<const T*>(a.k);
    const T* V = static_cast<const T*>(a.v);
    const int64_t rowBytes = D * static_cast<int64_t>(sizeof(T));
    for (int64_t s = 0; s < S; ++s) {
        prefetchRow(K + s * D, rowBytes);
        const float* kr = rowF(K + s * D, scratch, D);
        for (int64_t h = 0; h < g; ++h)
            z[h * S + s] = dot(a.q + h * D, kr, D) * a.scale;
    }
    float inv[64];
    for (int64_t h = 0; h < g; ++h)
        inv[h] = 1.0f / expInPlace(z + h * S, S);
    std::fill(a.y, a.y + g * D, 0.0f);
    for (int64_t s = 0; s < S; ++s) {
        prefetchRow(V + s * D, rowBytes);
        const float* vr = rowF(V + s * D, scratch, D);
        for (int64_t h = 0; h < g; ++h)
            axpy(a.y + h * D, z[h * S + s], vr, D);
    }
    for (int64_t h = 0; h < g; ++h) {
        for (int64_t i = 0; i < D; ++i)
            a.y[h * D + i] *= inv[h];
        if (a.alpha)
            a.alpha[h] = 1.0f;
    }
}

SPARQLAB_KERNEL void denseGroupF32(const GroupArgs& a, float* w) {
    denseGroupT<float>(a, w);
}
SPARQLAB_KERNEL void denseGroupF16(const GroupArgs& a, float* w) {
    denseGroupT<c10::Half>(a, w);
}
SPARQLAB_KERNEL void denseGroupBF16(const GroupArgs& a, float* w) {
    denseGroupT<c10::BFloat16>(a, w);
}

struct SparqArgs {
    int64_t r = 0, k = 0, local = 0;
    TauMode tau = TauMode::Adaptive;
    float tauValue = 1;
    GroupSelect gqa = GroupSelect::SumProbs;
    bool meanValue = true;
    bool defaultScale = true;
};

constexpr int64_t kChunk = 16384; // positions per pass of step 1
constexpr size_t kRows = 4;       // dimension-major rows per pass of step 1

/// Workspace floats one SparQ group task needs.
int64_t sparqWorkFloats(int64_t g, int64_t D, int64_t S, int64_t k) {
    return 2 * g * S + S + std::max(k, D) + g * k + g * D + D +
           std::max({D, static_cast<int64_t>(kRows) * kChunk, S}); // rows, then candidates
}

/// SparQ Attention (SPARQ.md §3) of g heads sharing one KV head.
template <typename T>
SPARQLAB_INLINE void sparqGroupT(const GroupArgs& a, const SparqArgs& p, float* work,
                                 std::vector<int64_t>& sel, int64_t* heapIdx) {
    const int64_t g = a.g, D = a.D, S = a.S;
    float* zh = work;      // [g, S] approximate logits, then probabilities
    float* G = zh + g * S; // [S] group ranking score ([g, S] per head)
    float* heapVal = G + (p.gqa == GroupSelect::PerHead ? g : 1) * S; // [max(k, D)]
    float* zs = heapVal + std::max(p.k, D); // [g, k] exact logits over the selection
    float* yt = zs + g * p.k;               // [g, D] attention over the selection
    float* compScore = yt + g * D;          // [D]
    float* scratch = compScore + D;         // [max(D, kRows·kChunk)] converted rows
    const T* K = static_cast<const T*>(a.k);
    const T* KT = static_cast<const T*>(a.kt);
    const T* V = static_cast<const T*>(a.v);

    // Step 1 (Eq. 7): the r largest components of Σ_h |q_h|, ties to the lower index.
    const int64_t rEff = std::min(p.r, D);
    for (int64_t i = 0; i < D; ++i) {
        float s = 0;
        for (int64_t h = 0; h < g; ++h)
            s += std::abs(a.q[h * D + i]);
        compScore[i] = s;
    }
    std::vector<int64_t>& comps = sel; // components first, positions later
    comps.clear();
    topByScore(compScore, D, rEff, heapIdx, heapVal, comps);
    std::sort(comps.begin(), comps.end());

    // §3.2 temperature and §3.3 scaling, folded into the coefficients of step 1.
    float factor[64];
    for (int64_t h = 0; h < g; ++h) {
        double tau = 1;
        switch (p.tau) {
        case TauMode::Adaptive: {
            double num = 0, den = 0;
            for (const int64_t i : comps)
                num += std::abs(a.q[h * D + i]);
            for (int64_t i = 0; i < D; ++i)
                den += std::abs(a.q[h * D + i]);
            const double ratio = num > 0 ? num / (den > 0 ? den : 1.0) : 1.0;
            tau = std::sqrt(ratio * static_cast<double>(D));
            break;
        }
        case TauMode::SqrtDh:
            tau = std::sqrt(static_cast<double>(D));
            break;
        case TauMode::SqrtR:
            tau = std::sqrt(static_cast<double>(rEff));
            break;
        case TauMode::One:
            tau = 1;
            break;
        case TauMode::Fixed:
            tau = p.tauValue;
            break;
        }
        double f = 1.0 / tau;
        if (!p.defaultScale)
            f *= static_cast<double>(a.scale) * std::sqrt(static_cast<double>(D));
        factor[h] = static_cast<float>(f);
    }
    // ẑ_h = q̂_h · K̂ᵀ / τ_h from r dimension-major rows of K, kRows rows at a time so that several
    // contiguous streams are in flight and ẑ is loaded and stored once per kRows rows.
    const size_t nComps = comps.size();
    for (int64_t s0 = 0; s0 < S; s0 += kChunk) {
        const int64_t n = std::min(kChunk, S - s0);
        for (size_t b = 0; b < nComps; b += kRows) {
            const size_t m = std::min<size_t>(kRows, nComps - b);
            const float* rows[kRows];
            for (size_t j = 0; j < kRows; ++j)
                rows[j] = j < m ? rowF(KT + comps[b + j] * a.cap + s0,
                                       scratch + static_cast<int64_t>(j) * kChunk, n)
                                : rows[0];
            for (int64_t h = 0; h < g; ++h) {
                float c[kRows];
                for (size_t j = 0; j < kRows; ++j)
                    c[j] = j < m ? a.q[h * D + comps[b + j]] * factor[h] : 0.0f;
                float* z = zh + h * S + s0;
                const float *r0 = rows[0], *r1 = rows[1], *r2 = rows[2], *r3 = rows[3];
                if (b == 0) {
                    for (int64_t t = 0; t < n; ++t)
                        z[t] = c[0] * r0[t] + c[1] * r1[t] + c[2] * r2[t] + c[3] * r3[t];
                } else {
                    for (int64_t t = 0; t < n; ++t)
                        z[t] += c[0] * r0[t] + c[1] * r1[t] + c[2] * r2[t] + c[3] * r3[t];
                }
            }
        }
    }
    if (p.gqa == GroupSelect::PerHead) // rank on ẑ itself, per head
        std::copy(zh, zh + g * S, G);
    if (p.gqa == GroupSelect::SumLogits) {
        std::copy(zh, zh + S, G);
        for (int64_t h = 1; h < g; ++h)
            for (int64_t s = 0; s < S; ++s)
                G[s] += zh[h * S + s];
    }
    // ŝ_h = softmax(ẑ_h), kept unnormalised (e_h and 1/Σe_h): ranking by e_h alone is ranking
    // by ŝ_h, and α only needs the sum over the selection.
    float invZ[64];
    for (int64_t h = 0; h < g; ++h)
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
    const int64_t kEff = std::min(p.k, S);
    const int64_t lEff = std::min(p.local, kEff);
    const double invS = 1.0 / static_cast<double>(S);
    // Selection units: the whole group, or each head on its own (§2.6).
    for (int64_t h0 = 0; h0 < g; h0 += perHead ? 1 : g) {
        const int64_t h1 = perHead ? h0 + 1 : g;
        const float* rank = p.gqa == GroupSelect::PerHead                ? G + h0 * S
                            : (p.gqa == GroupSelect::SumProbs && g == 1) ? zh
                                                                         : G;
        // Step 2 (§2.7): the l_eff most recent positions, then the best of the rest.
        sel.clear();
        topByScoreLong(rank, S - lEff, kEff - lEff, heapIdx, heapVal, scratch, sel);
        for (int64_t j = S - lEff; j < S; ++j) // after every candidate: sel stays ascending
            sel.push_back(j);
        const int64_t n = static_cast<int64_t>(sel.size());

        // α (Eq. 10): the approximate mass on the selection.
        float alpha[64];
        for (int64_t h = h0; h < h1; ++h) {
            float s = 0;
            if (p.meanValue)
                for (const int64_t j : sel)
                    s += zh[h * S + j];
            alpha[h] = p.meanValue ? s * invZ[h] : 1.0f;
        }
        // Exact attention over the selection (Eq. 8): gathered rows of K, then of V.
        for (int64_t jj = 0; jj < n; ++jj) {
            if (jj + 4 < n) // the rows are scattered: ask for them ahead
                for (int64_t o = 0; o < D * static_cast<int64_t>(sizeof(T)); o += 64) {
                    __builtin_prefetch(
                        reinterpret_cast<const char*>(K + sel[static_cast<size_t>(jj + 4)] * D) +
                        o);
                    __builtin_prefetch(
                        reinterpret_cast<const char*>(V + sel[static_cast<size_t>(jj + 4)] * D) +
                        o);
                }
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

SPARQLAB_KERNEL void sparqGroupF32(const GroupArgs& a, const SparqArgs& p, float* w,
                                   std::vector<int64_t>& sel, int64_t* hi) {
    sparqGroupT<float>(a, p, w, sel, hi);
}
SPARQLAB_KERNEL void sparqGroupF16(const GroupArgs& a, const SparqArgs& p, float* w,
                                   std::vector<int64_t>& sel, int64_t* hi) {
    sparqGroupT<c10::Half>(a, p, w, sel, hi);
}
SPARQLAB_KERNEL void sparqGroupBF16(const GroupArgs& a, const SparqArgs& p, float* w,
                                    std::vector<int64_t>& sel, int64_t* hi) {
    sparqGroupT<c10::BFloat16>(a, p, w, sel, hi);
}

/// Asks for transparent huge pages on a large buffer not yet touched: a decode step streams
/// gigabytes, and with 4 KiB pages every page costs a TLB walk (Linux "madvise" mode).
void adviseHugePages(const at::Tensor& t) {
#ifdef MADV_HUGEPAGE
    constexpr uintptr_t kHuge = uintptr_t{2} << 20;
    const auto begin = reinterpret_cast<uintptr_t>(t.data_ptr());
    const uintptr_t end = begin + static_cast<uintptr_t>(t.nbytes());
    const uintptr_t a = (begin + kHuge - 1) & ~(kHuge - 1), b = end & ~(kHuge - 1);
    if (b > a)
        ::madvise(reinterpret_cast<void*>(a), b - a, MADV_HUGEPAGE); // advice only: errors ignored
#else
    (void)t;
#endif
}

void checkStorage(at::ScalarType t) {
    if (t != at::kFloat && t != at::kHalf && t != at::kBFloat16)
        fail(std::string("the decode cache stores float32, float16 or bfloat16, not ") +
             c10::toString(t));
}

// --- CUDA (or any non-CPU device): the same computation in libtorch operations -----------

at::Tensor sparqTorch(const at::Tensor& qf, const DecodeCache& c, const AttentionConfig& cfg,
                      double scale, bool defaultScale, at::Tensor* alphaOut) {
    const int64_t B = qf.size(0), Hq = qf.size(1), D = qf.size(2), H = c.kvHeads(), g = Hq / H,
                  S = c.length();
    const at::Tensor qg = qf.view({B, H, g, D});
    const at::Tensor K = c.keys().to(at::kFloat), V = c.values().to(at::kFloat);
    const at::Tensor KT = c.keysT().to(at::kFloat);
    const int64_t rEff = std::min(cfg.r, D);
    const at::Tensor comps =
        std::get<0>(at::sort(std::get<1>(at::topk(qg.abs().sum(2), rEff, -1)), -1)); // [B,H,r]
    const at::Tensor ktHat = KT.gather(2, comps.unsqueeze(-1).expand({B, H, rEff, S}));
    const at::Tensor qHat = qg.gather(-1, comps.unsqueeze(2).expand({B, H, g, rEff}));
    at::Tensor tau;
    switch (cfg.tau) {
    case TauMode::Adaptive: {
        const at::Tensor num = qHat.abs().sum(-1), den = qg.abs().sum(-1);
        const at::Tensor ratio = at::where(
            num.gt(0), num / at::where(den.gt(0), den, at::ones_like(den)), at::ones_like(num));
        tau = at::sqrt(ratio * static_cast<double>(D));
        break;
    }
    case TauMode::SqrtDh:
        tau = at::full({B, H, g}, std::sqrt(static_cast<double>(D)), qf.options());
        break;
    case TauMode::SqrtR:
        tau = at::full({B, H, g}, std::sqrt(static_cast<double>(rEff)), qf.options());
        break;
    case TauMode::One:
        tau = at::ones({B, H, g}, qf.options());
        break;
    case TauMode::Fixed:
        tau = at::full({B, H, g}, cfg.tauValue, qf.options());
        break;
    }
    at::Tensor zHat = at::matmul(qHat, ktHat) / tau.unsqueeze(-1);
    if (!defaultScale)
        zHat = zHat * (scale * std::sqrt(static_cast<double>(D)));
    const at::Tensor sHat = at::softmax(zHat, -1);
    at::Tensor G = cfg.gqa == GroupSelect::SumLogits  ? zHat.sum(2, true)
                   : cfg.gqa == GroupSelect::SumProbs ? sHat.sum(2, true)
                                                      : zHat;
    const int64_t kEff = std::min(cfg.k, S), lEff = std::min(cfg.effectiveLocal(), kEff);
    if (lEff > 0)
        G = G.narrow(-1, 0, S - lEff);
    at::Tensor idx = std::get<1>(at::topk(G, kEff - lEff, -1));
    if (lEff > 0)
        idx = at::cat({idx, at::arange(S - lEff, S, idx.options())
                                .expand({idx.size(0), idx.size(1), idx.size(2), lEff})},
                      -1);
    idx = idx.expand({B, H, g, kEff});
    const at::Tensor kSel = K.unsqueeze(2)
                                .expand({B, H, g, S, D})
                                .gather(3, idx.unsqueeze(-1).expand({B, H, g, kEff, D}));
    const at::Tensor vSel = V.unsqueeze(2)
                                .expand({B, H, g, S, D})
                                .gather(3, idx.unsqueeze(-1).expand({B, H, g, kEff, D}));
    const at::Tensor w = at::softmax(at::matmul(kSel, qg.unsqueeze(-1)).squeeze(-1) * scale, -1);
    const at::Tensor yTop = at::matmul(w.unsqueeze(-2), vSel).squeeze(-2);
    const at::Tensor alpha =
        cfg.meanValue ? sHat.gather(-1, idx).sum(-1) : at::ones({B, H, g}, qf.options());
    const at::Tensor a = alpha.unsqueeze(-1);
    const at::Tensor y = a * yTop + (1 - a) * c.meanValue().unsqueeze(2);
    if (alphaOut)
        *alphaOut = alpha.reshape({B, Hq});
    return y.reshape({B, Hq, D});
}

} // namespace

// --- DecodeCache ---------------------------------------------------------------------------

DecodeCache::DecodeCache(int64_t batch, int64_t kvHeads, int64_t headDim, int64_t capacity,
                         at::ScalarType storage, bool dimensionMajor, at::Device device)
    : m_B(batch), m_H(kvHeads), m_D(headDim), m_cap(capacity) {
    checkStorage(storage);
    if (batch < 1 || kvHeads < 1 || headDim < 1 || capacity < 1)
        fail("a decode cache needs batch, KV heads, head_dim and capacity of at least 1");
    const auto opts = at::TensorOptions().dtype(storage).device(device);
    m_k = at::empty({batch, kvHeads, capacity, headDim}, opts);
    m_v = at::empty({batch, kvHeads, capacity, headDim}, opts);
    if (dimensionMajor)
        m_kt = at::empty({batch, kvHeads, headDim, capacity}, opts);
    if (device.is_cpu())
        for (const at::Tensor* t : {&m_k, &m_v, &m_kt})
            if (t->defined())
                adviseHugePages(*t);
    m_vsum = at::zeros({batch, kvHeads, headDim}, opts.dtype(at::kDouble));
}

int64_t DecodeCache::bytesFor(int64_t batch, int64_t kvHeads, int64_t headDim, int64_t capacity,
                              at::ScalarType storage, bool dimensionMajor) {
    return batch * kvHeads * headDim * capacity * static_cast<int64_t>(c10::elementSize(storage)) *
           (dimensionMajor ? 3 : 2);
}

int64_t DecodeCache::bytes() const {
    return bytesFor(m_B, m_H, m_D, m_cap, storage(), dimensionMajor());
}

void DecodeCache::append(const at::Tensor& k, const at::Tensor& v) {
    if (k.dim() != 4 || k.size(0) != m_B || k.size(1) != m_H || k.size(3) != m_D || !v.defined() ||
        v.sizes() != k.sizes())
        fail("decode cache append: K and V must be [" + std::to_string(m_B) + ", " +
             std::to_string(m_H) + ", T, " + std::to_string(m_D) + "], got K " + shapeOf(k) +
             (v.defined() ? " and V " + shapeOf(v) : std::string()));
    const int64_t T = k.size(2);
    if (m_len + T > m_cap)
        fail("decode cache is full: " + std::to_string(m_len) + " + " + std::to_string(T) +
             " positions exceed its capacity of " + std::to_string(m_cap));
    if (!at::isfinite(k).all().item<bool>() || !at::isfinite(v).all().item<bool>())
        fail("decode cache append: K or V has non-finite entries (NaN or inf)");
    m_k.narrow(2, m_len, T).copy_(k);
    m_v.narrow(2, m_len, T).copy_(v);
    if (m_kt.defined())
        m_kt.narrow(3, m_len, T).copy_(k.transpose(2, 3));
    // The mean of what is stored (rounded to the storage dtype), as attend() would see it.
    m_vsum += m_v.narrow(2, m_len, T).to(at::kDouble).sum(2);
    m_len += T;
}

void DecodeCache::truncate(int64_t length) {
    if (length < 0 || length > m_len)
        fail("decode cache truncate: length " + std::to_string(length) + " outside 0.." +
             std::to_string(m_len));
    m_len = length;
    m_vsum = m_len ? values().to(at::kDouble).sum(2) : at::zeros_like(m_vsum);
}

at::Tensor DecodeCache::keys() const {
    return m_k.narrow(2, 0, m_len);
}
at::Tensor DecodeCache::values() const {
    return m_v.narrow(2, 0, m_len);
}
at::Tensor DecodeCache::keysT() const {
    return m_kt.defined() ? m_kt.narrow(3, 0, m_len) : at::Tensor();
}
at::Tensor DecodeCache::meanValue() const {
    return (m_vsum / static_cast<double>(std::max<int64_t>(m_len, 1))).to(at::kFloat);
}

// --- DecodeAttention -----------------------------------------------------------------------

bool decodeSupports(const AttentionConfig& c) {
    if (c.method == Method::Dense)
        return true;
    return c.method == Method::Sparq && c.components == ComponentSelect::Group;
}

at::Tensor DecodeAttention::run(const at::Tensor& q, const DecodeCache& cache,
                                const AttentionConfig& config, at::Tensor* alphaOut) {
    if (!decodeSupports(config))
        fail("the fast decode path runs dense and SparQ (group components), not '" +
             methodName(config.method) + "'");
    if (!q.defined() || q.dim() != 3 || q.size(0) != cache.batch() ||
        q.size(2) != cache.headDim() || q.size(1) % cache.kvHeads() != 0)
        fail("decode attention: q must be [" + std::to_string(cache.batch()) + ", Hq, " +
             std::to_string(cache.headDim()) + "] with Hq a multiple of " +
             std::to_string(cache.kvHeads()) + ", got " + (q.defined() ? shapeOf(q) : "none"));
    const int64_t S = cache.length();
    if (S < 1)
        fail("decode attention over an empty cache");
    const bool sparq = config.method == Method::Sparq;
    if (sparq) {
        if (config.r < 1)
            fail("r must be at least 1, got " + std::to_string(config.r));
        if (config.k < 1)
            fail("k must be at least 1, got " + std::to_string(config.k));
        if (config.effectiveLocal() < 0)
            fail("the local window l must be at least 0");
        if (config.tau == TauMode::Fixed &&
            (!std::isfinite(config.tauValue) || config.tauValue <= 0))
            fail("the temperature must be a finite positive number");
        if (!cache.dimensionMajor())
            fail("SparQ decode needs the cache's dimension-major copy of K");
    }
    const int64_t B = q.size(0), Hq = q.size(1), D = q.size(2), H = cache.kvHeads(), g = Hq / H;
    if (g > 64)
        fail("decode attention supports at most 64 query heads per KV head");
    at::Tensor qf = q.to(at::kFloat).contiguous();
    if (!at::isfinite(qf).all().item<bool>())
        throw NonFiniteInputError("q has non-finite entries (NaN or inf)");
    const bool defaultScale = !config.scale.has_value();
    if (config.scale && (!std::isfinite(*config.scale) || *config.scale <= 0))
        fail("the logit scale must be a finite positive number");
    const double scale = config.scale ? *config.scale : 1.0 / std::sqrt(static_cast<double>(D));

    if (!cache.device().is_cpu()) {
        qf = qf.to(cache.device());
        if (!sparq) {
            if (alphaOut)
                *alphaOut = at::ones({B, Hq}, qf.options());
            return denseDecodeTorch(qf, cache, config.scale);
        }
        return sparqTorch(qf, cache, config, scale, defaultScale, alphaOut);
    }

    at::Tensor y = at::empty({B, Hq, D}, qf.options());
    at::Tensor alpha = at::empty({B, Hq}, qf.options());
    const int64_t kEff = std::min(config.k, S);
    const int64_t work = sparq ? sparqWorkFloats(g, D, S, kEff) : g * S + D;
    const size_t threads = static_cast<size_t>(std::max(1, at::get_num_threads()));
    if (m_work.size() < threads) {
        m_work.resize(threads);
        m_index.resize(threads);
        m_heap.resize(threads);
    }
    for (size_t t = 0; t < threads; ++t) {
        if (static_cast<int64_t>(m_work[t].size()) < work)
            m_work[t].resize(static_cast<size_t>(work));
        m_index[t].reserve(static_cast<size_t>(std::max<int64_t>(kEff, D)));
        if (static_cast<int64_t>(m_heap[t].size()) < std::max<int64_t>(kEff, D))
            m_heap[t].resize(static_cast<size_t>(std::max<int64_t>(kEff, D)));
    }
    SparqArgs sp;
    sp.r = config.r;
    sp.k = kEff;
    sp.local = config.effectiveLocal();
    sp.tau = config.tau;
    sp.tauValue = static_cast<float>(config.tauValue);
    sp.gqa = config.gqa;
    sp.meanValue = config.meanValue;
    sp.defaultScale = defaultScale;

    const at::ScalarType st = cache.storage();
    const int64_t cap = cache.capacity();
    const size_t es = c10::elementSize(st);
    const auto* kBase = static_cast<const char*>(cache.kStorage().data_ptr());
    const auto* vBase = static_cast<const char*>(cache.vStorage().data_ptr());
    const char* ktBase =
        cache.dimensionMajor() ? static_cast<const char*>(cache.ktStorage().data_ptr()) : nullptr;
    const double* vsum = cache.vSum().data_ptr<double>();
    const float* qp = qf.data_ptr<float>();
    float* yp = y.data_ptr<float>();
    float* ap = alpha.data_ptr<float>();

    at::parallel_for(0, B * H, 1, [&](int64_t begin, int64_t end) {
        const size_t t = static_cast<size_t>(at::get_thread_num());
        float* w = m_work[t].data();
        std::vector<int64_t>& sel = m_index[t];
        int64_t* heap = m_heap[t].data();
        for (int64_t task = begin; task < end; ++task) {
            GroupArgs a;
            a.q = qp + task * g * D;
            a.y = yp + task * g * D;
            a.alpha = ap + task * g;
            const size_t off = static_cast<size_t>(task * cap * D) * es;
            a.k = kBase + off;
            a.v = vBase + off;
            a.kt = ktBase ? ktBase + off : nullptr;
            a.vsum = vsum + task * D;
            a.g = g;
            a.D = D;
            a.S = S;
            a.cap = cap;
            a.scale = static_cast<float>(scale);
            if (!sparq) {
                if (st == at::kFloat)
                    denseGroupF32(a, w);
                else if (st == at::kHalf)
                    denseGroupF16(a, w);
                else
                    denseGroupBF16(a, w);
            } else if (st == at::kFloat) {
                sparqGroupF32(a, sp, w, sel, heap);
            } else if (st == at::kHalf) {
                sparqGroupF16(a, sp, w, sel, heap);
            } else {
                sparqGroupBF16(a, sp, w, sel, heap);
            }
        }
    });
    if (alphaOut)
        *alphaOut = alpha;
    return y;
}

at::Tensor denseDecodeTorch(const at::Tensor& q, const DecodeCache& cache,
                            std::optional<double> scale) {
    const int64_t B = q.size(0), Hq = q.size(1), D = q.size(2), H = cache.kvHeads();
    const double sc = scale ? *scale : 1.0 / std::sqrt(static_cast<double>(D));
    const at::Tensor qg = q.to(at::kFloat).view({B, H, Hq / H, D});
    const at::Tensor K = cache.keys(), V = cache.values();
    const bool f32 = K.scalar_type() == at::kFloat;
    const at::Tensor z = at::matmul(qg, (f32 ? K : K.to(at::kFloat)).transpose(-1, -2)) * sc;
    const at::Tensor p = at::softmax(z, -1);
    return at::matmul(p, f32 ? V : V.to(at::kFloat)).reshape({B, Hq, D});
}

} // namespace sparqlab::attention
