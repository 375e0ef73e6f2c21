// Dense attention (SPARQ.md §2.4): exact attention over every valid position, the reference
// every other method is measured against.

#include "attention/detail.h"

#include <ATen/ATen.h>

namespace sparqlab::attention::detail {

/// The unit's decode kernel (decode.cpp beside this file).
const DecodeKernel& denseDecodeKernel();
namespace {

AttentionResult runDense(const Prepared& p, const AttentionInputs&, const AttentionConfig&,
                         const AttendOptions& o) {
    const at::Tensor z = exactLogits(p);
    AttentionResult out;
    out.y = p.heads(attendOver(p, z, p.validU()));
    out.alpha = at::ones({p.B, p.Hq, p.T}, out.y.options());
    out.meanV = meanValue(p);
    const at::Tensor inf = at::full({p.B, p.Hkv, 1, p.T}, kInf, p.options());
    fillSelection(p, z, expandUnits(p, {p.validU(), inf, inf}), p.S, o, out);
    keepExact(p, z, o, out);
    return out;
}

} // namespace
} // namespace sparqlab::attention::detail

SPARQLAB_METHOD(dense) {
    MethodSpec s;
    MethodInfo& m = s.info;
    m.id = Method::Dense;
    m.name = "dense";
    m.label = "Dense";
    m.summary = "exact attention over every position";
    m.spec = "SPARQ.md §2.4";
    m.selects = false;
    m.transfer = transfer::dense;
    m.transferFormula = "2·S·d + 2·d";
    s.run = detail::runDense;
    s.decode = &detail::denseDecodeKernel();
    return s;
}
