// SparQ with a top-p budget on the CPU (METHODS.md §6.3, decode/engine.h): SparQ's components and
// temperature, ẑ over r dimension-major rows, the fewest positions holding mass p, Eq. 10.

#include "attention/decode/selected.h"

namespace sparqlab::attention {
namespace decode {
namespace {

void sparqTopPTask(const DecodeCall& c, const GroupArgs& a, int64_t, DecodeScratch& s) {
    const AttentionConfig& config = *c.config;
    TopPArgs tp = topPArgs(c);
    tp.sparq = true;
    // SparQ's components and temperature, as SparQ's own kernel takes them.
    const int64_t g = c.g, D = c.D;
    const size_t rowBytes = static_cast<size_t>(c.cap) * c.es;
    float factor[64];
    float* compScore = s.coef + g * D;
    std::vector<int64_t>& sel = *s.sel;
    sparqSetup(a, config.r, config.tau, static_cast<float>(config.tauValue), c.defaultScale,
               compScore, s.heap, compScore + D, sel, factor);
    const int64_t n = static_cast<int64_t>(sel.size());
    for (int64_t i = 0; i < n; ++i) {
        const int64_t comp = sel[static_cast<size_t>(i)];
        s.rows[i] = static_cast<const char*>(a.kt) + static_cast<size_t>(comp) * rowBytes;
        for (int64_t h = 0; h < g; ++h)
            s.coef[h * n + i] = a.q[h * D + comp] * factor[h];
    }
    tp.rows = s.rows;
    tp.nRows = n;
    tp.coef = s.coef;
    topPGroup(c.storage, a, tp, s.work, sel, s.heap, s.cand);
}

/// On CUDA: SparQ's step 1, the top-p budget on ŝ, Eq. 10 (cuda/decode_cuda.h).
void sparqTopPGpu(const DecodeCall& c, cuda::Request& r) {
    r.score = cuda::Score::LowRank;
    r.rows = cuda::Rows::SparqComponents;
    r.select = cuda::Select::TopP;
    r.meanValue = c.config->meanValue;
}

} // namespace
} // namespace decode

namespace detail {
const DecodeKernel& sparqTopPDecodeKernel() {
    static const DecodeKernel kernel{.dimensionMajor = true,
                                     .supports = decode::groupComponents,
                                     .workFloats = decode::topPWork,
                                     .task = decode::sparqTopPTask,
                                     .gpu = decode::sparqTopPGpu};
    return kernel;
}
} // namespace detail
} // namespace sparqlab::attention
