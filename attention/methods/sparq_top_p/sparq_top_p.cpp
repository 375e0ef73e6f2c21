// SparQ top-p (METHODS.md §6.3): SparQ's steps 1 and 3 with a top-p budget on its approximate
// scores instead of a fixed k.

#include "attention/method_kit.h"
#include "attention/top_p.h"

#include <ATen/ATen.h>

namespace sparqlab::attention::detail {

/// The unit's decode kernel (decode.cpp beside this file).
const DecodeKernel& sparqTopPDecodeKernel();
namespace {

AttentionResult runSparqTopP(const Prepared& p, const AttentionInputs&, const AttentionConfig& c,
                             const AttendOptions& o) {
    const SparqStep1 s1 = sparqStep1(p, c);
    const at::Tensor sHat = probabilities(p, s1.zHat);
    const TopP t = topPSelect(p, groupRankScore(s1.zHat, sHat, c.gqa), unitMass(sHat, c.gqa), c,
                              unitSinkMass(p, sHat, c.gqa));
    const at::Tensor z = exactLogits(p);
    AttentionResult out = sparqStep3(p, c, s1, sHat, t.sel.mask, z, o); // SparQ's Eq. 10
    fillSelection(p, z, t.sel, c.k, o, out);
    topPOutputs(p, t, o, out);
    keepExact(p, z, o, out);
    return out;
}

StepOneView sparqTopPStepOne(const StepOneInputs& in) {
    const int64_t n = in.result->count[0][in.head].item<int64_t>();
    return topPMassCurve(
        in.result->sHat[0][in.head], in.config->p, n, in.config->gqa,
        "<b>Step 1</b> — SparQ's approximate scores ŝ (from r = " + std::to_string(in.config->r) +
            " components of q) sorted and accumulated: the fewest positions "
            "whose ŝ mass reaches p = " +
            numberText(in.config->p) + " (here " + std::to_string(n) + ", marked), at most k");
}

double sparqTopPTransfer(const TransferArgs& a) {
    return 1.0 * a.S * a.r + transfer::count(a) * a.kv() + a.kv() + 2.0 * a.v();
}

} // namespace
} // namespace sparqlab::attention::detail

SPARQLAB_METHOD(sparq_top_p) {
    return {.info = {.id = Method::SparqTopP,
                     .name = "sparq-top-p",
                     .label = "SparQ top-p",
                     .summary =
                         "SparQ with a top-p budget on its approximate scores instead of a fixed k",
                     .spec = "METHODS.md §6.3",
                     .params = {Param::P, Param::R, Param::K, Param::Local, Param::Tau, Param::Gqa,
                                Param::MeanValue, Param::Components},
                     .budgetVaries = true,
                     .transfer = detail::sparqTopPTransfer,
                     .transferFormula = "S·r + 2·n·d + 4·d",
                     .evalGrid = "p=0.8,0.9,0.95 r=16,32"},
            .run = detail::runSparqTopP,
            .decode = &detail::sparqTopPDecodeKernel(),
            .stepOne = detail::sparqTopPStepOne};
}
