#include "decode.h"

#include "detail.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
// The hand-written x86 versions use GCC's target pragmas and __builtin_cpu_supports("f16c"),
// which clang 14 lacks: clang builds (the fuzz preset) run the baseline kernels.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
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

/// The instruction sets of the hand-written versions below.
enum class DecodeIsa { Baseline, Avx2, Avx512 };

/// The widest of those the kernels may use: the CPU's, capped by SPARQLAB_ISA (see
/// decodeKernelIsa()). Read once.
DecodeIsa pickIsa() {
#ifdef SPARQLAB_X86_DISPATCH
    DecodeIsa isa = DecodeIsa::Baseline;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
        __builtin_cpu_supports("f16c"))
        isa = __builtin_cpu_supports("avx512f") ? DecodeIsa::Avx512 : DecodeIsa::Avx2;
    const char* cap = std::getenv("SPARQLAB_ISA");
    const std::string c = cap ? cap : "";
    if (c == "avx2" && isa == DecodeIsa::Avx512)
        isa = DecodeIsa::Avx2;
    else if (c == "baseline")
        isa = DecodeIsa::Baseline;
    return isa;
#else
    return DecodeIsa::Baseline;
#endif
}

DecodeIsa isa() {
    static const DecodeIsa v = pickIsa();
    return v;
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

#ifdef SPARQLAB_X86_DISPATCH
// F16C converts exactly, subnormals included (MXCSR's DAZ does not apply to it); bfloat16 is
// float32's upper half: widen and shift.
#pragma GCC push_options
#pragma GCC target("avx512f,avx2,fma,f16c")
namespace avx512 {
// The zero-masked forms with every lane set: GCC 12's unmasked ones start from an undefined
// register and warn (-Wmaybe-uninitialized, GCC bug 105593).
constexpr __mmask16 kAll = 0xFFFF;
using R = __m512;
constexpr int64_t kLanes = 16;
SPARQLAB_INLINE R loadF(const float* p) {
    return _mm512_loadu_ps(p);
}
SPARQLAB_INLINE void storeF(float* p, R v) {
    _mm512_storeu_ps(p, v);
}
SPARQLAB_INLINE R lanes(const c10::Half* p) {
    return _mm512_maskz_cvtph_ps(kAll, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
SPARQLAB_INLINE R lanes(const c10::BFloat16* p) {
    const __m512i w =
        _mm512_maskz_cvtepu16_epi32(kAll, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    return _mm512_castsi512_ps(_mm512_maskz_slli_epi32(kAll, w, 16));
}
SPARQLAB_INLINE R set1(float x) {
    return _mm512_set1_ps(x);
}
SPARQLAB_INLINE R zero() {
    return _mm512_setzero_ps();
}
SPARQLAB_INLINE R add(R a, R b) {
    return _mm512_add_ps(a, b);
}
SPARQLAB_INLINE R mul(R a, R b) {
    return _mm512_mul_ps(a, b);
}
SPARQLAB_INLINE R fmadd(R a, R b, R c) {
    return _mm512_fmadd_ps(a, b, c);
}
/// (_mm512_reduce_add_ps trips GCC bug 105593 as well.)
SPARQLAB_INLINE float sum(R v) {
    v = _mm512_add_ps(v, _mm512_maskz_shuffle_f32x4(kAll, v, v, 0x4E)); // 256-bit halves
    v = _mm512_add_ps(v, _mm512_maskz_shuffle_f32x4(kAll, v, v, 0xB1)); // 128-bit quarters
    v = _mm512_add_ps(v, _mm512_maskz_shuffle_ps(kAll, v, v, 0x4E));    // 64-bit pairs
    v = _mm512_add_ps(v, _mm512_maskz_shuffle_ps(kAll, v, v, 0xB1));    // neighbours
    return _mm512_cvtss_f32(v);
}
#include "half_loops.inc"
} // namespace avx512
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
namespace avx2 {
using R = __m256;
constexpr int64_t kLanes = 8;
SPARQLAB_INLINE R loadF(const float* p) {
    return _mm256_loadu_ps(p);
}
SPARQLAB_INLINE void storeF(float* p, R v) {
    _mm256_storeu_ps(p, v);
}
SPARQLAB_INLINE R lanes(const c10::Half* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
SPARQLAB_INLINE R lanes(const c10::BFloat16* p) {
    const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
}
SPARQLAB_INLINE R set1(float x) {
    return _mm256_set1_ps(x);
}
SPARQLAB_INLINE R zero() {
    return _mm256_setzero_ps();
}
SPARQLAB_INLINE R add(R a, R b) {
    return _mm256_add_ps(a, b);
}
SPARQLAB_INLINE R mul(R a, R b) {
    return _mm256_mul_ps(a, b);
}
SPARQLAB_INLINE R fmadd(R a, R b, R c) {
    return _mm256_fmadd_ps(a, b, c);
}
SPARQLAB_INLINE float sum(R v) {
    __m128 x = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    x = _mm_add_ps(x, _mm_movehl_ps(x, x));
    x = _mm_add_ss(x, _mm_shuffle_ps(x, x, 0x55));
    return _mm_cvtss_f32(x);
}
#include "half_loops.inc"
} // namespace avx2
#pragma GCC pop_options
#endif

/// The fused loops for storage T on this machine, or null (float32, or no AVX2).
template <typename T> const HalfLoops* halfLoops() {
#ifdef SPARQLAB_X86_DISPATCH
    if constexpr (!std::is_same_v<T, float>) {
        static const HalfLoops wide{avx512::convert<T>, avx512::pass<T>, avx512::dots<T>,
                                    avx512::axpys<T>};
        static const HalfLoops narrow{avx2::convert<T>, avx2::pass<T>, avx2::dots<T>,
                                      avx2::axpys<T>};
        static const HalfLoops* picked = isa() == DecodeIsa::Avx512 ? &wide
                                         : isa() == DecodeIsa::Avx2 ? &narrow
                                                                    : nullptr;
        return picked;
    }
#endif
    return nullptr;
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
    static const NextAtLeastFn fn = isa() == DecodeIsa::Avx512 ? nextAtLeastAvx512
                                    : isa() == DecodeIsa::Avx2 ? nextAtLeastAvx2
                                                               : nextAtLeastScalar;
    return fn;
#else
    return nextAtLeastScalar;
#endif
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

int64_t collectAtLeastGeneric(const float* x, int64_t n, float t, int32_t* idx) {
    const int64_t end = n & ~int64_t{15};
    const NextAtLeastFn next = nextAtLeast();
    uint32_t mask = 0;
    int64_t c = 0, i = 0;
    while ((i = next(x, i, end, t, &mask)) < end) {
        for (; mask != 0; mask &= mask - 1)
            idx[c++] = static_cast<int32_t>(i + __builtin_ctz(mask));
        i += 16;
    }
    for (i = end; i < n; ++i)
        if (x[i] >= t)
            idx[c++] = static_cast<int32_t>(i);
    return c;
}

#ifdef SPARQLAB_X86_DISPATCH
__attribute__((target("avx512f,popcnt"))) int64_t collectAtLeastAvx512(const float* x, int64_t n,
                                                                       float t, int32_t* idx) {
    const __m512 tv = _mm512_set1_ps(t);
    const __m512i step = _mm512_set1_epi32(16);
    __m512i iv = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    int64_t c = 0, i = 0;
    for (; i + 16 <= n; i += 16) {
        const __mmask16 m = _mm512_cmp_ps_mask(_mm512_loadu_ps(x + i), tv, _CMP_GE_OQ);
        _mm512_storeu_si512(idx + c, _mm512_maskz_compress_epi32(m, iv));
        c += __builtin_popcount(m);
        iv = _mm512_add_epi32(iv, step);
    }
    for (; i < n; ++i)
        if (x[i] >= t)
            idx[c++] = static_cast<int32_t>(i);
    return c;
}
#endif

CollectAtLeastFn collectAtLeast() {
#ifdef SPARQLAB_X86_DISPATCH
    static const CollectAtLeastFn fn =
        isa() == DecodeIsa::Avx512 ? collectAtLeastAvx512 : collectAtLeastGeneric;
    return fn;
#else
    return collectAtLeastGeneric;
#endif
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

/// Workspace floats one dense group task needs.
int64_t denseWorkFloats(int64_t g, int64_t D, int64_t S) {
    return g * S + kDenseRows * D;
}

/// Dense attention of g heads sharing one KV head: one pass over K, one over V.
template <typename T> SPARQLAB_INLINE void denseGroupT(const GroupArgs& a, float* work) {
    const int64_t g = a.g, D = a.D, S = a.S;
    float* z = work;            // [g, S]
    float* scratch = z + g * S; // [kDenseRows, D]
    const T* K = static_cast<const T*>(a.k);
    const T* V = static_cast<const T*>(a.v);
    const int64_t rowBytes = D * static_cast<int64_t>(sizeof(T));
    const HalfLoops* hl = halfLoops<T>();
    for (int64_t s0 = 0; s0 < S; s0 += kDenseRows) {
        const int64_t m = std::min(kDenseRows, S - s0);
        if (hl) {
            for (int64_t j = 0; j < m; ++j)
                prefetchRow(K + (s0 + j) * D, rowBytes);
            for (int64_t h = 0; h < g; ++h)
                hl->dots(a.q + h * D, K + s0 * D, m, D, a.scale, z + h * S + s0);
            continue;
        }
        const float* kb = rowF(K + s0 * D, scratch, m * D);
        for (int64_t j = 0; j < m; ++j) {
            prefetchRow(K + (s0 + j) * D, rowBytes);
            for (int64_t h = 0; h < g; ++h)
                z[h * S + s0 + j] = dot(a.q + h * D, kb + j * D, D) * a.scale;
        }
    }
    float inv[64];
    for (int64_t h = 0; h < g; ++h)
        inv[h] = 1.0f / expInPlace(z + h * S, S);
    std::fill(a.y, a.y + g * D, 0.0f);
    for (int64_t s0 = 0; s0 < S; s0 += kDenseRows) {
        const int64_t m = std::min(kDenseRows, S - s0);
        if (hl) {
            for (int64_t j = 0; j < m; ++j)
                prefetchRow(V + (s0 + j) * D, rowBytes);
            for (int64_t h = 0; h < g; ++h)
                hl->axpys(a.y + h * D, z + h * S + s0, V + s0 * D, m, D);
            continue;
        }
        const float* vb = rowF(V + s0 * D, scratch, m * D);
        for (int64_t j = 0; j < m; ++j) {
            prefetchRow(V + (s0 + j) * D, rowBytes);
            for (int64_t h = 0; h < g; ++h)
                axpy(a.y + h * D, z[h * S + s0 + j], vb + j * D, D);
        }
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

struct SparqArgs {
    int64_t r = 0, k = 0, local = 0;
    TauMode tau = TauMode::Adaptive;
    float tauValue = 1;
    GroupSelect gqa = GroupSelect::SumProbs;
    bool meanValue = true;
    bool defaultScale = true;
};

constexpr int64_t kChunk = 16384;    // positions per pass of step 1
constexpr size_t kRows = 4;          // dimension-major rows per pass of step 1
constexpr int64_t kBlock = 256;      // positions per RowTracker::add in step 1's last pass
constexpr int64_t kWarmBytes = 1024; // of each row of step 1's next pass, asked for ahead
// Below max ẑ − kUnderflowGap, exp(ẑ − max) (expNeg saturates at −87) is too small for float32
// to keep ẑ's order: a row whose selection reaches there is ranked on ŝ itself.
constexpr float kUnderflowGap = 80;

/// Workspace floats one SparQ group task needs.
int64_t sparqWorkFloats(int64_t g, int64_t D, int64_t S, int64_t k) {
    return 2 * g * S + S + std::max(k, D) + g * k + g * D + D +
           std::max({D, static_cast<int64_t>(kRows) * kChunk, 2 * S}); // rows, then selection
}

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
        double tau = 1;
        switch (tauMode) {
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
            tau = tauValue;
            break;
        }
        double f = 1.0 / tau;
        if (!defaultScale)
            f *= static_cast<double>(a.scale) * std::sqrt(static_cast<double>(D));
        factor[h] = static_cast<float>(f);
    }
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

int64_t lowRankWorkFloats(int64_t g, int64_t D, int64_t S, int64_t k) {
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

SPARQLAB_SELECTING_KERNELS(lowRankGroup, LowRankArgs)

/// Quest (METHODS.md §3) of g heads sharing one KV head, from each page's min and max key.
struct QuestArgs {
    int64_t k = 0, local = 0, pageSize = 16;
    GroupSelect gqa = GroupSelect::SumProbs;
    const void* pmin = nullptr; ///< [pages, D] of this task
    const void* pmax = nullptr;
};

int64_t questWorkFloats(int64_t g, int64_t D, int64_t S, int64_t P) {
    const int64_t pages = (S + P - 1) / P;
    return 2 * g * pages + std::max(pages, D) + g * S + g * D + 2 * g * D +
           std::max(2 * D, 2 * pages);
}

template <typename T>
SPARQLAB_INLINE void questGroupT(const GroupArgs& a, const QuestArgs& p, float* work,
                                 std::vector<int64_t>& sel, int64_t* heapIdx, int32_t* cand) {
    const int64_t g = a.g, D = a.D, S = a.S, P = p.pageSize;
    const int64_t pages = (S + P - 1) / P;
    float* U = work;                // [g, pages]
    float* G = U + g * pages;       // [g, pages]
    float* heapVal = G + g * pages; // [max(pages, D)]
    float* zs = heapVal + std::max(pages, D);
    const int64_t kEff = std::min(p.k, S), lEff = std::min(p.local, kEff);
    const int64_t m = std::max<int64_t>(1, lEff);
    const int64_t f0 = (S - m) / P; // forced pages f0 … pages − 1
    const int64_t np = std::min(std::max((p.k + P - 1) / P, pages - f0), pages);
    float* yt = zs + g * S;
    float* qPos = yt + g * D;   // [g, D] max(q, 0)
    float* qNeg = qPos + g * D; // [g, D] min(q, 0)
    float* scratch = qNeg + g * D;
    const T* pmin = static_cast<const T*>(p.pmin);
    const T* pmax = static_cast<const T*>(p.pmax);
    // U_h[π] = scale·Σ_d max(q_d·m[π,d], q_d·M[π,d]) = scale·(max(q,0)·M + min(q,0)·m): each
    // page's two rows read once for the g heads, the streams asked for ahead as dense does.
    for (int64_t i = 0; i < g * D; ++i) {
        qPos[i] = a.q[i] > 0 ? a.q[i] : 0.0f;
        qNeg[i] = a.q[i] < 0 ? a.q[i] : 0.0f;
    }
    const int64_t rowBytes = D * static_cast<int64_t>(sizeof(T));
    for (int64_t pi = 0; pi < pages; ++pi) {
        prefetchRow(pmax + pi * D, rowBytes);
        prefetchRow(pmin + pi * D, rowBytes);
        const float* hi = rowF(pmax + pi * D, scratch, D);
        const float* lo = rowF(pmin + pi * D, scratch + D, D);
        for (int64_t h = 0; h < g; ++h)
            U[h * pages + pi] = (dot(qPos + h * D, hi, D) + dot(qNeg + h * D, lo, D)) * a.scale;
    }
    float invZ[64];
    rankScores(U, g, pages, p.gqa, G, invZ);
    const bool perHead = p.gqa == GroupSelect::PerHead && g > 1;
    for (int64_t h0 = 0; h0 < g; h0 += perHead ? 1 : g) {
        const int64_t h1 = perHead ? h0 + 1 : g;
        // The best np − (pages − f0) of the pages before f0, then the forced ones.
        sel.clear();
        topBySelection(rankOf(U, G, g, pages, p.gqa, h0), f0, np - (pages - f0), heapIdx, heapVal,
                       scratch, cand, sel);
        // The chosen pages (ascending) into cand, then their positions into sel.
        int64_t nChosen = 0;
        for (const int64_t pi : sel)
            cand[nChosen++] = static_cast<int32_t>(pi);
        for (int64_t pi = f0; pi < pages; ++pi)
            cand[nChosen++] = static_cast<int32_t>(pi);
        sel.clear();
        for (int64_t c = 0; c < nChosen; ++c)
            for (int64_t j = cand[c] * P; j < std::min(S, (cand[c] + 1) * P); ++j)
                sel.push_back(j);
        attendSelected<T>(a, sel, h0, h1, zs, yt, scratch);
        outputSelected(a, yt, h0, h1);
    }
}

SPARQLAB_SELECTING_KERNELS(questGroup, QuestArgs)

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

int64_t topPWorkFloats(int64_t g, int64_t D, int64_t S) {
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

SPARQLAB_SELECTING_KERNELS(topPGroup, TopPArgs)

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
    int64_t extra = 0; // Quest's pages, Loki's projected keys
    for (const at::Tensor* t : {&m_pmin, &m_pmax, &m_kp})
        if (t->defined())
            extra += static_cast<int64_t>(t->nbytes());
    return bytesFor(m_B, m_H, m_D, m_cap, storage(), dimensionMajor()) + extra;
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
    if (m_pageSize > 0)
        updatePages(m_len - T, m_len);
    if (m_basis.defined())
        project(m_len - T, m_len);
}

void DecodeCache::truncate(int64_t length) {
    if (length < 0 || length > m_len)
        fail("decode cache truncate: length " + std::to_string(length) + " outside 0.." +
             std::to_string(m_len));
    m_len = length;
    m_vsum = m_len ? values().to(at::kDouble).sum(2) : at::zeros_like(m_vsum);
    if (m_pageSize > 0 && m_len % m_pageSize != 0) // the last page lost positions
        updatePages(m_len - m_len % m_pageSize, m_len);
}

void DecodeCache::dropExtras() {
    m_pageSize = 0;
    m_pmin = m_pmax = m_basis = m_kp = at::Tensor();
    m_tag = {nullptr, 0};
}

void DecodeCache::enablePages(int64_t pageSize) {
    if (pageSize < 1)
        fail("the page size must be at least 1, got " + std::to_string(pageSize));
    if (pageSize == m_pageSize)
        return;
    m_pageSize = pageSize;
    const int64_t pages = (m_cap + pageSize - 1) / pageSize;
    m_pmin = at::zeros({m_B, m_H, pages, m_D}, m_k.options());
    m_pmax = at::zeros({m_B, m_H, pages, m_D}, m_k.options());
    if (m_len > 0)
        updatePages(0, m_len);
}

void DecodeCache::updatePages(int64_t from, int64_t to) {
    // Every page holding a position of [from, to), from its stored (rounded) keys; min and max
    // of stored values are stored values, so the bounds are exact in any storage dtype.
    const int64_t P = m_pageSize, p0 = from / P, full = to / P, p1 = (to + P - 1) / P;
    if (full > p0) {
        const at::Tensor k = m_k.narrow(2, p0 * P, (full - p0) * P)
                                 .to(at::kFloat)
                                 .view({m_B, m_H, full - p0, P, m_D});
        m_pmin.narrow(2, p0, full - p0).copy_(k.amin(3));
        m_pmax.narrow(2, p0, full - p0).copy_(k.amax(3));
    }
    if (p1 > full && p1 - 1 >= p0) { // the last page, partly filled
        const at::Tensor k = m_k.narrow(2, full * P, to - full * P).to(at::kFloat);
        m_pmin.select(2, full).copy_(k.amin(2));
        m_pmax.select(2, full).copy_(k.amax(2));
    }
}

ProjectionTag projectionTagOf(const AttentionConfig& c) {
    return {c.calibration ? c.calibration->basis.unsafeGetTensorImpl() : nullptr, c.layer};
}

void DecodeCache::setProjection(const at::Tensor& basis, ProjectionTag tag) {
    m_tag = tag;
    if (!basis.defined() || basis.dim() != 3 || basis.size(0) != m_H || basis.size(1) != m_D ||
        basis.size(2) != m_D)
        fail("decode cache projection: the basis must be [" + std::to_string(m_H) + ", " +
             std::to_string(m_D) + ", " + std::to_string(m_D) + "], got " +
             (basis.defined() ? shapeOf(basis) : std::string("none")));
    m_basis = basis.to(at::kFloat).to(m_k.device()).contiguous();
    if (!m_kp.defined())
        m_kp = at::empty({m_B, m_H, m_D, m_cap}, m_k.options());
    if (m_len > 0)
        project(0, m_len);
}

void DecodeCache::project(int64_t from, int64_t to) {
    // K_j·P in float32 from the stored keys, rounded once to the storage dtype.
    const at::Tensor kp = at::matmul(m_k.narrow(2, from, to - from).to(at::kFloat),
                                     m_basis.unsqueeze(0)); // [B, H, n, D]
    m_kp.narrow(3, from, to - from).copy_(kp.transpose(2, 3));
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

const char* decodeKernelIsa() {
    switch (isa()) {
    case DecodeIsa::Avx512:
        return "avx512";
    case DecodeIsa::Avx2:
        return "avx2";
    case DecodeIsa::Baseline:
        break;
    }
    return "baseline";
}

bool decodeSupports(const AttentionConfig& c) {
    if (c.softcap > 0 || c.slidingWindow > 0) // soft-capped or windowed layers go through attend()
        return false;
    if (!methodInfo(c.method).fastDecode)
        return false;
    switch (c.method) {
    case Method::Sparq:
    case Method::SparqTopP:
        return c.components == ComponentSelect::Group;
    case Method::Loki:
        return c.calibration && c.calibration->basis.defined();
    case Method::DoubleSparsity:
        return c.calibration && c.calibration->channels.defined();
    default:
        return true;
    }
}

bool decodeNeedsDimensionMajor(const AttentionConfig& c) {
    return c.method == Method::Sparq || c.method == Method::SparqTopP ||
           c.method == Method::DoubleSparsity;
}

void prepareDecodeCache(DecodeCache& cache, const AttentionConfig& c) {
    if (c.method == Method::Quest && (c.pageSize < 1 || cache.pageSize() != c.pageSize))
        cache.enablePages(c.pageSize);
    if (c.method == Method::Loki &&
        (!cache.projectionBasis().defined() || cache.projectionTag() != projectionTagOf(c)))
        cache.setProjection(detail::lokiLayerBasis(c, cache.kvHeads(), cache.headDim()),
                            projectionTagOf(c));
}

at::Tensor DecodeAttention::channelsFor(const AttentionConfig& c, int64_t Hq, int64_t D) {
    for (const Channels& ch : m_channels)
        if (ch.calibration == c.calibration && ch.layer == c.layer && ch.r == c.r &&
            ch.heads == Hq && ch.headDim == D)
            return ch.first;
    Channels ch{c.calibration, c.layer, c.r, Hq, D, detail::dsLayerChannels(c, Hq, D)};
    m_channels.push_back(ch); // one per layer of a model
    return ch.first;
}

at::Tensor DecodeAttention::run(const at::Tensor& q, const DecodeCache& cache,
                                const AttentionConfig& config, at::Tensor* alphaOut) {
    const Method method = config.method;
    if (!decodeSupports(config))
        fail("the fast decode path does not run '" + methodName(method) + "'" +
             (methodInfo(method).calibrated && !config.calibration ? " without its calibration"
              : config.components != ComponentSelect::Group        ? " with per-head components"
                                                                   : std::string()));
    if (!q.defined() || q.dim() != 3 || q.size(0) != cache.batch() ||
        q.size(2) != cache.headDim() || q.size(1) % cache.kvHeads() != 0)
        fail("decode attention: q must be [" + std::to_string(cache.batch()) + ", Hq, " +
             std::to_string(cache.headDim()) + "] with Hq a multiple of " +
             std::to_string(cache.kvHeads()) + ", got " + (q.defined() ? shapeOf(q) : "none"));
    const int64_t S = cache.length();
    if (S < 1)
        fail("decode attention over an empty cache");
    if (S > std::numeric_limits<int32_t>::max() - 16) // a row's candidates are int32 indices
        fail("decode attention holds at most 2^31 - 17 positions, got " + std::to_string(S));
    const int64_t B = q.size(0), Hq = q.size(1), D = q.size(2), H = cache.kvHeads(), g = Hq / H;
    if (g > 64)
        fail("decode attention supports at most 64 query heads per KV head");
    const bool sparq = method == Method::Sparq;
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
    } else if (method != Method::Dense) {
        config.validateFor(D, 0, Hq, H);
    }
    if (decodeNeedsDimensionMajor(config) && !cache.dimensionMajor())
        fail("'" + methodName(method) + "' decode needs the cache's dimension-major copy of K");
    if (method == Method::Quest && cache.pageSize() != config.pageSize)
        fail("quest decode needs the cache's pages of size " + std::to_string(config.pageSize) +
             " (prepareDecodeCache)");
    if (method == Method::Loki &&
        (!cache.projectionBasis().defined() || cache.projectionTag() != projectionTagOf(config)))
        fail("loki decode needs the cache projected on the basis of layer " +
             std::to_string(config.layer) + " (prepareDecodeCache)");
    at::Tensor qf = q.to(at::kFloat).contiguous();
    if (!at::isfinite(qf).all().item<bool>())
        throw NonFiniteInputError("q has non-finite entries (NaN or inf)");
    const bool defaultScale = !config.scale.has_value();
    if (config.scale && (!std::isfinite(*config.scale) || *config.scale <= 0))
        fail("the logit scale must be a finite positive number");
    const double scale = config.scale ? *config.scale : 1.0 / std::sqrt(static_cast<double>(D));

    if (!cache.device().is_cpu()) {
        qf = qf.to(cache.device());
        if (method == Method::Dense) {
            if (alphaOut)
                *alphaOut = at::ones({B, Hq}, qf.options());
            return denseDecodeTorch(qf, cache, config.scale);
        }
        if (sparq)
            return sparqTorch(qf, cache, config, scale, defaultScale, alphaOut);
        // The other methods: attend()'s own libtorch operations on the device.
        AttentionInputs in;
        in.q = qf;
        in.k = cache.keys().to(at::kFloat);
        in.v = cache.values().to(at::kFloat);
        AttendOptions o;
        o.diagnostics = false;
        o.validate = false;
        AttentionResult r = attend(in, config, o);
        if (alphaOut)
            *alphaOut = r.alpha;
        return r.y;
    }

    at::Tensor y = at::empty({B, Hq, D}, qf.options());
    at::Tensor alpha = at::empty({B, Hq}, qf.options());
    const int64_t kEff = std::min(config.k, S), local = config.effectiveLocal();
    const int64_t rEff = std::min(config.r, D);
    int64_t work = 0;
    switch (method) {
    case Method::Dense:
        work = denseWorkFloats(g, D, S);
        break;
    case Method::Sparq:
        work = sparqWorkFloats(g, D, S, kEff);
        break;
    case Method::Quest:
        work = questWorkFloats(g, D, S, config.pageSize);
        break;
    case Method::OracleTopP:
    case Method::SparqTopP:
        work = topPWorkFloats(g, D, S);
        break;
    default: // Loki, Double Sparsity
        work = lowRankWorkFloats(g, D, S, kEff);
        break;
    }
    // After the kernel's workspace: step 1's coefficients [g, D], then SparQ's component
    // scores [D] and heap values [D] (sparq-top-p's setup).
    const int64_t setupAt = work;
    work += g * D + 2 * D;
    const size_t threads = static_cast<size_t>(std::max(1, at::get_num_threads()));
    if (m_work.size() < threads) {
        m_work.resize(threads);
        m_index.resize(threads);
        m_heap.resize(threads);
        m_cand.resize(threads);
        m_rows.resize(threads);
    }
    const int64_t heapSize = std::max(sparq ? kEff : S, D) + 16;
    for (size_t t = 0; t < threads; ++t) {
        if (static_cast<int64_t>(m_work[t].size()) < work)
            m_work[t].resize(static_cast<size_t>(work));
        m_index[t].reserve(static_cast<size_t>(std::max<int64_t>(S, D)));
        if (method != Method::Dense && static_cast<int64_t>(m_cand[t].size()) < S + 16)
            m_cand[t].resize(static_cast<size_t>(S + 16));
        if (static_cast<int64_t>(m_heap[t].size()) < heapSize)
            m_heap[t].resize(static_cast<size_t>(heapSize));
        if (static_cast<int64_t>(m_rows[t].size()) < g * D)
            m_rows[t].resize(static_cast<size_t>(g * D));
    }
    SparqArgs sp;
    sp.r = config.r;
    sp.k = kEff;
    sp.local = local;
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
    // Per method: Quest's pages, Loki's projected keys and basis, Double Sparsity's channels.
    const int64_t P = config.pageSize;
    const int64_t pagesCap = method == Method::Quest ? (cap + P - 1) / P : 0;
    const char* pminBase =
        method == Method::Quest ? static_cast<const char*>(cache.pageMin().data_ptr()) : nullptr;
    const char* pmaxBase =
        method == Method::Quest ? static_cast<const char*>(cache.pageMax().data_ptr()) : nullptr;
    const char* kpBase = method == Method::Loki
                             ? static_cast<const char*>(cache.projectedStorage().data_ptr())
                             : nullptr;
    const float* basis =
        method == Method::Loki ? cache.projectionBasis().data_ptr<float>() : nullptr;
    at::Tensor channels;
    if (method == Method::DoubleSparsity)
        channels = channelsFor(config, Hq, D); // [Hq, r] int64, checked
    const int64_t* chBase = channels.defined() ? channels.data_ptr<int64_t>() : nullptr;
    const float sc = static_cast<float>(scale);

    // Tasks are handed out one at a time, not split in equal ranges up front: a thread that
    // starts late (woken from a passive wait) or loses its core for a while (a shared VM) then
    // leaves its share to the others instead of finishing alone at the end.
    const int64_t tasks = B * H;
    std::atomic<int64_t> nextTask{0};
    at::parallel_for(
        0, std::min<int64_t>(tasks, static_cast<int64_t>(threads)), 1, [&](int64_t, int64_t) {
            const size_t t = static_cast<size_t>(at::get_thread_num());
            float* w = m_work[t].data();
            std::vector<int64_t>& sel = m_index[t];
            int64_t* heap = m_heap[t].data();
            int32_t* cand = m_cand[t].data();
            const void** rows = m_rows[t].data();
            float* coef = w + setupAt; // [g, D]
            for (int64_t task; (task = nextTask.fetch_add(1, std::memory_order_relaxed)) < tasks;) {
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
                a.scale = sc;
                const size_t rowBytes = static_cast<size_t>(cap) * es;
                switch (method) {
                case Method::Dense:
                    if (st == at::kFloat)
                        denseGroupF32(a, w);
                    else if (st == at::kHalf)
                        denseGroupF16(a, w);
                    else
                        denseGroupBF16(a, w);
                    break;
                case Method::Sparq:
                    sparqGroup(st, a, sp, w, sel, heap, cand);
                    break;
                case Method::Quest: {
                    QuestArgs qa;
                    qa.k = std::min(config.k, S + P);
                    qa.local = local;
                    qa.pageSize = P;
                    qa.gqa = config.gqa;
                    const size_t poff = static_cast<size_t>(task * pagesCap * D) * es;
                    qa.pmin = pminBase + poff;
                    qa.pmax = pmaxBase + poff;
                    questGroup(st, a, qa, w, sel, heap, cand);
                    break;
                }
                case Method::OracleTopP:
                case Method::SparqTopP: {
                    TopPArgs tp;
                    tp.sparq = method == Method::SparqTopP;
                    tp.p = config.p;
                    tp.kMax = kEff;
                    tp.local = local;
                    tp.gqa = config.gqa;
                    tp.meanValue = config.meanValue;
                    if (tp.sparq) { // SparQ's components and temperature, as sparqGroupT
                        float factor[64];
                        float* compScore = coef + g * D;
                        sparqSetup(a, config.r, config.tau, static_cast<float>(config.tauValue),
                                   defaultScale, compScore, heap, compScore + D, sel, factor);
                        const int64_t n = static_cast<int64_t>(sel.size());
                        for (int64_t i = 0; i < n; ++i) {
                            const int64_t c = sel[static_cast<size_t>(i)];
                            rows[i] =
                                static_cast<const char*>(a.kt) + static_cast<size_t>(c) * rowBytes;
                            for (int64_t h = 0; h < g; ++h)
                                coef[h * n + i] = a.q[h * D + c] * factor[h];
                        }
                        tp.rows = rows;
                        tp.nRows = n;
                        tp.coef = coef;
                    }
                    topPGroup(st, a, tp, w, sel, heap, cand);
                    break;
                }
                default: { // Loki, Double Sparsity: ẑ from r dimension-major rows
                    LowRankArgs lr;
                    lr.k = kEff;
                    lr.local = local;
                    lr.nRows = rEff;
                    lr.gqa = config.gqa;
                    lr.rows = rows;
                    lr.coef = coef;
                    const int64_t u = task % H;
                    if (method == Method::Loki) {
                        // ẑ_h = (q_h·P_i)·scale over the keys' first r coordinates (§4.2).
                        const float* Bu = basis + u * D * D;
                        for (int64_t i = 0; i < rEff; ++i) {
                            rows[i] = kpBase + off + static_cast<size_t>(i) * rowBytes;
                            for (int64_t h = 0; h < g; ++h) {
                                float s = 0;
                                for (int64_t d = 0; d < D; ++d)
                                    s += a.q[h * D + d] * Bu[d * D + i];
                                coef[h * rEff + i] = s * sc;
                            }
                        }
                    } else { // ẑ_h = Σ_{c∈C_h} q_h[c]·K[c, :]·scale (§5.2), rows per head
                        lr.perHeadRows = true;
                        for (int64_t h = 0; h < g; ++h)
                            for (int64_t i = 0; i < rEff; ++i) {
                                const int64_t c = chBase[(u * g + h) * rEff + i];
                                rows[h * rEff + i] = static_cast<const char*>(a.kt) +
                                                     static_cast<size_t>(c) * rowBytes;
                                coef[h * rEff + i] = a.q[h * D + c] * sc;
                            }
                    }
                    lowRankGroup(st, a, lr, w, sel, heap, cand);
                    break;
                }
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
