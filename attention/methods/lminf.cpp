// LM-Infinite (SPARQ.md §4.3): the first sink tokens and the most recent positions.

#include "attention/detail.h"

#include <ATen/ATen.h>

namespace sparqlab::attention::detail {
namespace {

AttentionResult runLmInfinite(const Prepared& p, const AttentionInputs&, const AttentionConfig& c,
                              const AttendOptions& o) {
    checkBudget(c.k, 0);
    if (c.sink < 0)
        fail("the number of sink tokens must be at least 0, got " + std::to_string(c.sink));
    const int64_t nSink = std::min(c.sink, c.k);
    at::Tensor keep = p.valid.logical_and(
        forwardIndex(p.valid).lt(nSink).logical_or(recentIndex(p).lt(c.k - nSink)));
    keep = keep.logical_or(p.valid.logical_and(p.nValid.le(c.k).unsqueeze(-1)));
    const at::Tensor sel = keep.view({p.B, 1, 1, p.T, p.S});
    const at::Tensor z = exactLogits(p);
    AttentionResult out;
    out.y = p.heads(attendOver(p, z, sel));
    out.alpha = at::ones({p.B, p.Hq, p.T}, out.y.options());
    out.meanV = meanValue(p);
    const at::Tensor inf = at::full({p.B, p.Hkv, 1, p.T}, kInf, p.options());
    fillSelection(p, z, expandUnits(p, {sel, inf, inf}), c.k, o, out);
    keepExact(p, z, o, out);
    return out;
}

} // namespace
} // namespace sparqlab::attention::detail

SPARQLAB_METHOD(lminf) {
    MethodSpec s;
    MethodInfo& m = s.info;
    m.id = Method::LmInfinite;
    m.name = "lminf";
    m.aliases = {"lm-infinite", "lm_infinite"};
    m.label = "LM-Infinite";
    m.summary = "16 sink tokens and the most recent ones";
    m.spec = "SPARQ.md §4.3";
    m.params = {Param::K};
    m.transfer = transfer::kept;
    m.transferFormula = "2·k·d + 2·d";
    m.evalGrid = "k=192,256,384,512,768";
    s.run = detail::runLmInfinite;
    return s;
}
