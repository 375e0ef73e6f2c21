#include "budget_stats.h"

#include "method_kit.h"

#include <ATen/ATen.h>

namespace sparqlab::attention {

using namespace detail;

KMass kMass(const at::Tensor& q, const at::Tensor& k, const at::Tensor& valid,
            const std::vector<double>& ps, const AttentionConfig& config) {
    if (q.dim() != 3)
        fail("q must be [B, Hq, D], got " + shapeOf(q));
    const Prepared p = prepare(q.unsqueeze(2), k, {}, valid, config, /*validate=*/true);
    const at::Tensor s = probabilities(p, exactLogits(p)); // [B, Hkv, g, 1, S]
    // The sink is always kept: its share counts towards every p (docs/sinks-chunks-nope-mla.md).
    const at::Tensor sink = p.sinks.defined() ? sinkShare(p, s).unsqueeze(-1) : at::Tensor();
    const at::Tensor cand = p.validU().expand_as(s);
    const at::Tensor order = rankOrder(s, cand.to(at::kLong));
    at::Tensor cum =
        at::where(cand, s, at::scalar_tensor(0, s.options())).gather(-1, order).cumsum(-1);
    if (sink.defined())
        cum = cum + sink;
    const at::Tensor nv = p.nValid.view({p.B, 1, 1, 1}).expand(cum.sizes().slice(0, 4));
    std::vector<at::Tensor> counts, margins;
    for (double x : ps) {
        if (!(x > 0 && x <= 1))
            fail("k_mass needs 0 < p <= 1, got " + std::to_string(x));
        const at::Tensor n = x < 1 ? at::minimum(cum.lt(x).sum(-1) + 1, nv) : nv.clone();
        const at::Tensor at_ = cum.gather(-1, (n - 1).unsqueeze(-1)).squeeze(-1);
        const at::Tensor prev =
            at::where(n.ge(2), cum.gather(-1, (n - 2).clamp_min(0).unsqueeze(-1)).squeeze(-1),
                      at::zeros_like(at_));
        const at::Tensor m =
            x < 1 ? at::minimum((at_ - x).abs(), (prev - x).abs()) : at::full_like(at_, kInf);
        counts.push_back(p.heads(n).squeeze(2));
        margins.push_back(p.heads(m).squeeze(2));
    }
    return {at::stack(counts), at::stack(margins)};
}

Recall recallAtK(const at::Tensor& q, const at::Tensor& k, const at::Tensor& valid,
                 const at::Tensor& indices, const AttentionConfig& config) {
    if (q.dim() != 3)
        fail("q must be [B, Hq, D], got " + shapeOf(q));
    const Prepared p = prepare(q.unsqueeze(2), k, {}, valid, config, /*validate=*/true);
    const at::Tensor idx = indices.to(at::kLong);
    if (idx.dim() != 3 || idx.size(0) != p.B || idx.size(1) != p.Hq)
        fail("indices must be [B, Hq, W], got " + shapeOf(indices));
    // −1 padding goes to a spare column S.
    const at::Tensor slot = at::where(idx.lt(0), at::full_like(idx, p.S), idx.clamp_max(p.S));
    const at::Tensor set = at::zeros({p.B, p.Hq, p.S + 1}, idx.options().dtype(at::kBool))
                               .scatter_(-1, slot, true)
                               .narrow(-1, 0, p.S)
                               .view({p.B, p.Hkv, p.g, 1, p.S})
                               .logical_and(p.validU());
    const at::Tensor n = set.sum(-1); // [B, Hkv, g, 1]
    if (n.lt(1).any().item<bool>())
        fail("recall needs a non-empty set per head");
    const at::Tensor z = exactLogits(p);
    const Selection O = select(z, p.validU().expand_as(z), at::zeros_like(set), n);
    const at::Tensor rec =
        O.mask.logical_and(set).sum(-1).to(z.scalar_type()) / n.to(z.scalar_type());
    return {p.heads(rec).squeeze(2), p.heads(O.marginRel).squeeze(2)};
}

} // namespace sparqlab::attention
