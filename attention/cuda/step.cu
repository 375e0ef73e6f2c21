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

/// One launch of kernelOf(T{})(p) over `blocks` blocks in the storage dtype T, checked.
template <typename P, typename KernelOf>
void launchStep(Storage storage, unsigned blocks, void* stream, const P& p, const char* what,
                KernelOf kernelOf) {
    byStorage(storage, [&](auto t) {
        const auto kernel = kernelOf(t);
        SPARQLAB_LAUNCH_AFTER(blocks, detail::kThreads, 0, detail::asStream(stream), kernel)(p);
    });
    detail::check(cudaGetLastError(), what);
}

/// The gemv kernel for `rows` rows of x (1 … kGemvRows), of one output set or a SiLU pair.
template <typename T> void (*gemvKernelOf(int64_t rows, bool pair))(GemvStep) {
    using Kernel = void (*)(GemvStep);
    static const Kernel plain[] = {
        &detail::gemvKernel<T, 1, false>, &detail::gemvKernel<T, 2, false>,
        &detail::gemvKernel<T, 3, false>, &detail::gemvKernel<T, 4, false>};
    static const Kernel paired[] = {
        &detail::gemvKernel<T, 1, true>, &detail::gemvKernel<T, 2, true>,
        &detail::gemvKernel<T, 3, true>, &detail::gemvKernel<T, 4, true>};
    static_assert(sizeof(plain) / sizeof(plain[0]) == kGemvRows, "a kernel for each row count");
    return (pair ? paired : plain)[rows - 1];
}

} // namespace

void rmsNorm(const RmsNormStep& p, void* stream) {
    if (p.rows <= 0 || p.width <= 0)
        return;
    if (p.rows > 0x7fffffff)
        throw std::runtime_error("rmsNorm: too many rows for one launch");
    launchStep(p.storage, static_cast<unsigned>(p.rows), stream, p, "rmsNorm kernel",
               [](auto t) { return detail::rmsNormKernel<decltype(t)>; });
}

void rope(const RopeStep& p, void* stream) {
    const int64_t n = p.B * p.T * p.D * (p.a.heads + (p.b.x ? p.b.heads : 0));
    if (n <= 0)
        return;
    if (p.rot <= 0 || p.rot % 2 || p.rot > p.D)
        throw std::runtime_error("rope: rot must be even and at most D");
    launchStep(p.storage, blocksFor(n, "rope"), stream, p, "rope kernel",
               [](auto t) { return detail::ropeKernel<decltype(t)>; });
}

void appendStep(const AppendStep& p, void* stream) {
    const int64_t n = p.B * p.H * p.D;
    if (n <= 0)
        return;
    if (p.pos < 0 || p.pos >= p.cap)
        throw std::runtime_error("appendStep: the position is outside the cache");
    launchStep(p.storage, blocksFor(n, "appendStep"), stream, p, "append kernel",
               [](auto t) { return detail::appendKernel<decltype(t)>; });
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
    launchStep(p.storage, static_cast<unsigned>(blocks), stream, p, "gemv kernel",
               [&](auto t) { return gemvKernelOf<decltype(t)>(p.rows, p.siluMul); });
}

bool stepOpsBuilt() {
    return true;
}

} // namespace sparqlab::attention::cuda
