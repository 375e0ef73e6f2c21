#pragma once
/// \file decode/kernel.h
/// What the decode engine's kernels share (decode/engine.h runs them): the interface a method
/// unit's CPU kernel implements (DecodeKernel: one (batch row, KV head) task at a time), the
/// element access of float16/bfloat16 storage, and the inline building blocks of every kernel — dot
/// products, exp, the selection of the top positions without sorting, the row trackers and the
/// prefetches. The instruction-set dispatch lives in decode/isa.cpp alone.
///
/// Included by the engine and by the units' decode*.cpp files (compiled with -O3 and without
/// the precompiled headers, see attention/CMakeLists.txt).

#include "attention/cuda/decode_cuda.h"
#include "attention/decode/engine.h"
#include "attention/method_kit.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <string>
#include <vector>

// The hand-written x86 versions use GCC's target pragmas and __builtin_cpu_supports("f16c"),
// which clang 14 lacks: clang builds (the fuzz preset) run the baseline kernels.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#include <immintrin.h>
#define SPARQLAB_X86_DISPATCH 1
#endif

// The hot kernels are compiled for AVX-512, AVX2+FMA and baseline x86-64 and picked at load
// time; the helpers they call are inlined into each version. The sanitizer builds compile the
// baseline alone (SPARQLAB_NO_CLONES: a third of the decode kernels' compile time there; the
// hand-written versions above stay, picked at run time).
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(SPARQLAB_NO_CLONES)
#define SPARQLAB_KERNEL                                                                            \
    __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define SPARQLAB_KERNEL
#endif
#define SPARQLAB_INLINE inline __attribute__((always_inline))

