// Dense attention (SPARQ.md §2.4): exact attention over every valid position, the reference
// every other method is measured against.

#include "attention/method_kit.h"

#include <ATen/ATen.h>

namespace sparqlab::attention::detail {

/// The unit's decode kernel (decode.cpp beside this file).
const DecodeKernel& denseDecodeKernel();
namespace {

AttentionResult runDense(const Prepared& p, const AttentionInputs&, const AttentionConfig&,
                         const AttendOptions& o) {
    const at::Tensor inf = at::full({p.B, p.Hkv, 1, p.T}, kInf, p.options());
    return attendSelection(p, exactLogits(p), expandUnits(p, {p.validU(), inf, inf}), p.S, o);
}

} // namespace
} // namespace sparqlab::attention::detail

SPARQLAB_METHOD(dense) {
    return {.info = {.id = Method::Dense,
                     .name = "dense",
                     .label = "Dense",
                     .summary = "exact attention over every position",
                     .spec = "SPARQ.md §2.4",
                     .selects = false,
                     .transfer = transfer::dense,
                     .transferFormula = "2·S·d + 2·d"},
            .run = detail::runDense,
            .decode = &detail::denseDecodeKernel()};
}
