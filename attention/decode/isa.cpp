// The decode kernels' instruction-set dispatch, in one place (decode/kernel.h): which of the
// hand-written versions this process runs (the CPU's widest, capped by SPARQLAB_ISA), the
// half-precision loops compiled per set (half_loops.inc), and the candidate scans.

#include "attention/decode/kernel.h"

#include <cstdlib>

namespace sparqlab::attention {
namespace decode {

namespace {

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

} // namespace

DecodeIsa isa() {
    static const DecodeIsa v = pickIsa();
    return v;
}

namespace {

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

} // namespace

const HalfLoops* pickHalfLoops(bool bfloat16) {
#ifdef SPARQLAB_X86_DISPATCH
    static const HalfLoops wide16{avx512::convert<c10::Half>, avx512::pass<c10::Half>,
                                  avx512::dots<c10::Half>, avx512::axpys<c10::Half>};
    static const HalfLoops narrow16{avx2::convert<c10::Half>, avx2::pass<c10::Half>,
                                    avx2::dots<c10::Half>, avx2::axpys<c10::Half>};
    static const HalfLoops wideB{avx512::convert<c10::BFloat16>, avx512::pass<c10::BFloat16>,
                                 avx512::dots<c10::BFloat16>, avx512::axpys<c10::BFloat16>};
    static const HalfLoops narrowB{avx2::convert<c10::BFloat16>, avx2::pass<c10::BFloat16>,
                                   avx2::dots<c10::BFloat16>, avx2::axpys<c10::BFloat16>};
    if (isa() == DecodeIsa::Avx512)
        return bfloat16 ? &wideB : &wide16;
    if (isa() == DecodeIsa::Avx2)
        return bfloat16 ? &narrowB : &narrow16;
#else
    (void)bfloat16;
#endif
    return nullptr;
}

namespace {

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

} // namespace

NextAtLeastFn pickNextAtLeast() {
#ifdef SPARQLAB_X86_DISPATCH
    return isa() == DecodeIsa::Avx512 ? nextAtLeastAvx512
           : isa() == DecodeIsa::Avx2 ? nextAtLeastAvx2
                                      : nextAtLeastScalar;
#else
    return nextAtLeastScalar;
#endif
}

CollectAtLeastFn pickCollectAtLeast() {
#ifdef SPARQLAB_X86_DISPATCH
    return isa() == DecodeIsa::Avx512 ? collectAtLeastAvx512 : collectAtLeastGeneric;
#else
    return collectAtLeastGeneric;
#endif
}

} // namespace decode

const char* decodeKernelIsa() {
    using decode::DecodeIsa;
    switch (decode::isa()) {
    case DecodeIsa::Avx512:
        return "avx512";
    case DecodeIsa::Avx2:
        return "avx2";
    case DecodeIsa::Baseline:
        break;
    }
    return "baseline";
}

} // namespace sparqlab::attention
