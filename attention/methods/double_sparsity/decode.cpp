// Double Sparsity decode attention on the CPU (METHODS.md §5.2, decode/engine.h): ẑ from each
// head's r calibrated channels, rows of the dimension-major K (its "label cache"), then the top-k.

#include "attention/decode/selected.h"

namespace sparqlab::attention {
namespace decode {
namespace {

void dsTask(const DecodeCall& c, const GroupArgs& a, int64_t task, DecodeScratch& s) {
    LowRankArgs lr = lowRankArgs(c, s);
    const int64_t D = c.D, g = c.g, rEff = c.rEff;
    const size_t rowBytes = static_cast<size_t>(c.cap) * c.es;
    const int64_t* chBase = c.aux.data_ptr<int64_t>();
    const int64_t u = task % c.H;
    // ẑ_h = Σ_{c∈C_h} q_h[c]·K[c, :]·scale (§5.2), rows per head.
    lr.perHeadRows = true;
    for (int64_t h = 0; h < g; ++h)
        for (int64_t i = 0; i < rEff; ++i) {
            const int64_t ch = chBase[(u * g + h) * rEff + i];
            s.rows[h * rEff + i] =
                static_cast<const char*>(a.kt) + static_cast<size_t>(ch) * rowBytes;
            s.coef[h * rEff + i] = a.q[h * D + ch] * c.scale;
        }
    lowRankGroup(c.storage, a, lr, s.work, *s.sel, s.heap, s.cand);
}

bool dsSupports(const AttentionConfig& c) {
    return c.calibration && c.calibration->tensor("channels").defined();
}

/// The layer's first r channels [Hq, r], checked once per (calibration, layer, r).
at::Tensor dsSetup(const DecodeCall& c) {
    return detail::dsLayerChannels(*c.config, c.Hq, c.D);
}

/// On CUDA: step 1 over each head's r channel rows of the dimension-major K; the channels
/// (call.aux) are put on the device by the engine (cuda/decode_cuda.h).
void dsGpu(const DecodeCall&, cuda::Request& r) {
    r.score = cuda::Score::LowRank;
    r.rows = cuda::Rows::Channels;
    r.select = cuda::Select::TopK;
}

} // namespace
} // namespace decode

namespace detail {
const DecodeKernel& dsDecodeKernel() {
    static const DecodeKernel kernel{.dimensionMajor = true,
                                     .supports = decode::dsSupports,
                                     .workFloats = decode::lowRankWork,
                                     .setup = decode::dsSetup,
                                     .task = decode::dsTask,
                                     .gpu = decode::dsGpu};
    return kernel;
}
} // namespace detail
} // namespace sparqlab::attention
