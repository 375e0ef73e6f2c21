// KNorm (METHODS3.md §12): the positions whose keys have the smallest L2 norm, whatever the
// query — the observation that low-norm keys draw the most attention (Devoto et al. 2024;
// kvpress's KnormPress), as a decode-step selection of k positions.

#include "attention/method_kit.h"

#include <ATen/ATen.h>

#include <cmath>

namespace sparqlab::attention::detail {
namespace {

AttentionResult runKNorm(const Prepared& p, const AttentionInputs&, const AttentionConfig& c,
                         const AttendOptions& o) {
    // §12.1: G[j] = −‖K_u[j]‖₂ in float64, one ranking for the KV head's group and every step.
    const at::Tensor norms = p.k.to(at::kDouble).norm(2, -1); // [B, Hkv, S]
    const at::Tensor G =
        norms.neg().view({p.B, p.Hkv, 1, 1, p.S}).expand({p.B, p.Hkv, 1, p.T, p.S});
    const Selection sel = selectPositions(p, G, c.k, c.effectiveLocal());
    AttentionResult out = attendSelection(p, exactLogits(p), sel, c.k, o);
    if (o.diagnostics) // §12.1's norms, NaN where a step may not read the key
        out.extra["key_norm"] = p.heads(
            at::where(p.validU(),
                      norms.view({p.B, p.Hkv, 1, 1, p.S}).expand({p.B, p.Hkv, p.g, p.T, p.S}),
                      at::scalar_tensor(NAN, norms.options()))
                .to(p.qg.scalar_type()));
    return out;
}

/// Step 1: every position's key norm, the ones kept (the smallest) in orange.
StepOneView knormStepOne(const StepOneInputs& in) {
    return positionScoresView("<b>Step 1</b> — KNorm ranks the positions by their key's L2 norm "
                              "alone, without the query: the k smallest (orange) are kept",
                              "key norm ‖k_j‖", in.result->output("key_norm")[0][in.head],
                              in.result->selected[0][in.head]);
}

/// §12.3: the kept positions' keys and values and the query; the norms are one number per
/// position, kept beside the cache (S of them read to choose).
double knormTransfer(const TransferArgs& a) {
    return static_cast<double>(a.S) + transfer::kept(a);
}

} // namespace
} // namespace sparqlab::attention::detail

SPARQLAB_METHOD(knorm) {
    return {.info = {.id = Method::KNorm,
                     .name = "knorm",
                     .label = "KNorm",
                     .summary = "the k positions whose keys have the smallest L2 norm, whatever "
                                "the query (Devoto et al. 2024)",
                     .spec = "METHODS3.md §12",
                     .params = {Param::K, Param::Local},
                     .transfer = detail::knormTransfer,
                     .transferFormula = "S + 2·k·d + 2·d",
                     .evalGrid = "k=32,64,128,256 local=k/4"},
            .run = detail::runKNorm,
            .outputs = {{"key_norm", "‖K_u[j]‖₂ per position, NaN where not read (§12.1)"}},
            .stepOne = detail::knormStepOne};
}
