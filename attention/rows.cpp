// What the methods of METHODS2.md and METHODS3.md share: a step of one batch row at a time
// (their codebooks, chunk grids and kept sets differ from row to row), sums in a fixed order
// (METHODS3.md §1.4) and Hugging Face's rotate-half RoPE.

#include "method_kit.h"

#include "select.h"

#include <ATen/ATen.h>

#include <cmath>
#include <limits>

namespace sparqlab::attention::detail {

at::Tensor ratioOrZero(const at::Tensor& num, const at::Tensor& den) {
    const at::ScalarType t = den.scalar_type();
    const double tiny = t == at::kDouble ? 1e-300
                        : t == at::kHalf ? 6.103515625e-5 // (half's smallest normal, 2^-14)
                                         : static_cast<double>(std::numeric_limits<float>::min());
    return num / den.clamp_min(tiny);
}

at::Tensor seqSum(const at::Tensor& x, int64_t dim) {
    const int64_t n = x.size(dim);
    if (n == 0) {
        std::vector<int64_t> shape(x.sizes().begin(), x.sizes().end());
        shape.erase(shape.begin() + (dim < 0 ? dim + x.dim() : dim));
        return at::zeros(shape, x.options());
    }
    at::Tensor acc = x.select(dim, 0).clone();
    for (int64_t i = 1; i < n; ++i)
        acc.add_(x.select(dim, i));
    return acc;
}

namespace {

/// Rows [Hq, …] of every (b, t), padded along the last axis, as [B, Hq, T, …].
at::Tensor stackRows(std::vector<at::Tensor>& rows, int64_t B, int64_t T, double floatFill) {
    int64_t width = 0;
    for (const at::Tensor& r : rows)
        if (r.dim() > 1)
            width = std::max(width, r.size(-1));
    for (at::Tensor& r : rows)
        if (r.dim() > 1 && r.size(-1) < width) {
            const bool integral = !at::isFloatingType(r.scalar_type());
            r = at::constant_pad_nd(r, {0, width - r.size(-1)}, integral ? -1.0 : floatFill);
        }
    at::Tensor s = at::stack(rows, 0); // [B·T, Hq, …]
    std::vector<int64_t> shape{B, T};
    shape.insert(shape.end(), s.sizes().begin() + 1, s.sizes().end());
    return s.view(shape).transpose(1, 2).contiguous(); // [B, Hq, T, …]
}

} // namespace

AttentionResult runRows(const Prepared& p, int64_t width, const AttendOptions& o,
                        const std::function<RowResult(const StepRow&)>& fn, double floatFill) {
    const int64_t B = p.B, T = p.T, S = p.S, Hkv = p.Hkv, g = p.g;
    const at::Tensor fi = forwardIndex(p.valid), ci = causalIndex(p.valid); // [B, T, S]
    const at::Tensor z = exactLogits(p);                                    // [B, Hkv, g, T, S]
    at::Tensor sel = at::zeros({B, Hkv, g, T, S}, p.valid.options());
    at::Tensor zAtt = z.clone();
    at::Tensor margin = at::full({B, Hkv, g, T}, kInf, p.options());
    at::Tensor marginRel = margin.clone();
    std::map<std::string, std::vector<at::Tensor>> extras;
    const at::Tensor positions = at::arange(S, p.valid.options().dtype(at::kLong));
    for (int64_t b = 0; b < B; ++b)
        for (int64_t t = 0; t < T; ++t) {
            StepRow row;
            row.b = b;
            row.t = t;
            row.q = p.qg.select(0, b).select(2, t); // [Hkv, g, D]
            row.k = p.k[b];
            row.v = p.v.defined() ? p.v[b] : p.v;
            row.valid = p.valid[b][t];
            row.pos = positions.masked_select(row.valid);
            row.fidx = fi[b][t];
            row.cidx = ci[b][t];
            row.nValid = row.pos.numel();
            RowResult r = fn(row);
            sel.select(0, b).select(2, t).copy_(r.sel.expand({Hkv, g, S}));
            if (r.logits.defined())
                zAtt.select(0, b).select(2, t).copy_(r.logits);
            if (r.margin.defined()) {
                margin.select(0, b).select(2, t).copy_(r.margin.expand({Hkv, g}));
                marginRel.select(0, b).select(2, t).copy_(r.marginRel.expand({Hkv, g}));
            }
            if (o.diagnostics)
                for (auto& [name, x] : r.extra)
                    extras[name].push_back(x);
        }
    AttentionResult out;
    out.y = p.heads(attendOver(p, zAtt, sel));
    out.alpha = at::ones({B, p.Hq, T}, out.y.options());
    out.meanV = meanValue(p);
    fillSelection(p, z, Selection{sel, margin, marginRel}, width, o, out);
    keepExact(p, z, o, out);
    for (auto& [name, rows] : extras)
        out.extra[name] = stackRows(rows, B, T, floatFill);
    return out;
}

std::pair<at::Tensor, at::Tensor> ropeTables(const at::Tensor& positions,
                                             const at::Tensor& invFreq) {
    const at::Tensor f = invFreq.to(at::kDouble);
    const at::Tensor angles = positions.to(at::kDouble).unsqueeze(-1) * f; // [..., D/2]
    const at::Tensor c = angles.cos(), s = angles.sin();
    return {at::cat({c, c}, -1), at::cat({s, s}, -1)};
}

at::Tensor ropeApply(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
    const int64_t h = x.size(-1) / 2;
    const at::Tensor rotated = at::cat({-x.narrow(-1, h, h), x.narrow(-1, 0, h)}, -1);
    return x * cos + rotated * sin;
}

at::Tensor defaultInvFreq(int64_t D) {
    constexpr double kTheta = 10000.0;
    const at::Tensor i = at::arange(0, D, 2, at::kLong).to(at::kFloat) / static_cast<float>(D);
    return (1.0 / at::pow(at::scalar_tensor(kTheta, at::kFloat), i)).to(at::kDouble);
}

} // namespace sparqlab::attention::detail