namespace sparqlab::attention {

namespace decode {
struct GroupArgs;
} // namespace decode

/// What one engine call (DecodeAttention::run) hands every task.
struct DecodeCall {
    const DecodeCache* cache = nullptr;
    const AttentionConfig* config = nullptr;
    int64_t B = 0, Hq = 0, H = 0, g = 0, D = 0, S = 0, cap = 0;
    int64_t kEff = 0;  ///< min(k, S)
    int64_t local = 0; ///< the local window in effect
    int64_t rEff = 0;  ///< min(r, D)
    at::ScalarType storage = at::kFloat;
    size_t es = 4;   ///< bytes per stored element
    float scale = 0; ///< the logit scale
    bool defaultScale = true;
    at::Tensor aux; ///< what the kernel's setup made for this call (null: none)
};

/// One thread's workspaces, owned by the engine (the hot loops allocate nothing).
struct DecodeScratch {
    float* work = nullptr; ///< the kernel's workFloats
    float* coef = nullptr; ///< g·D + 2·D floats after it (step 1's coefficients)
    std::vector<int64_t>* sel = nullptr;
    int64_t* heap = nullptr;     ///< max(S, D) + 16 entries
    int32_t* cand = nullptr;     ///< S + 16 entries (selecting kernels)
    const void** rows = nullptr; ///< g·D row pointers
};

/// A method unit's kernel for the decode engine (MethodSpec::decode).
struct DecodeKernel {
    /// Reads the dimension-major copy of K (a cache for it is made with dimensionMajor).
    bool dimensionMajor = false;
    /// Whether it runs `config` beyond the table's flag (e.g. group components, a calibration
    /// given). Null: always.
    bool (*supports)(const AttentionConfig& config) = nullptr;
    /// What the cache must hold beside K and V (Quest's pages, Loki's projection), set up when
    /// missing. Null: nothing.
    void (*prepareCache)(DecodeCache& cache, const AttentionConfig& config) = nullptr;
    /// The one-line reason the cache cannot serve `config` (prepareCache was not called with
    /// it); empty when it can. Null: always can.
    std::string (*cacheMissing)(const DecodeCache& cache, const AttentionConfig& config) = nullptr;
    /// Storage elements the cache holds for it beside K and V at capacity S (for memory
    /// checks before a cache is made). Null: none.
    int64_t (*cacheExtraElements)(int64_t batch, int64_t kvHeads, int64_t S, int64_t D,
                                  const AttentionConfig& config) = nullptr;
    /// Floats of workspace one task needs.
    int64_t (*workFloats)(const DecodeCall& call) = nullptr;
    /// Per call, a tensor every task reads (Double Sparsity's checked channels); the engine
    /// keeps it per (calibration, layer, r). Null: none.
    at::Tensor (*setup)(const DecodeCall& call) = nullptr;
    /// One (batch row, KV head) task: `a` holds its q, y, α and rows of the cache.
    void (*task)(const DecodeCall& call, const decode::GroupArgs& a, int64_t task,
                 DecodeScratch& s) = nullptr;
    /// On a CUDA cache: which pieces of the CUDA kernels compute it (cuda/decode_cuda.h: what
    /// step 1 scores, how step 2 selects, the mean-value term); the engine fills the shapes and
    /// the common parameters first. Null: libtorch's operations on the device (decodeOnDevice).
    void (*gpu)(const DecodeCall& call, cuda::Request& req) = nullptr;
    /// On a GPU without CUDA kernels of its own: what attend() needs beyond q, K and V to
    /// compute exactly what `task` computes from the state prepareCache made for this cache
    /// (PQCache's codebook, MagicPIG's tables, ShadowKV's landmarks and factors, RocketKV's kept
    /// set), as named inputs (AttentionInputs::extra) on the cache's device; throws
    /// AttentionError (cacheMissing's message) when the state is missing. Null: q, K and V
    /// suffice.
    std::map<std::string, at::Tensor> (*deviceInputs)(const DecodeCache& cache,
                                                      const AttentionConfig& config) = nullptr;
};

namespace decode {

using detail::fail;

/// The instruction sets of the hand-written versions (decode/isa.cpp).
enum class DecodeIsa { Baseline, Avx2, Avx512 };
/// The widest of those the kernels may use: the CPU's, capped by SPARQLAB_ISA (see
/// decodeKernelIsa()). Read once.
DecodeIsa isa();

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

/// A converter of n stored half-precision elements to float32.
using ConvertFn = void (*)(const void* src, float* dst, int64_t n);

template <typename T> void convertScalar(const void* src, float* dst, int64_t n) {
    const T* s = static_cast<const T*>(src);
    for (int64_t i = 0; i < n; ++i)
        dst[i] = toF(s[i]);
}

/// Loops over half-precision storage that convert as they load, in registers (half_loops.inc):
/// converting into a float32 buffer first costs a store and a reload of 64 bytes per 16
/// elements. At batch 4, S = 16384 SparQ over float16 or bfloat16 went from 11 to 6 ms with the
/// AVX-512 ones (step 1 converted 4 rows of 16384 elements per pass before), dense from 40 to
/// 34 ms. One set per instruction set; without AVX2 the kernels convert rows element by element.
struct HalfLoops {
    ConvertFn convert;
    /// Step 1's pass over 4 dimension-major rows: z[t] (= or +=) Σ_j c[j]·rows[j][t], t < n.
    void (*pass)(float* z, const void* const* rows, const float* c, int64_t n, bool first);
    /// out[j] = (q · row_j)·scale for the m rows of D elements at `rows`.
    void (*dots)(const float* q, const void* rows, int64_t m, int64_t D, float scale, float* out);
    /// y += Σ_j p[j]·row_j over the m rows of D elements at `rows`.
    void (*axpys)(float* y, const float* p, const void* rows, int64_t m, int64_t D);
};

/// The fused loops of this machine for float16 or bfloat16 storage, or null (no AVX2).
const HalfLoops* pickHalfLoops(bool bfloat16);
/// The fused loops for storage T on this machine, or null (float32, or no AVX2); picked once.
template <typename T> inline const HalfLoops* halfLoops() {
    if constexpr (std::is_same_v<T, float>) {
        return nullptr;
    } else {
        static const HalfLoops* picked = pickHalfLoops(std::is_same_v<T, c10::BFloat16>);
        return picked;
    }
}

/// Converts n stored half-precision elements to float32, by the loops of this machine's
/// instruction set: element by element, GCC 12 converts float16 by bit manipulation or one
/// scalar instruction each (float16 dense decode went from 56 to 40 ms at batch 4, S = 16384
/// with vector converters, in one process on the 2-core development VM).
template <typename T> ConvertFn convert() {
    const HalfLoops* h = halfLoops<T>();
    return h ? h->convert : convertScalar<T>;
}

/// n elements as float32: the storage itself for float, else converted into `scratch`.
template <typename T> SPARQLAB_INLINE const float* rowF(const T* src, float* scratch, int64_t n) {
    if constexpr (std::is_same_v<T, float>) {
        (void)scratch;
        (void)n;
        return src;
    } else {
        convert<T>()(src, scratch, n);
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

/// Takes the scores x[0, len) of positions pos … pos + len − 1 into the maxima of W strided
/// blocks: bm[j] is the max over the positions ≡ j (mod W) seen so far (start from −inf). Runs
/// of contiguous j, so that the loop vectorises; NaN never enters, the comparison being false.
SPARQLAB_INLINE void stridedMaxAdd(float* bm, int64_t W, const float* x, int64_t pos, int64_t len) {
    for (int64_t i = 0; i < len;) {
        const int64_t j0 = (pos + i) % W, run = std::min(len - i, W - j0);
        float* __restrict b = bm + j0;
        const float* __restrict y = x + i;
        for (int64_t u = 0; u < run; ++u)
            b[u] = y[u] > b[u] ? y[u] : b[u];
        i += run;
    }
}

/// The first block of 16 scores x[i, i+16) with i ≥ from, i a multiple of 16 below `end` (a
/// multiple of 16), holding a score ≥ t; `end` when none. *mask gets bit j for x[i+j] ≥ t.
using NextAtLeastFn = int64_t (*)(const float* x, int64_t from, int64_t end, float t,
                                  uint32_t* mask);

/// The version of this machine (decode/isa.cpp), picked once.
NextAtLeastFn pickNextAtLeast();
inline NextAtLeastFn nextAtLeast() {
    static const NextAtLeastFn fn = pickNextAtLeast();
    return fn;
}

/// The (k+1)-th largest of a[0, n) (0 ≤ k < n; no NaN), counting equal values apart, as
/// std::nth_element with std::greater would leave at a[k]. Quickselect whose partition is
/// free of data-dependent branches: each round copies a[] into tmp (n floats) with the values
/// > the pivot at the front and those < it at the back, both cursors written unconditionally,
/// then goes on in the part that holds k (or stops: the pivot's equals lie between). On a row
/// of random scores std::nth_element mispredicted about one comparison in two (~12 k cycles of
/// a SparQ task for its two selections). a and tmp are overwritten.
SPARQLAB_INLINE float kthLargest(float* a, int64_t n, int64_t k, float* tmp) {
    while (n > 16) {
        const float x = a[0], y = a[n / 2], z = a[n - 1];
        const float pivot = std::max(std::min(x, y), std::min(std::max(x, y), z)); // median
        int64_t gt = 0, lt = n; // tmp[0, gt) > pivot, tmp[lt, n) < pivot, the rest equal it
        for (int64_t i = 0; i < n; ++i) {
            const float v = a[i];
            tmp[gt] = v; // gt ≤ lt − 1 throughout: neither write touches the other's part
            gt += v > pivot;
            tmp[lt - 1] = v;
            lt -= v < pivot;
        }
        if (k >= gt && k < lt)
            return pivot;
        float* part = k < gt ? tmp : tmp + lt;
        if (k < gt) {
            n = gt;
        } else {
            k -= lt;
            n -= lt;
        }
        tmp = a; // the next round copies back into the buffer just read (it has room)
        a = part;
    }
    for (int64_t i = 1; i < n; ++i) // insertion sort, descending
        for (int64_t j = i; j > 0 && a[j - 1] < a[j]; --j)
            std::swap(a[j - 1], a[j]);
    return a[k];
}

/// The indices i < n with x[i] ≥ t, ascending, into idx (room for n + 16); returns how many.
/// NaN is never ≥ t. One version per instruction set, picked once: with AVX-512 each 16 scores
/// store their hits' indices compressed, with no branch on the data (a candidate pass that
/// returned to the caller at each hit paid a misprediction per candidate).
using CollectAtLeastFn = int64_t (*)(const float* x, int64_t n, float t, int32_t* idx);

/// The version of this machine (decode/isa.cpp), picked once.
CollectAtLeastFn pickCollectAtLeast();
inline CollectAtLeastFn collectAtLeast() {
    static const CollectAtLeastFn fn = pickCollectAtLeast();
    return fn;
}

/// Whether a threshold from strided block maxima pays for the `want` best of n scores (on
/// shorter rows every score is a candidate).
SPARQLAB_INLINE bool longRowPath(int64_t n, int64_t want) {
    return want > 0 && n >= 2048 && n >= 16 * want; // n ≥ 8·W with W = 2·want
}

/// The want best of score[0, n) (0 < want ≤ n) among those ≥ T: the candidates (scores ≥ T) are
/// collected in index order into `cand` (n + 16 entries), the want-th largest of their scores
/// v is selected (kthLargest, in `scratch`: 2·n floats), and every candidate > v and the first
/// of those = v (the tie rule) are appended to `out` in index order; *vOut = v. No second pass
/// over the row. False, with `out` untouched, when fewer than `want` scores are ≥ T (NaN is
/// never a candidate).
SPARQLAB_INLINE bool selectAtLeast(const float* score, int64_t n, int64_t want, float T,
                                   float* scratch, int32_t* cand, std::vector<int64_t>& out,
                                   float* vOut) {
    const int64_t nc = collectAtLeast()(score, n, T, cand);
    if (nc < want)
        return false;
    float* val = scratch;
    for (int64_t c = 0; c < nc; ++c)
        val[c] = score[cand[c]];
    const float v = kthLargest(val, nc, want - 1, scratch + nc);
    int64_t above = 0;
    for (int64_t c = 0; c < nc; ++c)
        above += score[cand[c]] > v;
    int64_t ties = want - above; // scores = v to keep, the lowest indices first
    for (int64_t c = 0; c < nc; ++c) {
        const float x = score[cand[c]];
        if (x > v || (x == v && ties-- > 0))
            out.push_back(cand[c]);
    }
    *vOut = v;
    return true;
}

/// topByScore's answer (SPARQ.md §2.3 on score[0, n)) in ascending index order, by selection
/// instead of a heap, whose sifts mispredict on random scores. On a long row a threshold T is
/// taken with at least `want` scores ≥ T (the want-th largest of the maxima of W = 2·want
/// strided blocks {j, j+W, j+2W, …}: each of those maxima is a distinct score ≥ T), so that few
/// candidates remain; on a shorter one every score is a candidate. selectAtLeast finishes; the
/// heap is left for rows where NaN leaves fewer than `want` candidates. `scratch` holds 2·n
/// floats, `cand` n + 16 indices.
SPARQLAB_INLINE void topBySelection(const float* score, int64_t n, int64_t want, int64_t* heapIdx,
                                    float* heapVal, float* scratch, int32_t* cand,
                                    std::vector<int64_t>& out) {
    auto byHeap = [&] { // the plain scan, its answer put in index order
        const size_t first = out.size();
        topByScore(score, n, want, heapIdx, heapVal, out);
        std::sort(out.begin() + static_cast<std::ptrdiff_t>(first), out.end());
    };
    if (want <= 0 || want >= n)
        return byHeap();
    float T = -std::numeric_limits<float>::infinity();
    if (longRowPath(n, want)) {
        const int64_t W = 2 * want;
        float* bm = scratch;
        std::fill(bm, bm + W, -std::numeric_limits<float>::infinity());
        stridedMaxAdd(bm, W, score, 0, n);
        T = kthLargest(bm, W, want - 1, bm + W); // (the block maxima are done with after)
    }
    float v;
    if (!selectAtLeast(score, n, want, T, scratch, cand, out, &v))
        byHeap();
}

/// What SparQ's selection needs of a row of approximate logits ẑ (one head), gathered block by
/// block while step 1 finishes the row, so that neither needs a pass over ẑ of its own:
/// - on a long row, the maxima of topBySelection's W = 2·want strided blocks over the ranked
///   positions (those below nRank), for its threshold (W = 0: none);
/// - softmax's normaliser by the online rule: the running max m and Σ exp(ẑ − m), rescaled
///   whenever m grows.
struct RowTracker {
    float* bm = nullptr; // [W]
    int64_t W = 0, nRank = 0;
    float m = -std::numeric_limits<float>::infinity();
    float sum = 0;

    void reset(float* maxima, int64_t w, int64_t n) {
        bm = maxima;
        W = w;
        nRank = n;
        m = -std::numeric_limits<float>::infinity();
        sum = 0;
        std::fill(bm, bm + W, -std::numeric_limits<float>::infinity());
    }
    /// Takes ẑ of positions pos … pos + len − 1.
    SPARQLAB_INLINE void add(const float* __restrict z, int64_t pos, int64_t len) {
        if (W > 0) // the ranked positions only: the local window is forced in, not ranked
            stridedMaxAdd(bm, W, z, pos, std::min(len, std::max<int64_t>(0, nRank - pos)));
        const float blockMax = maxOf(z, len);
        if (blockMax > m) {
            sum *= expNeg(m - blockMax); // 0 · anything while m = −inf
            m = blockMax;
        }
        float acc[16] = {};
        int64_t i = 0;
        for (; i + 16 <= len; i += 16)
            for (int j = 0; j < 16; ++j)
                acc[j] += expNeg(z[i + j] - m);
        float s = 0;
        for (; i < len; ++i)
            s += expNeg(z[i] - m);
        for (int j = 0; j < 16; ++j)
            s += acc[j];
        sum += s;
    }
};

/// Asks for the rows of K and V at the selected positions, all at once and into L2 (hint 1):
/// they lie at scattered places, and asking a few rows ahead into L1, as this did before, left
/// the gather waiting about one memory latency per row (the gather took 98 k cycles per task
/// instead of 42 k at batch 4, S = 16384, k = 128 on the 2-core development VM).
template <typename T>
SPARQLAB_INLINE void prefetchRows(const T* K, const T* V, const std::vector<int64_t>& sel,
                                  int64_t D) {
    const int64_t bytes = D * static_cast<int64_t>(sizeof(T));
    for (const T* base : {K, V})
        for (const int64_t j : sel) {
            const char* row = reinterpret_cast<const char*>(base + j * D);
            for (int64_t o = 0; o < bytes; o += 64)
                __builtin_prefetch(row + o, 0, 1);
        }
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

/// Rows of K or V that dense decode takes at a time from half-precision storage (converting
/// them, or in the fused loops): prefetching 16 rows at once slowed float16 dense from 34 to
/// 46 ms at batch 4, S = 16384 (the prefetches queue behind each other); 1 to 4 rows ran alike.
constexpr int64_t kDenseRows = 4;

/// The float32, float16 and bfloat16 versions of a selecting kernel template `fn##T`, each
/// cloned per instruction set (SPARQLAB_KERNEL), and its dispatch on the storage dtype.
#define SPARQLAB_SELECTING_KERNELS(fn, Args)                                                       \
    SPARQLAB_KERNEL void fn##F32(const GroupArgs& a, const Args& p, float* w,                      \
                                 std::vector<int64_t>& sel, int64_t* hi, int32_t* c) {             \
        fn##T<float>(a, p, w, sel, hi, c);                                                         \
    }                                                                                              \
    SPARQLAB_KERNEL void fn##F16(const GroupArgs& a, const Args& p, float* w,                      \
                                 std::vector<int64_t>& sel, int64_t* hi, int32_t* c) {             \
        fn##T<c10::Half>(a, p, w, sel, hi, c);                                                     \
    }                                                                                              \
    SPARQLAB_KERNEL void fn##BF16(const GroupArgs& a, const Args& p, float* w,                     \
                                  std::vector<int64_t>& sel, int64_t* hi, int32_t* c) {            \
        fn##T<c10::BFloat16>(a, p, w, sel, hi, c);                                                 \
    }                                                                                              \
    void fn(at::ScalarType st, const GroupArgs& a, const Args& p, float* w,                        \
            std::vector<int64_t>& sel, int64_t* hi, int32_t* c) {                                  \
        if (st == at::kFloat)                                                                      \
            fn##F32(a, p, w, sel, hi, c);                                                          \
        else if (st == at::kHalf)                                                                  \
            fn##F16(a, p, w, sel, hi, c);                                                          \
        else                                                                                       \
            fn##BF16(a, p, w, sel, hi, c);                                                         \
    }

/// Positions per pass of step 1 (SparQ, Loki, Double Sparsity, sparq-top-p).
constexpr int64_t kChunk = 16384;
constexpr size_t kRows = 4;          // dimension-major rows per pass of step 1
constexpr int64_t kBlock = 256;      // positions per RowTracker::add in step 1's last pass
constexpr int64_t kWarmBytes = 1024; // of each row of step 1's next pass, asked for ahead
// Below max ẑ − kUnderflowGap, exp(ẑ − max) (expNeg saturates at −87) is too small for float32
// to keep ẑ's order: a row whose selection reaches there is ranked on ŝ itself.
constexpr float kUnderflowGap = 80;

} // namespace decode
} // namespace sparqlab::attention
