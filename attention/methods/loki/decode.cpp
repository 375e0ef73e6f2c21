// Loki decode attention on the CPU (METHODS.md §4.2, decode/engine.h): ẑ from the first r rows of
// the keys projected on the layer's basis (kept beside the cache), then the top-k.

#include "attention/decode/selected.h"

namespace sparqlab::attention {
namespace decode {
namespace {

void lokiTask(const DecodeCall& c, const GroupArgs& a, int64_t task, DecodeScratch& s) {
    LowRankArgs lr = lowRankArgs(c, s);
    const int64_t D = c.D, g = c.g, rEff = c.rEff;
    const size_t rowBytes = static_cast<size_t>(c.cap) * c.es;
    const size_t off = static_cast<size_t>(task * c.cap * D) * c.es;
    const char* kpBase = static_cast<const char*>(c.cache->projectedStorage().data_ptr());
    // ẑ_h = (q_h·P_i)·scale over the keys' first r coordinates (§4.2).
    const float* Bu = c.cache->projectionBasis().data_ptr<float>() + (task % c.H) * D * D;
    for (int64_t i = 0; i < rEff; ++i) {
        s.rows[i] = kpBase + off + static_cast<size_t>(i) * rowBytes;
        for (int64_t h = 0; h < g; ++h) {
            float x = 0;
            for (int64_t d = 0; d < D; ++d)
                x += a.q[h * D + d] * Bu[d * D + i];
            s.coef[h * rEff + i] = x * c.scale;
        }
    }
    lowRankGroup(c.storage, a, lr, s.work, *s.sel, s.heap, s.cand);
}

bool lokiSupports(const AttentionConfig& c) {
    return c.calibration && c.calibration->tensor("basis").defined();
}

void lokiPrepare(DecodeCache& cache, const AttentionConfig& c) {
    if (!cache.projectionBasis().defined() || cache.projectionTag() != projectionTagOf(c))
        cache.setProjection(detail::lokiLayerBasis(c, cache.kvHeads(), cache.headDim()),
                            projectionTagOf(c));
}

int64_t lokiExtra(int64_t B, int64_t H, int64_t S, int64_t D, const AttentionConfig&) {
    return B * H * S * D; // the keys in the basis, dimension-major
}

std::string lokiMissing(const DecodeCache& cache, const AttentionConfig& c) {
    if (cache.projectionBasis().defined() && cache.projectionTag() == projectionTagOf(c))
        return {};
    return "loki decode needs the cache projected on the basis of layer " +
           std::to_string(c.layer) + " (prepareDecodeCache)";
}

/// On CUDA: step 1 over the first r rows of the projected keys (cuda/decode_cuda.h).
void lokiGpu(const DecodeCall&, cuda::Request& r) {
    r.score = cuda::Score::LowRank;
    r.rows = cuda::Rows::Basis;
    r.select = cuda::Select::TopK;
}

} // namespace
} // namespace decode

namespace detail {
const DecodeKernel& lokiDecodeKernel() {
    static const DecodeKernel kernel{.supports = decode::lokiSupports,
                                     .prepareCache = decode::lokiPrepare,
                                     .cacheMissing = decode::lokiMissing,
                                     .cacheExtraElements = decode::lokiExtra,
                                     .workFloats = decode::lowRankWork,
                                     .task = decode::lokiTask,
                                     .gpu = decode::lokiGpu};
    return kernel;
}
} // namespace detail
} // namespace sparqlab::attention
