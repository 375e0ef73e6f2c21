// The oracle top-k (SPARQ.md §4.1): the true top-k positions by exact scores, renormalised —
// what any approximate selection is aiming at.

#include "attention/detail.h"

#include <ATen/ATen.h>

namespace sparqlab::attention::detail {
namespace {

AttentionResult runOracle(const Prepared& p, const AttentionInputs&, const AttentionConfig& c,
                          const AttendOptions& o) {
    const at::Tensor z = exactLogits(p);
    const at::Tensor s = at::softmax(z, -1);
    const Selection sel = selectPositions(p, groupRankScore(z, s, c.gqa), c.k, c.effectiveLocal());
    AttentionResult out;
    out.y = p.heads(attendOver(p, z, sel.mask));
    out.alpha = at::ones({p.B, p.Hq, p.T}, out.y.options());
    out.meanV = meanValue(p);
    fillSelection(p, z, sel, c.k, o, out);
    keepExact(p, z, o, out);
    return out;
}

} // namespace
} // namespace sparqlab::attention::detail

SPARQLAB_METHOD(oracle) {
    MethodSpec s;
    MethodInfo& m = s.info;
    m.id = Method::Oracle;
    m.name = "oracle";
    m.label = "Oracle top-k";
    m.summary = "the true top-k by exact scores, renormalised";
    m.spec = "SPARQ.md §4.1";
    m.params = {Param::K, Param::Local, Param::Gqa};
    m.transfer = transfer::exactThenK;
    m.transferFormula = "S·d + k·d + 2·d";
    m.evalGrid = "k=32,64,128,256 local=k/4";
    s.run = detail::runOracle;
    return s;
}
