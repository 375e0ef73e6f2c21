// Top-p budgets (METHODS.md §6, Twilight): the fewest positions of the selection order whose
// mass reaches p, at least the local window, at most k_max; on exact scores (oracle-top-p) and
// on SparQ's approximate ones (sparq-top-p, with SparQ's steps 1 and 3).

#include "top_p.h"
#include "method_kit.h"

#include <ATen/ATen.h>

namespace sparqlab::attention::detail {

/// §6.1 for ranking score G and unit mass m, both [B, Hkv, U, T, S].
TopP topPSelect(const Prepared& p, const at::Tensor& G, const at::Tensor& m,
                const AttentionConfig& c, const at::Tensor& sinkMass) {
    if (!(c.p > 0 && c.p <= 1))
        fail("the top-p mass p must lie in (0, 1], got " + std::to_string(c.p));
    const int64_t l = c.effectiveLocal();
    checkBudget(c.k, l);
    const at::Tensor kEff = p.nValid.clamp_max(c.k);
    const at::Tensor lEff = kEff.clamp_max(l);
    const at::Tensor lo = lEff.clamp_min(1).view({p.B, 1, 1, p.T});
    const at::Tensor forced = mostRecent(p, lEff).expand_as(G);
    const at::Tensor cand = p.validU().expand_as(G);
    const at::Tensor category =
        forced.to(at::kLong) * 2 + cand.logical_and(forced.logical_not()).to(at::kLong);
    const at::Tensor order = rankOrder(G, category);
    const at::Tensor mass = at::where(cand, m, at::scalar_tensor(0, m.options()));
    at::Tensor cum = mass.gather(-1, order).cumsum(-1); // cum[i]: the first i+1 positions
    if (sinkMass.defined())                             // and the sink, always kept
        cum = cum + sinkMass.unsqueeze(-1);
    const at::Tensor kB = kEff.view({p.B, 1, 1, p.T}).expand(cum.sizes().slice(0, 4));
    at::Tensor n;
    if (c.p >= 1) { // no rounding stops it early
        n = kB.clone();
    } else {
        const at::Tensor np = cum.lt(c.p).sum(-1) + 1; // smallest n ≥ 1 with cum[n−1] ≥ p
        n = at::minimum(at::maximum(np, lo.expand_as(np)), kB);
    }
    TopP r;
    r.sel = expandUnits(p, select(G, cand, forced, n));
    const at::Tensor at_ = cum.gather(-1, (n - 1).unsqueeze(-1)).squeeze(-1);
    const at::Tensor before = sinkMass.defined() ? sinkMass.expand_as(at_) : at::zeros_like(at_);
    const at::Tensor prev =
        at::where(n.ge(2), cum.gather(-1, (n - 2).clamp_min(0).unsqueeze(-1)).squeeze(-1), before);
    const std::vector<int64_t> full{p.B, p.Hkv, p.g, p.T};
    r.count = n.expand(full);
    r.est = at_.expand(full);
    r.margin =
        (c.p >= 1 ? at::full_like(at_, kInf) : at::minimum((at_ - c.p).abs(), (prev - c.p).abs()))
            .expand(full);
    return r;
}

/// §2.3: the unit mass, per head or the group's mean probability.
at::Tensor unitMass(const at::Tensor& probs, GroupSelect gs) {
    return gs == GroupSelect::PerHead ? probs : probs.mean(2, /*keepdim=*/true);
}

at::Tensor unitSinkMass(const Prepared& p, const at::Tensor& probs, GroupSelect gs) {
    const at::Tensor s = sinkShare(p, probs);
    if (!s.defined())
        return s;
    return gs == GroupSelect::PerHead ? s : s.mean(2, /*keepdim=*/true);
}

void topPOutputs(const Prepared& p, const TopP& t, const AttendOptions& o, AttentionResult& out) {
    if (o.diagnostics) {
        out.count = p.heads(t.count);
        out.estMass = p.heads(t.est);
        out.massMargin = p.heads(t.margin);
    }
}

std::string numberText(double x) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", x);
    return buf;
}

StepOneView topPMassCurve(const at::Tensor& scores, double p, int64_t count, GroupSelect gqa,
                          const std::string& caption) {
    StepOneView v;
    v.caption = caption;
    if (gqa != GroupSelect::PerHead) // the group's shared ranking decides n, not this curve alone
        v.caption += " (with GQA the group's summed mass decides n: this head's own curve may "
                     "reach p earlier or later)";
    v.xLabel = "rank of a position (largest first)";
    v.yLabel = "cumulative mass";
    v.curve = true;
    v.cut = p;
    v.x0 = 1;
    const at::Tensor sorted = std::get<0>(scores.to(at::kDouble).sort(-1, /*descending=*/true));
    const at::Tensor cum = sorted.cumsum(-1).contiguous();
    v.values.assign(cum.data_ptr<double>(), cum.data_ptr<double>() + cum.numel());
    for (int64_t i = 0; i < cum.numel(); ++i)
        v.used.push_back(i < count ? 1 : 0);
    return v;
}

} // namespace sparqlab::attention::detail
