// The observation window's votes and their pooling (METHODS.md §7.1–7.2), written once for the
// methods that rank a prompt by them: SnapKV, AdaKV and RocketKV's first stage.

#include "method_kit.h"

#include "select.h"

#include <ATen/ATen.h>

namespace sparqlab::attention::detail {

void checkWindowQueries(const Prepared& p, const at::Tensor& qWin, int64_t w, const char* method) {
    if (!qWin.defined())
        fail(std::string(method) + " needs the queries of the last " + std::to_string(w) +
             " positions (a capture made with --all-queries)");
    if (qWin.dim() != 5 || qWin.size(0) != p.B || qWin.size(1) != p.Hq || qWin.size(2) != p.T ||
        qWin.size(3) != w || qWin.size(4) != p.D)
        fail("the window queries must be [B, Hq, T, w, D] = [" + std::to_string(p.B) + ", " +
             std::to_string(p.Hq) + ", " + std::to_string(p.T) + ", " + std::to_string(w) + ", " +
             std::to_string(p.D) + "], got " + shapeOf(qWin));
}

WindowVotes windowVotes(const Prepared& p, const at::Tensor& qWinAll, int64_t w, int64_t t0,
                        int64_t n, bool validate) {
    const int64_t B = p.B, Hkv = p.Hkv, g = p.g, S = p.S, D = p.D;
    WindowVotes r;
    r.valid = p.valid.narrow(1, t0, n); // [B, n, S]
    r.nValid = p.nValid.narrow(1, t0, n);
    const at::Tensor ci = causalIndex(r.valid);
    // §7.1: slot i holds the query of the position with cidx = w − 1 − i, if there is one.
    const at::Tensor slots = at::arange(w, r.nValid.options());
    const at::Tensor exists = slots.view({1, 1, w}).ge((w - r.nValid).unsqueeze(-1)); // [B, n, w]
    at::Tensor qw = qWinAll.narrow(2, t0, n).to(p.qg.device(), p.qg.scalar_type()); // [B,Hq,n,w,D]
    const at::Tensor ex = exists.view({B, 1, n, w, 1});
    if (validate && !at::isfinite(qw).logical_or(ex.logical_not()).all().item<bool>())
        throw NonFiniteInputError("the window queries have non-finite entries in slots of valid "
                                  "positions");
    qw = at::where(ex, qw, at::scalar_tensor(0, qw.options()));
    r.window = r.valid.logical_and(ci.lt(w));
    r.prefix = r.valid.logical_and(ci.ge(w));
    // §7.2: each window query attends causally: slot i sees valid j with cidx ≥ w − 1 − i.
    const at::Tensor dots = at::matmul(qw.reshape({B, Hkv, g * n * w, D}), p.k.transpose(-1, -2))
                                .view({B, Hkv, g, n, w, S});
    const at::Tensor vis = r.valid.unsqueeze(2)
                               .logical_and(ci.unsqueeze(2).ge((w - 1 - slots).view({1, 1, w, 1})))
                               .logical_and(exists.unsqueeze(-1)); // [B, n, w, S]
    const at::Tensor visU = vis.view({B, 1, 1, n, w, S});
    at::Tensor a = softmaxWithSink(scaledLogits(p, dots).masked_fill(visU.logical_not(), -kInf),
                                   p.sinks.defined() ? p.sinks.unsqueeze(-1) : p.sinks);
    a = at::where(visU, a, at::scalar_tensor(0, a.options()));
    // The sum over the slots left to right (METHODS3.md §1.4: exactly tied votes stay tied).
    at::Tensor votes = a.select(4, 0).clone();
    for (int64_t i = 1; i < w; ++i)
        votes.add_(a.select(4, i));
    r.votes = votes * r.prefix.view({B, 1, 1, n, S}); // [B, Hkv, g, n, S]
    return r;
}

at::Tensor poolPrefix(const at::Tensor& unit, const WindowVotes& wv, int64_t kernel,
                      Pooling pooling) {
    const int64_t B = unit.size(0), Hkv = unit.size(1), U = unit.size(2), n = unit.size(3),
                  S = unit.size(4);
    // Pooling over the prefix in forward-index order, kernel/2 on each side (−inf or 0 padding).
    const at::Tensor fi = forwardIndex(wv.valid);
    const bool isMax = pooling == Pooling::Max;
    const double fill = isMax ? -kInf : 0.0;
    const at::Tensor dst = at::where(wv.prefix, fi, at::full_like(fi, S))
                               .view({B, 1, 1, n, S})
                               .expand({B, Hkv, U, n, S});
    const at::Tensor packed = at::full({B, Hkv, U, n, S + 1}, fill, unit.options())
                                  .scatter_(-1, dst, unit)
                                  .narrow(-1, 0, S);
    const int64_t h = kernel / 2;
    const at::Tensor padded = at::constant_pad_nd(packed, {h, h}, fill);
    const at::Tensor win = padded.unfold(-1, kernel, 1); // [B, Hkv, U, n, S, kernel]
    at::Tensor pooledPacked;
    if (isMax) {
        pooledPacked = std::get<0>(win.max(-1));
    } else { // the taps left to right (§1.4)
        pooledPacked = win.select(-1, 0).clone();
        for (int64_t i = 1; i < kernel; ++i)
            pooledPacked.add_(win.select(-1, i));
        pooledPacked.div_(static_cast<double>(kernel));
    }
    const at::Tensor pf = wv.prefix.view({B, 1, 1, n, S});
    return at::where(
        pf,
        pooledPacked.gather(-1, fi.clamp_min(0).view({B, 1, 1, n, S}).expand({B, Hkv, U, n, S})),
        at::scalar_tensor(0, unit.options()));
}

WindowKeep windowKeep(const Prepared& p, const at::Tensor& qWinAll, const at::Tensor& kAny,
                      int64_t w, int64_t kernel, Pooling pooling, bool perHead, int64_t t0,
                      int64_t n, bool validate) {
    const int64_t B = p.B, Hkv = p.Hkv, S = p.S;
    const WindowVotes wv = windowVotes(p, qWinAll, w, t0, n, validate);
    const at::Tensor k = kAny.to(wv.nValid.device()); // the budgets where the scores are
    const at::Tensor compress = wv.nValid.gt(k);      // [B, n]
    // The group's votes summed head by head (METHODS3.md §1.4).
    const at::Tensor unit = perHead ? wv.votes : seqSum(wv.votes, 2).unsqueeze(2); // [B,Hkv,U,n,S]
    const int64_t U = unit.size(2);
    const at::Tensor pooled = poolPrefix(unit, wv, kernel, pooling);
    const at::Tensor pf = wv.prefix.view({B, 1, 1, n, S});
    const at::Tensor zero = at::scalar_tensor(0, unit.options());
    // The best k − w prefix positions, in rows that compress; the window is always kept.
    const at::Tensor nSel = at::where(compress, k - w, at::zeros_like(wv.nValid));
    const at::Tensor cand =
        pf.logical_and(compress.view({B, 1, 1, n, 1})).expand({B, Hkv, U, n, S});
    Selection pre = select(pooled, cand, at::zeros_like(cand), nSel.view({B, 1, 1, n}));
    const at::Tensor cm = compress.view({B, 1, 1, n});
    WindowKeep r;
    r.sel.mask = at::where(cm.unsqueeze(-1), pre.mask.logical_or(wv.window.view({B, 1, 1, n, S})),
                           wv.valid.view({B, 1, 1, n, S}));
    r.sel.margin = at::where(cm, pre.margin, at::full_like(pre.margin, kInf));
    r.sel.marginRel = at::where(cm, pre.marginRel, at::full_like(pre.marginRel, kInf));
    r.votes = at::where(cm.unsqueeze(-1), unit, zero);
    r.pooled = at::where(cm.unsqueeze(-1), pooled, zero);
    return r;
}

} // namespace sparqlab::attention::detail
