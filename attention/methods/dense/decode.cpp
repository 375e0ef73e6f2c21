// Dense decode attention on the CPU (decode/engine.h): g heads sharing one KV head, one pass over K
// and one over V, from float32, float16 or bfloat16 storage.

#include "attention/decode/kernel.h"

namespace sparqlab::attention {
namespace decode {
namespace {

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

int64_t denseWork(const DecodeCall& c) {
    return denseWorkFloats(c.g, c.D, c.S);
}

void denseTask(const DecodeCall& c, const GroupArgs& a, int64_t, DecodeScratch& s) {
    if (c.storage == at::kFloat)
        denseGroupF32(a, s.work);
    else if (c.storage == at::kHalf)
        denseGroupF16(a, s.work);
    else
        denseGroupBF16(a, s.work);
}

/// On CUDA: flash-decoding over every position (cuda/decode_cuda.h).
void denseGpu(const DecodeCall&, cuda::Request& r) {
    r.score = cuda::Score::None;
}

} // namespace
} // namespace decode

namespace detail {
const DecodeKernel& denseDecodeKernel() {
    static const DecodeKernel kernel{
        .workFloats = decode::denseWork, .task = decode::denseTask, .gpu = decode::denseGpu};
    return kernel;
}
} // namespace detail
} // namespace sparqlab::attention
