#include "select.h"

#include <ATen/ATen.h>

#include <limits>

namespace sparqlab::attention {

namespace {
constexpr double kInf = std::numeric_limits<double>::infinity();

at::Tensor stableSortIndices(const at::Tensor& x) {
    return std::get<1>(at::sort(x, /*stable=*/true, /*dim=*/-1, /*descending=*/true));
}
} // namespace

at::Tensor rankOrder(const at::Tensor& score, const at::Tensor& category) {
    // NaN ranks as −∞ (§2.3). Two stable sorts: by score, then by category.
    const at::Tensor s =
        at::where(at::isnan(score), at::scalar_tensor(-kInf, score.options()), score);
    at::Tensor order = stableSortIndices(s);
    if (!category.defined())
        return order;
    const at::Tensor byCategory = stableSortIndices(category.gather(-1, order));
    return order.gather(-1, byCategory);
}

Selection select(const at::Tensor& score, const at::Tensor& cand, const at::Tensor& forced,
                 const at::Tensor& n) {
    const int64_t S = score.size(-1);
    const at::Tensor candB = cand.expand_as(score);
    const at::Tensor forcedB = forced.expand_as(score).logical_and(candB);
    // Category 2: forced, 1: other candidates, 0: never selected.
    const at::Tensor category =
        forcedB.to(at::kLong) * 2 + candB.logical_and(forcedB.logical_not()).to(at::kLong);
    const at::Tensor order = rankOrder(score, category);
    const at::Tensor rank =
        at::empty_like(order).scatter_(-1, order, at::arange(S, order.options()).expand_as(order));
    // n broadcasts to the leading shape of score (a single count applies to every row).
    const std::vector<int64_t> rows(score.sizes().begin(), score.sizes().end() - 1);
    const at::Tensor nB =
        (n.numel() == 1 ? n.reshape({}) : n).to(at::kLong).expand(rows).unsqueeze(-1);
    const at::Tensor mask = rank.lt(nB);

    const at::Tensor s =
        at::where(at::isnan(score), at::scalar_tensor(-kInf, score.options()), score);
    const at::Tensor ranked = mask.logical_and(forcedB.logical_not());
    const at::Tensor unselected = candB.logical_and(mask.logical_not());
    const at::Tensor lo = at::where(ranked, s, at::scalar_tensor(kInf, s.options())).amin(-1);
    const at::Tensor hi = at::where(unselected, s, at::scalar_tensor(-kInf, s.options())).amax(-1);
    const at::Tensor hasBoth = ranked.any(-1).logical_and(unselected.any(-1));
    const at::Tensor inf = at::scalar_tensor(kInf, lo.options());
    const at::Tensor margin = at::where(hasBoth, lo - hi, inf);
    const at::Tensor scaleAbs = at::maximum(lo.abs(), hi.abs());
    const at::Tensor usable =
        hasBoth.logical_and(scaleAbs.gt(0)).logical_and(at::isfinite(scaleAbs));
    const at::Tensor safeScale = at::where(scaleAbs.gt(0), scaleAbs, at::ones_like(scaleAbs));
    const at::Tensor rel =
        at::where(margin.eq(0), at::zeros_like(margin), at::where(usable, margin / safeScale, inf));
    return {mask, margin, rel};
}

at::Tensor topnIndices(const at::Tensor& x, int64_t n) {
    const at::Tensor order = rankOrder(x).narrow(-1, 0, n);
    return std::get<0>(at::sort(order, /*dim=*/-1));
}

at::Tensor maskToIndices(const at::Tensor& mask, int64_t width) {
    const int64_t S = mask.size(-1);
    const at::Tensor pos = at::arange(S, mask.options().dtype(at::kLong)).expand(mask.sizes());
    const at::Tensor key = at::where(mask, pos, at::scalar_tensor(S + 1, pos.options()));
    const at::Tensor sorted = std::get<0>(at::sort(key, /*dim=*/-1)).narrow(-1, 0, width);
    return at::where(sorted.gt(S), at::scalar_tensor(-1, sorted.options()), sorted);
}

at::Tensor causalIndex(const at::Tensor& valid) {
    const at::Tensor v = valid.to(at::kLong);
    const at::Tensor after = v.flip({-1}).cumsum(-1).flip({-1}) - v;
    return at::where(valid, after, at::scalar_tensor(-1, after.options()));
}

at::Tensor forwardIndex(const at::Tensor& valid) {
    const at::Tensor v = valid.to(at::kLong);
    const at::Tensor before = v.cumsum(-1) - v;
    return at::where(valid, before, at::scalar_tensor(-1, before.options()));
}

} // namespace sparqlab::attention
