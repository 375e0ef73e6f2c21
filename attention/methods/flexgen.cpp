// FlexGen (SPARQ.md §4.2): exact scores, the top-k masked after the softmax (no
// renormalisation; Eq. 6's mean-value term with AttentionConfig::flexgenReallocate).

#include "attention/method_kit.h"

#include <ATen/ATen.h>

namespace sparqlab::attention::detail {
namespace {

AttentionResult runFlexGen(const Prepared& p, const AttentionInputs&, const AttentionConfig& c,
                           const AttendOptions& o) {
    const at::Tensor z = exactLogits(p);
    const at::Tensor s = probabilities(p, z);
    const Selection sel = selectPositions(p, groupRankScore(z, s, c.gqa), c.k, /*l=*/0);
    const at::Tensor w = s * sel.mask; // Eq. 5: masked after the softmax, not renormalised
    at::Tensor y =
        at::matmul(w.reshape({p.B, p.Hkv, p.g * p.T, p.S}), p.v).view({p.B, p.Hkv, p.g, p.T, p.Dv});
    const at::Tensor ws = withSink(p, w.sum(-1), s); // the sink is always kept (its value is 0)
    const at::Tensor vbar = meanValue(p).unsqueeze(2);
    if (c.flexgenReallocate) // Eq. 6
        y = y + (1 - ws.unsqueeze(-1)) * vbar;
    AttentionResult out;
    out.y = p.heads(y);
    out.weightSum = p.heads(ws);
    out.alpha = at::ones_like(out.weightSum);
    out.meanV = vbar.squeeze(2);
    fillSelection(p, z, sel, c.k, o, out);
    keepExact(p, z, o, out);
    return out;
}

} // namespace
} // namespace sparqlab::attention::detail

SPARQLAB_METHOD(flexgen) {
    return {.info = {.id = Method::FlexGen,
                     .name = "flexgen",
                     .label = "FlexGen",
                     .summary = "exact scores, top-k masked after the softmax (no renormalisation)",
                     .spec = "SPARQ.md §4.2",
                     .params = {Param::K, Param::Gqa, Param::Reallocate},
                     .transfer = transfer::exactThenK,
                     .transferFormula = "S·d + k·d + 2·d",
                     .evalGrid = "k=2,8,32,128,256"},
            .run = detail::runFlexGen};
}
