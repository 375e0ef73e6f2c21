// SparQ Attention (SPARQ.md §3): approximate scores from the r largest components of |q|,
// exact attention over the top-k positions by them, and the mean-value reallocation (Eq. 10).
// Its steps 1 and 3 are shared with sparq-top-p (method_kit.h).

#include "attention/method_kit.h"
#include "attention/temperature.h"

#include <ATen/ATen.h>

namespace sparqlab::attention::detail {

/// The unit's decode kernel (decode.cpp beside this file).
const DecodeKernel& sparqDecodeKernel();

SparqStep1 sparqStep1(const Prepared& p, const AttentionConfig& c) {
    if (c.r < 1)
        fail("r must be at least 1, got " + std::to_string(c.r));
    const int64_t rEff = std::min(c.r, p.D);
    // §3.1: the r_eff largest components of |q| (Eq. 7), per group or per head.
    at::Tensor a = p.qg.abs();
    if (c.components == ComponentSelect::Group)
        a = a.sum(2, /*keepdim=*/true);
    const at::Tensor i1 = topnIndices(a, rEff).expand({p.B, p.Hkv, p.g, p.T, rEff});
    const at::Tensor qHat = p.qg.gather(-1, i1);
    // q̂·K̂ as q with every other component zeroed, dotted with the full rows: the same sum
    // (exact zeros added), as one product for all steps.
    const at::Tensor qMasked = at::zeros_like(p.qg).scatter_(-1, i1, qHat);
    const at::Tensor raw =
        at::matmul(qMasked.reshape({p.B, p.Hkv, p.g * p.T, p.D}), p.k.transpose(-1, -2))
            .view({p.B, p.Hkv, p.g, p.T, p.S});
    // §3.2: temperature per query head and step (Eq. 9 by default).
    if (c.tau == TauMode::Fixed && (!std::isfinite(c.tauValue) || c.tauValue <= 0))
        fail("the temperature must be a finite positive number");
    const at::Tensor tau =
        sparqTemperature(c.tau, c.tauValue, qHat.abs().sum(-1), p.qg.abs().sum(-1), p.D, rEff);
    return {approxLogits(p, raw, tau), tau, i1, qHat};
}

AttentionResult sparqStep3(const Prepared& p, const AttentionConfig& c, const SparqStep1& s1,
                           const at::Tensor& sHat, const at::Tensor& mask, const at::Tensor& z,
                           const AttendOptions& o) {
    const at::Tensor yTopk = attendOver(p, z, mask);
    const at::Tensor vbar = meanValue(p).unsqueeze(2);
    // α: the approximate mass of the chosen positions and of the sink, which is always chosen.
    const at::Tensor alpha =
        c.meanValue
            ? withSink(p, at::where(mask, sHat, at::scalar_tensor(0, sHat.options())).sum(-1), sHat)
            : at::ones_like(s1.tau);
    const at::Tensor a = alpha.unsqueeze(-1);
    AttentionResult out;
    out.y = p.heads(a * yTopk + (1 - a) * vbar);
    out.yTopk = p.heads(yTopk);
    out.alpha = p.heads(alpha);
    out.tau = p.heads(s1.tau);
    out.compIdx = p.heads(s1.components);
    out.meanV = vbar.squeeze(2);
    if (o.keepScores) {
        out.zHat = p.heads(s1.zHat);
        out.sHat = p.heads(sHat);
    }
    return out;
}

namespace {

AttentionResult runSparq(const Prepared& p, const AttentionInputs&, const AttentionConfig& c,
                         const AttendOptions& o) {
    // Step 1: approximate scores from the r largest components of |q|.
    const SparqStep1 s1 = sparqStep1(p, c);
    const at::Tensor sHat = probabilities(p, s1.zHat);
    // Step 2: top-k positions by the approximate scores, exact attention over them (Eq. 8).
    const Selection sel = selectPositions(p, groupRankScore(s1.zHat, sHat, c.gqa), c.k,
                                          c.effectiveLocal(), o.diagnostics);
    const at::Tensor z = exactLogits(p);
    // Step 3: α and the mean-value reallocation (Eq. 10).
    AttentionResult out = sparqStep3(p, c, s1, sHat, sel.mask, z, o);
    fillSelection(p, z, sel, c.k, o, out);
    keepExact(p, z, o, out);
    return out;
}

double sparqTransfer(const TransferArgs& a) {
    // Writing the new k and v, reading and writing v̄ (the paper's 4·d).
    return 1.0 * a.S * a.r + 1.0 * a.k * a.kv() + a.kv() + 2.0 * a.v();
}

} // namespace
} // namespace sparqlab::attention::detail

SPARQLAB_METHOD(sparq) {
    return {
        .info =
            {.id = Method::Sparq,
             .name = "sparq",
             .label = "SparQ",
             .summary =
                 "approximate scores from the r largest |q| components, exact attention over the "
                 "top-k, mean-value reallocation (Ribar et al. 2024)",
             .spec = "SPARQ.md §3",
             .params = {Param::R, Param::K, Param::Local, Param::Tau, Param::Gqa, Param::MeanValue,
                        Param::Components},
             .transfer = detail::sparqTransfer,
             .transferFormula = "S·r + 2·k·d + 4·d",
             .evalGrid = "r=8,16,32,64 k=128 local=k/4"},
        .run = detail::runSparq,
        .decode = &detail::sparqDecodeKernel()};
}
