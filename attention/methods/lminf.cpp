// LM-Infinite (SPARQ.md §4.3): the first sink tokens and the most recent positions.

#include "attention/method_kit.h"

#include <ATen/ATen.h>

namespace sparqlab::attention::detail {
namespace {

AttentionResult runLmInfinite(const Prepared& p, const AttentionInputs&, const AttentionConfig& c,
                              const AttendOptions& o) {
    checkBudget(c.k, 0);
    const int64_t nSink = std::min(c.integer(Param::Sink), c.k);
    at::Tensor keep = p.valid.logical_and(
        forwardIndex(p.valid).lt(nSink).logical_or(recentIndex(p).lt(c.k - nSink)));
    keep = keep.logical_or(p.valid.logical_and(p.nValid.le(c.k).unsqueeze(-1)));
    const at::Tensor sel = keep.view({p.B, 1, 1, p.T, p.S});
    const at::Tensor inf = at::full({p.B, p.Hkv, 1, p.T}, kInf, p.options());
    return attendSelection(p, exactLogits(p), expandUnits(p, {sel, inf, inf}), c.k, o);
}

} // namespace
} // namespace sparqlab::attention::detail

SPARQLAB_METHOD(lminf) {
    return {.info = {.id = Method::LmInfinite,
                     .name = "lminf",
                     .aliases = {"lm-infinite", "lm_infinite"},
                     .label = "LM-Infinite",
                     .summary = "16 sink tokens and the most recent ones",
                     .spec = "SPARQ.md §4.3",
                     .params = {Param::K, Param::Sink},
                     .defaults = {{Param::Sink, "16"}},
                     .transfer = transfer::kept,
                     .transferFormula = "2·k·d + 2·d",
                     .evalGrid = "k=192,256,384,512,768"},
            .run = detail::runLmInfinite};
}
