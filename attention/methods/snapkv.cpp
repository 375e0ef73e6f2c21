// SnapKV (METHODS.md §7): the observation window's queries vote over the prefix, the votes are
// pooled along the prefix, and the best k − w prefix positions are kept with the window.

#include "attention/detail.h"

#include <ATen/ATen.h>

namespace sparqlab::attention::detail {

namespace {

/// SnapKV for the steps [t0, t0 + n): the kept set [B, Hkv, U, n, S], its margins, and the
/// votes and pooled votes (zero outside the prefix and in rows that keep everything).
struct Snap {
    Selection sel;
    at::Tensor votes, pooled;
};

Snap snapSteps(const Prepared& p, const at::Tensor& qWinAll, const AttentionConfig& c, int64_t t0,
               int64_t n, bool validate) {
    const int64_t B = p.B, Hkv = p.Hkv, g = p.g, S = p.S, D = p.D, w = c.snapWindow;
    const at::Tensor valid = p.valid.narrow(1, t0, n); // [B, n, S]
    const at::Tensor nValid = p.nValid.narrow(1, t0, n);
    const at::Tensor ci = causalIndex(valid);
    // §7.1: slot i holds the query of the position with cidx = w − 1 − i, if there is one.
    const at::Tensor slots = at::arange(w, nValid.options());
    const at::Tensor exists = slots.view({1, 1, w}).ge((w - nValid).unsqueeze(-1)); // [B, n, w]
    at::Tensor qw = qWinAll.narrow(2, t0, n).to(p.qg.scalar_type()); // [B, Hq, n, w, D]
    const at::Tensor ex = exists.view({B, 1, n, w, 1});
    if (validate && !at::isfinite(qw).logical_or(ex.logical_not()).all().item<bool>())
        throw NonFiniteInputError("the window queries have non-finite entries in slots of valid "
                                  "positions");
    qw = at::where(ex, qw, at::scalar_tensor(0, qw.options()));
    const at::Tensor compress = nValid.gt(c.k); // [B, n]
    const at::Tensor window = valid.logical_and(ci.lt(w));
    const at::Tensor prefix = valid.logical_and(ci.ge(w));
    // §7.2: each window query attends causally: slot i sees valid j with cidx ≥ w − 1 − i.
    const at::Tensor dots = at::matmul(qw.reshape({B, Hkv, g * n * w, D}), p.k.transpose(-1, -2))
                                .view({B, Hkv, g, n, w, S});
    const at::Tensor vis = valid.unsqueeze(2)
                               .logical_and(ci.unsqueeze(2).ge((w - 1 - slots).view({1, 1, w, 1})))
                               .logical_and(exists.unsqueeze(-1)); // [B, n, w, S]
    const at::Tensor visU = vis.view({B, 1, 1, n, w, S});
    at::Tensor a = softmaxWithSink(scaledLogits(p, dots).masked_fill(visU.logical_not(), -kInf),
                                   p.sinks.defined() ? p.sinks.unsqueeze(-1) : p.sinks);
    a = at::where(visU, a, at::scalar_tensor(0, a.options()));
    const at::Tensor votes = a.sum(4) * prefix.view({B, 1, 1, n, S}); // [B, Hkv, g, n, S]
    const at::Tensor unit =
        c.gqa == GroupSelect::PerHead ? votes : votes.sum(2, /*keepdim=*/true); // [B,Hkv,U,n,S]
    const int64_t U = unit.size(2);
    // Pooling over the prefix in forward-index order, kernel/2 on each side (−inf or 0 padding).
    const at::Tensor fi = forwardIndex(valid);
    const bool isMax = c.pooling == Pooling::Max;
    const double fill = isMax ? -kInf : 0.0;
    const at::Tensor dst =
        at::where(prefix, fi, at::full_like(fi, S)).view({B, 1, 1, n, S}).expand({B, Hkv, U, n, S});
    const at::Tensor packed = at::full({B, Hkv, U, n, S + 1}, fill, unit.options())
                                  .scatter_(-1, dst, unit)
                                  .narrow(-1, 0, S);
    const int64_t h = c.kernel / 2;
    const at::Tensor padded = at::constant_pad_nd(packed, {h, h}, fill);
    const at::Tensor win = padded.unfold(-1, c.kernel, 1); // [B, Hkv, U, n, S, kernel]
    const at::Tensor pooledPacked = isMax ? std::get<0>(win.max(-1)) : win.sum(-1) / c.kernel;
    const at::Tensor pf = prefix.view({B, 1, 1, n, S});
    const at::Tensor zero = at::scalar_tensor(0, unit.options());
    const at::Tensor pooled = at::where(
        pf,
        pooledPacked.gather(-1, fi.clamp_min(0).view({B, 1, 1, n, S}).expand({B, Hkv, U, n, S})),
        zero);
    // The best k − w prefix positions, in rows that compress; the window is always kept.
    const at::Tensor nSel =
        at::where(compress, at::full_like(nValid, c.k - w), at::zeros_like(nValid));
    const at::Tensor cand =
        pf.logical_and(compress.view({B, 1, 1, n, 1})).expand({B, Hkv, U, n, S});
    Selection pre = select(pooled, cand, at::zeros_like(cand), nSel.view({B, 1, 1, n}));
    const at::Tensor cm = compress.view({B, 1, 1, n});
    Snap r;
    r.sel.mask = at::where(cm.unsqueeze(-1), pre.mask.logical_or(window.view({B, 1, 1, n, S})),
                           valid.view({B, 1, 1, n, S}));
    r.sel.margin = at::where(cm, pre.margin, at::full_like(pre.margin, kInf));
    r.sel.marginRel = at::where(cm, pre.marginRel, at::full_like(pre.marginRel, kInf));
    r.votes = at::where(cm.unsqueeze(-1), unit, zero);
    r.pooled = at::where(cm.unsqueeze(-1), pooled, zero);
    return r;
}

AttentionResult runSnapKV(const Prepared& p, const AttentionInputs& in, const AttentionConfig& c,
                          const AttendOptions& o) {
    const at::Tensor& qWin = in.qWin;
    const int64_t w = c.snapWindow;
    if (w < 1 || c.k < w)
        fail("snapkv needs a window w >= 1 and k >= w, got w = " + std::to_string(w) +
             ", k = " + std::to_string(c.k));
    if (c.kernel < 1 || c.kernel % 2 == 0)
        fail("snapkv needs an odd pooling kernel >= 1, got " + std::to_string(c.kernel));
    if (c.gqa == GroupSelect::SumLogits)
        fail("snapkv takes sum-probs or per-head, not sum-logits");
    if (!qWin.defined())
        fail("snapkv needs the queries of the last " + std::to_string(w) +
             " positions (a capture made with --all-queries)");
    if (qWin.dim() != 5 || qWin.size(0) != p.B || qWin.size(1) != p.Hq || qWin.size(2) != p.T ||
        qWin.size(3) != w || qWin.size(4) != p.D)
        fail("the window queries must be [B, Hq, T, w, D] = [" + std::to_string(p.B) + ", " +
             std::to_string(p.Hq) + ", " + std::to_string(p.T) + ", " + std::to_string(w) + ", " +
             std::to_string(p.D) + "], got " + shapeOf(qWin));
    // Steps in chunks: the window's attention takes [Hq, n, w, S].
    constexpr int64_t kChunkElements = int64_t{1} << 24;
    const int64_t chunk =
        std::max<int64_t>(1, kChunkElements / std::max<int64_t>(1, p.B * p.Hq * w * p.S));
    std::vector<at::Tensor> masks, margins, rels, votes, pooled;
    for (int64_t t0 = 0; t0 < p.T; t0 += chunk) {
        const int64_t n = std::min(chunk, p.T - t0);
        const Snap s = snapSteps(p, qWin, c, t0, n, o.validate);
        masks.push_back(s.sel.mask.expand({p.B, p.Hkv, p.g, n, p.S}));
        margins.push_back(s.sel.margin.expand({p.B, p.Hkv, p.g, n}));
        rels.push_back(s.sel.marginRel.expand({p.B, p.Hkv, p.g, n}));
        votes.push_back(s.votes.expand({p.B, p.Hkv, p.g, n, p.S}));
        pooled.push_back(s.pooled.expand({p.B, p.Hkv, p.g, n, p.S}));
    }
    const Selection sel{at::cat(masks, 3), at::cat(margins, 3), at::cat(rels, 3)};
    AttentionResult out = attendSelection(p, exactLogits(p), sel, c.k, o);
    if (o.diagnostics) {
        out.votes = p.heads(at::cat(votes, 3));
        out.pooled = p.heads(at::cat(pooled, 3));
    }
    return out;
}

/// What SnapKV keeps between causal calls: the queries of the w − 1 positions before the next
/// one (its window) and, once compressed, the prompt positions kept.
struct SnapState : MethodState {
    at::Tensor recentQ; ///< [B, Hq, ≤ w − 1, D]
    at::Tensor kept;    ///< [B, Hq, S0]
    std::shared_ptr<MethodState> clone() const override {
        auto s = std::make_shared<SnapState>();
        s->recentQ = recentQ.defined() ? recentQ.clone() : recentQ;
        s->kept = kept.defined() ? kept.clone() : kept;
        return s;
    }
    std::map<std::string, at::Tensor> tensors() const override {
        return {{"recent_q", recentQ}, {"kept", kept}};
    }
};

/// SnapKV in a model (METHODS.md §7 with a KV cache): each step of a chunk is the first decode
/// step after its prefix (window: the w queries ending at it) and the last one's compressed
/// set is kept; a one-query step after that attends to the kept set and every later position,
/// as SnapKV compresses the prompt once.
AttentionResult snapCausal(const CausalChunk& ck, const AttentionConfig& c,
                           std::shared_ptr<MethodState>& state, const AttendOptions& o) {
    if (!state)
        state = std::make_shared<SnapState>();
    SnapState& st = static_cast<SnapState&>(*state);
    const int64_t B = ck.q.size(0), Hq = ck.q.size(1), n = ck.q.size(2), D = ck.q.size(3);
    const int64_t Dv = ck.v.size(3);
    const int64_t S = ck.k.size(2), w = c.snapWindow;
    if (ck.steps && n == 1 && st.kept.defined() && st.kept.size(-1) <= ck.pos0) {
        const int64_t S0 = st.kept.size(-1);
        const at::Tensor later = at::arange(S, st.kept.options().dtype(at::kLong)).ge(S0);
        const at::Tensor kept = at::constant_pad_nd(st.kept, {0, S - S0}).logical_or(later);
        const at::Tensor z = causalLogits(ck.q, ck.k, ck.pos0, c); // [B, Hq, 1, S]
        const at::Tensor wts =
            softmaxWithSink(z.masked_fill(kept.unsqueeze(2).logical_not(), -kInf),
                            c.sinks.defined() ? c.sinks.view({1, Hq, 1, 1}) : c.sinks);
        const int64_t Hkv = ck.k.size(1), g = Hq / Hkv;
        AttentionResult out;
        out.y = at::matmul(wts.reshape({B, Hkv, g, S}), ck.v.to(wts.scalar_type()))
                    .reshape({B, Hq, 1, Dv});
        out.alpha = at::ones({B, Hq, 1}, out.y.options());
        if (ck.diagnostics) {
            out.selected = kept.unsqueeze(2);
            out.indices = maskToIndices(out.selected, S);
            out.count = out.selected.sum(-1);
        }
        return out;
    }
    // Window queries of each step: the w queries ending at it, earlier calls' included.
    const at::Tensor past =
        st.recentQ.defined() ? st.recentQ.to(ck.q.scalar_type()) : ck.q.new_zeros({B, Hq, 0, D});
    const int64_t have = past.size(2);
    const at::Tensor all = at::cat({ck.q.new_zeros({B, Hq, w - 1, D}), past, ck.q}, 2)
                               .narrow(2, have, w - 1 + n); // [B, Hq, w−1+n, D]
    st.recentQ = all.narrow(2, all.size(2) - (w - 1), w - 1).contiguous();
    if (!ck.steps)
        return {};
    const at::Tensor qWin = all.unfold(2, w, 1).permute({0, 1, 2, 4, 3}); // [B, Hq, n, w, D]
    AttendOptions so = o;
    so.diagnostics = true; // the kept set is the last step's selection
    AttentionResult r = attendSteps({ck.q, ck.k, ck.v, ck.valid, {}, qWin}, c, so);
    st.kept = r.selected.select(2, n - 1).narrow(-1, 0, ck.pos0 + n).contiguous();
    return r;
}

/// Dense steps before SnapKV keep their last w − 1 queries (its window when it takes over).
void snapObserve(const CausalChunk& ck, const at::Tensor&, const AttentionConfig& c,
                 std::shared_ptr<MethodState>& state) {
    if (!state)
        state = std::make_shared<SnapState>();
    SnapState& st = static_cast<SnapState&>(*state);
    const int64_t keep = std::max<int64_t>(0, c.snapWindow - 1);
    if (keep == 0)
        return;
    const at::Tensor all =
        st.recentQ.defined() ? at::cat({st.recentQ.to(ck.q.scalar_type()), ck.q}, 2) : ck.q;
    const int64_t n = std::min(all.size(2), keep);
    st.recentQ = all.narrow(2, all.size(2) - n, n).contiguous();
}

const CausalHooks kSnapCausal{.history = CausalHooks::History::Window,
                              .lastStepOnly = true,
                              .stateParams = {Param::Window},
                              .run = snapCausal,
                              .observeDense = snapObserve};

void validateSnap(const AttentionConfig& c, const ModelShape&) {
    if (c.snapWindow < 1)
        fail("--window: the observation window must be at least 1, got " +
             std::to_string(c.snapWindow));
    if (c.k < c.snapWindow)
        fail("--k: snapkv keeps the window, so k must be at least --window (" +
             std::to_string(c.snapWindow) + "), got " + std::to_string(c.k));
    if (c.kernel < 1 || c.kernel % 2 == 0)
        fail("--kernel: the pooling kernel must be odd and at least 1, got " +
             std::to_string(c.kernel));
    if (c.gqa == GroupSelect::SumLogits)
        fail("--gqa: snapkv takes sum-probs or per-head");
}

} // namespace
} // namespace sparqlab::attention::detail

SPARQLAB_METHOD(snapkv) {
    return {
        .info =
            {.id = Method::SnapKV,
             .name = "snapkv",
             .label = "SnapKV",
             .summary =
                 "the prompt compressed once by the pooled votes of an observation window (Li et "
                 "al. 2024)",
             .spec = "METHODS.md §7",
             .params = {Param::K, Param::Window, Param::Kernel, Param::Pooling, Param::Gqa},
             .transfer = transfer::kept,
             .transferFormula = "2·k·d + 2·d",
             .evalGrid = "k=192,256,384,512,768"},
        .run = detail::runSnapKV,
        .validate = detail::validateSnap,
        .causal = &detail::kSnapCausal};
}
