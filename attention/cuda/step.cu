// The fused operations around attention in a decode step (cuda/step.h): their launches, one
// kernel each, dispatched on the storage dtype.

#include "attention/cuda/kernels/step.cuh"

#include <stdexcept>
#include <string>

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
    if (p.rows <= 0 || p.N <= 0)
        return;
    if (p.rows > kGemvRows || p.K <= 0 || p.K % 8 != 0)
        throw std::runtime_error("gemv: 1 to 4 rows and K a multiple of 8");
    const int64_t blocks = (p.N + detail::kWarps - 1) / detail::kWarps;
    if (blocks > 0x7fffffff)
        throw std::runtime_error("gemv: too many outputs for one launch");
    byStorage(p.storage, [&](auto t) {
        using T = decltype(t);
        auto go = [&](auto kernel) {
            SPARQLAB_LAUNCH(static_cast<unsigned>(blocks), detail::kThreads, 0,
                            detail::asStream(stream), kernel)
            (p);
        };
        switch (p.rows) {
        case 1:
            go(detail::gemvKernel<T, 1>);
            break;
        case 2:
            go(detail::gemvKernel<T, 2>);
            break;
        case 3:
            go(detail::gemvKernel<T, 3>);
            break;
        default:
            go(detail::gemvKernel<T, 4>);
        }
    });
    detail::check(cudaGetLastError(), "gemv kernel");
}

bool stepOpsBuilt() {
    return true;
}

} // namespace sparqlab::attention::cuda
