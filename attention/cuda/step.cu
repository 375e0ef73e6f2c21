// The fused operations around attention in a decode step (cuda/step.h): their launches, one
// kernel each, dispatched on the storage dtype.

#include "attention/cuda/kernels/step.cuh"

#include <stdexcept>
#include <string>
#include <type_traits>

namespace sparqlab::attention::cuda {

namespace {

unsigned blocksFor(int64_t threads, const char* what) {
    const int64_t blocks = (threads + detail::kThreads - 1) / detail::kThreads;
    if (blocks > 0x7fffffff)
        throw std::runtime_error(std::string(what) + ": too many elements for one launch");
    return static_cast<unsigned>(blocks);
}

template <typename F> void byStorage(Storage s, F&& f) {
    switch (s) {
    case Storage::F32:
        f(float{});
        break;
    case Storage::F16:
        f(__half{});
        break;
    case Storage::BF16:
        f(__nv_bfloat16{});
        break;
    }
}

} // namespace

void rmsNorm(const RmsNormStep& p, void* stream) {
    if (p.rows <= 0 || p.width <= 0)
        return;
    if (p.rows > 0x7fffffff)
        throw std::runtime_error("rmsNorm: too many rows for one launch");
    byStorage(p.storage, [&](auto t) {
        using T = decltype(t);
        SPARQLAB_LAUNCH(static_cast<unsigned>(p.rows), detail::kThreads, 0,
                        detail::asStream(stream), detail::rmsNormKernel<T>)
        (p);
    });
    detail::check(cudaGetLastError(), "rmsNorm kernel");
}

void rope(const RopeStep& p, void* stream) {
    const int64_t n = p.B * p.T * p.D * (p.a.heads + (p.b.x ? p.b.heads : 0));
    if (n <= 0)
        return;
    if (p.rot <= 0 || p.rot % 2 || p.rot > p.D)
        throw std::runtime_error("rope: rot must be even and at most D");
    byStorage(p.storage, [&](auto t) {
        using T = decltype(t);
        SPARQLAB_LAUNCH(blocksFor(n, "rope"), detail::kThreads, 0, detail::asStream(stream),
                        detail::ropeKernel<T>)
        (p);
    });
    detail::check(cudaGetLastError(), "rope kernel");
}

void appendStep(const AppendStep& p, void* stream) {
    const int64_t n = p.B * p.H * p.D;
    if (n <= 0)
        return;
    if (p.pos < 0 || p.pos >= p.cap)
        throw std::runtime_error("appendStep: the position is outside the cache");
    byStorage(p.storage, [&](auto t) {
        using T = decltype(t);
        SPARQLAB_LAUNCH(blocksFor(n, "appendStep"), detail::kThreads, 0, detail::asStream(stream),
                        detail::appendKernel<T>)
        (p);
    });
    detail::check(cudaGetLastError(), "append kernel");
}

void gemv(const GemvStep& p, void* stream) {
    if (p.rows <= 0)
        return;
    if (p.rows > kGemvRows || p.K <= 0 || p.K % 8 != 0)
        throw std::runtime_error("gemv: 1 to 4 rows and K a multiple of 8");
    if (p.outputs < 1 || p.outputs > 3 ||
        (p.siluMul && (p.outputs != 2 || p.out[0].N != p.out[1].N)))
        throw std::runtime_error("gemv: 1 to 3 outputs; silu·mul takes two of equal N");
    int64_t features = 0;
    for (int o = 0; o < (p.siluMul ? 1 : p.outputs); ++o)
        features += p.out[o].N;
    if (features <= 0)
        return;
    const int64_t blocks = (features + detail::kWarps - 1) / detail::kWarps;
    if (blocks > 0x7fffffff)
        throw std::runtime_error("gemv: too many outputs for one launch");
    byStorage(p.storage, [&](auto t) {
        using T = decltype(t);
        auto go = [&](auto kernel) {
            SPARQLAB_LAUNCH(static_cast<unsigned>(blocks), detail::kThreads, 0,
                            detail::asStream(stream), kernel)
            (p);
        };
        auto byRows = [&](auto pair) {
            constexpr bool P = decltype(pair)::value;
            switch (p.rows) {
            case 1:
                return go(detail::gemvKernel<T, 1, P>);
            case 2:
                return go(detail::gemvKernel<T, 2, P>);
            case 3:
                return go(detail::gemvKernel<T, 3, P>);
            default:
                return go(detail::gemvKernel<T, 4, P>);
            }
        };
        if (p.siluMul)
            byRows(std::true_type{});
        else
            byRows(std::false_type{});
    });
    detail::check(cudaGetLastError(), "gemv kernel");
}

bool stepOpsBuilt() {
    return true;
}

} // namespace sparqlab::attention::cuda
