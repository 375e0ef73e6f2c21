// The oracle top-p budget (METHODS.md §6.2, Twilight 2025): the fewest exact top positions
// holding mass p, at most k.

#include "attention/method_kit.h"
#include "attention/top_p.h"

#include <ATen/ATen.h>

namespace sparqlab::attention::detail {

/// The unit's decode kernel (decode.cpp beside this file).
const DecodeKernel& oracleTopPDecodeKernel();
namespace {

AttentionResult runOracleTopP(const Prepared& p, const AttentionInputs&, const AttentionConfig& c,
                              const AttendOptions& o) {
    const at::Tensor z = exactLogits(p);
    const at::Tensor s = probabilities(p, z);
    const TopP t = topPSelect(p, groupRankScore(z, s, c.gqa), unitMass(s, c.gqa), c,
                              unitSinkMass(p, s, c.gqa));
    AttentionResult out = attendSelection(p, z, t.sel, c.k, o);
    topPOutputs(p, t, o, out);
    return out;
}

StepOneView oracleTopPStepOne(const StepOneInputs& in) {
    const int64_t n = in.result->count[0][in.head].item<int64_t>();
    return topPMassCurve(in.exact, in.config->p, n, in.config->gqa,
                         "<b>Step 1</b> — the exact attention sorted and accumulated: Oracle top-p "
                         "keeps the fewest positions whose mass reaches p = " +
                             numberText(in.config->p) + " (here " + std::to_string(n) +
                             ", marked), at most k");
}

double oracleTopPTransfer(const TransferArgs& a) {
    return 1.0 * a.S * a.d + transfer::count(a) * a.valueWithKey() + a.kv();
}

} // namespace
} // namespace sparqlab::attention::detail

SPARQLAB_METHOD(oracle_top_p) {
    return {.info = {.id = Method::OracleTopP,
                     .name = "oracle-top-p",
                     .label = "Oracle top-p",
                     .summary =
                         "the fewest exact top positions holding mass p, at most k (Twilight 2025)",
                     .spec = "METHODS.md §6.2",
                     .params = {Param::P, Param::K, Param::Local, Param::Gqa},
                     .budgetVaries = true,
                     .transfer = detail::oracleTopPTransfer,
                     .transferFormula = "S·d + n·d + 2·d",
                     .evalGrid = "p=0.5,0.8,0.9,0.95,0.99"},
            .run = detail::runOracleTopP,
            .decode = &detail::oracleTopPDecodeKernel(),
            .stepOne = detail::oracleTopPStepOne};
}
