// The oracle top-p budget on the CPU (METHODS.md §6.2, decode.h): exact scores, the fewest top
// positions holding mass p.

#include "attention/decode/kernel.h"
#include "attention/decode/selected.h"

namespace sparqlab::attention {
namespace decode {
namespace {

SPARQLAB_SELECTING_KERNELS(topPGroup, TopPArgs)

int64_t topPWork(const DecodeCall& c) {
    return topPWorkFloats(c.g, c.D, c.S);
}

TopPArgs topPArgs(const DecodeCall& c) {
    TopPArgs tp;
    tp.p = c.config->p;
    tp.kMax = c.kEff;
    tp.local = c.local;
    tp.gqa = c.config->gqa;
    tp.meanValue = c.config->meanValue;
    return tp;
}

void oracleTopPTask(const DecodeCall& c, const GroupArgs& a, int64_t, DecodeScratch& s) {
    TopPArgs tp = topPArgs(c);
    tp.sparq = false;
    topPGroup(c.storage, a, tp, s.work, *s.sel, s.heap, s.cand);
}

} // namespace
} // namespace decode

namespace detail {
const DecodeKernel& oracleTopPDecodeKernel() {
    static const DecodeKernel kernel = [] {
        DecodeKernel k;
        k.workFloats = decode::topPWork;
        k.task = decode::oracleTopPTask;
        return k;
    }();
    return kernel;
}
} // namespace detail
} // namespace sparqlab::attention
