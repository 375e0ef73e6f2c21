// The oracle top-p budget on the CPU (METHODS.md §6.2, decode/engine.h): exact scores, the fewest
// top positions holding mass p.

#include "attention/decode/selected.h"

namespace sparqlab::attention {
namespace decode {
namespace {

void oracleTopPTask(const DecodeCall& c, const GroupArgs& a, int64_t, DecodeScratch& s) {
    TopPArgs tp = topPArgs(c);
    tp.sparq = false;
    topPGroup(c.storage, a, tp, s.work, *s.sel, s.heap, s.cand);
}

/// On CUDA: exact scores, the top-p budget, exact attention over it (cuda/decode_cuda.h).
void oracleTopPGpu(const DecodeCall&, cuda::Request& r) {
    r.score = cuda::Score::Exact;
    r.select = cuda::Select::TopP;
}

} // namespace
} // namespace decode

namespace detail {
const DecodeKernel& oracleTopPDecodeKernel() {
    static const DecodeKernel kernel{.workFloats = decode::topPWork,
                                     .task = decode::oracleTopPTask,
                                     .gpu = decode::oracleTopPGpu};
    return kernel;
}
} // namespace detail
} // namespace sparqlab::attention
