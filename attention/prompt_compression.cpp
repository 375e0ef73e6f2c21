// The causal behaviour of the methods that compress the prompt once, at the first decode step
// (SnapKV, Expected Attention, AdaKV, RocketKV's first stage), written once (method_kit.h,
// CompressOnce): the queries they read before each step, the set the last step of a chunk
// keeps, and the later one-query steps over it.

#include "method_kit.h"

#include "select.h"

#include <ATen/ATen.h>

namespace sparqlab::attention::detail {

namespace {

/// What such a method keeps between causal calls: the queries before the next one (the
/// window's w − 1, or every one) and, once compressed, the prompt positions kept.
struct CompressState : MethodState {
    at::Tensor recentQ; ///< [B, Hq, n, D]
    at::Tensor kept;    ///< [B, Hq, S0]
    std::shared_ptr<MethodState> clone() const override {
        auto s = std::make_shared<CompressState>();
        s->recentQ = recentQ.defined() ? recentQ.clone() : recentQ;
        s->kept = kept.defined() ? kept.clone() : kept;
        return s;
    }
    std::map<std::string, at::Tensor> tensors() const override {
        return {{"recent_q", recentQ}, {"kept", kept}};
    }
};

CompressState& stateOf(std::shared_ptr<MethodState>& state) {
    if (!state)
        state = std::make_shared<CompressState>();
    return static_cast<CompressState&>(*state);
}

/// How many earlier queries a step reads: the window's w − 1, or all (−1).
int64_t queriesKept(const CompressOnce& how, const AttentionConfig& c) {
    return how.allQueries ? -1 : std::max<int64_t>(0, c.snapWindow - 1);
}

} // namespace

AttentionResult attendKept(const CausalChunk& ck, const AttentionConfig& c, const at::Tensor& kept,
                           const AttendOptions& o, at::Tensor z) {
    const int64_t B = ck.q.size(0), Hq = ck.q.size(1), S = ck.k.size(2), Dv = ck.v.size(3);
    const int64_t Hkv = ck.k.size(1), g = Hq / Hkv;
    if (!z.defined())
        z = causalLogits(ck.q, ck.k, ck.pos0, c); // [B, Hq, 1, S]
    const at::Tensor wts =
        softmaxWithSink(z.masked_fill(kept.unsqueeze(2).logical_not(), -kInf),
                        c.sinks.defined() ? c.sinks.view({1, Hq, 1, 1}) : c.sinks);
    AttentionResult out;
    out.y =
        at::matmul(wts.reshape({B, Hkv, g, S}), ck.v.to(wts.scalar_type())).reshape({B, Hq, 1, Dv});
    out.alpha = at::ones({B, Hq, 1}, out.y.options());
    if (o.diagnostics) {
        out.selected = kept.unsqueeze(2).logical_and(z.gt(-kInf));
        out.indices = maskToIndices(out.selected, S);
        out.count = out.selected.sum(-1);
    }
    return out;
}

AttentionResult compressOnceRun(const CompressOnce& how, const CausalChunk& ck,
                                const AttentionConfig& c, std::shared_ptr<MethodState>& state,
                                const AttendOptions& o) {
    CompressState& st = stateOf(state);
    const int64_t B = ck.q.size(0), Hq = ck.q.size(1), n = ck.q.size(2), D = ck.q.size(3);
    const int64_t S = ck.k.size(2);
    if (ck.steps && n == 1 && st.kept.defined() && st.kept.size(-1) <= ck.pos0) {
        // A later step: the kept prompt and every position after it.
        const int64_t S0 = st.kept.size(-1);
        const at::Tensor later = at::arange(S, st.kept.options().dtype(at::kLong)).ge(S0);
        const at::Tensor kept = at::constant_pad_nd(st.kept, {0, S - S0}).logical_or(later);
        return how.later ? how.later(ck, c, kept, o) : attendKept(ck, c, kept, o);
    }
    // The queries each step reads: those kept from earlier calls, then the chunk's.
    const at::Tensor past =
        st.recentQ.defined() ? st.recentQ.to(ck.q.scalar_type()) : ck.q.new_zeros({B, Hq, 0, D});
    const int64_t keep = queriesKept(how, c);
    at::Tensor all = at::cat({past, ck.q}, 2); // [B, Hq, have + n, D]
    const int64_t have = past.size(2);
    if (keep >= 0) {
        st.recentQ =
            all.narrow(2, std::max<int64_t>(0, all.size(2) - keep), std::min(all.size(2), keep))
                .contiguous();
    } else {
        st.recentQ = all.contiguous();
    }
    if (!ck.steps)
        return {};
    AttentionInputs in{ck.q,
                       ck.k,
                       ck.v,
                       ck.valid,
                       {},
                       {},
                       ck.extra ? *ck.extra : std::map<std::string, at::Tensor>{}};
    if (how.allQueries) {
        // Every position's query: positions pos0 − have … pos0 + n − 1 are held.
        const int64_t first = ck.pos0 - have;
        if (first < 0)
            fail("the queries held start before position 0");
        at::Tensor qAll = ck.q.new_zeros({B, Hq, S, D});
        qAll.narrow(2, first, have + n).copy_(all);
        in.extra["q_all"] = qAll;
    } else {
        const int64_t w = c.snapWindow;
        const at::Tensor padded = at::cat({ck.q.new_zeros({B, Hq, w, D}), all}, 2)
                                      .narrow(2, w + have - (w - 1), w - 1 + n);
        in.qWin = padded.unfold(2, w, 1).permute({0, 1, 2, 4, 3}); // [B, Hq, n, w, D]
    }
    AttendOptions so = o;
    so.diagnostics = true; // the kept set is the last step's selection
    AttentionResult r = attendSteps(in, c, so);
    const int64_t S0 = ck.pos0 + n;
    if (how.keptOutput) { // indices [B, Hq, T, W], −1 padded
        const at::Tensor idx = r.output(how.keptOutput).select(2, n - 1);
        st.kept = at::zeros({B, Hq, S0 + 1}, ck.valid.options())
                      .scatter_(-1, at::where(idx.ge(0), idx, at::full_like(idx, S0)), true)
                      .narrow(-1, 0, S0)
                      .contiguous();
    } else {
        st.kept = r.selected.select(2, n - 1).narrow(-1, 0, S0).contiguous();
    }
    return r;
}

void compressOnceObserve(const CompressOnce& how, const CausalChunk& ck, const AttentionConfig& c,
                         std::shared_ptr<MethodState>& state) {
    CompressState& st = stateOf(state);
    const int64_t keep = queriesKept(how, c);
    if (keep == 0)
        return;
    const at::Tensor all =
        st.recentQ.defined() ? at::cat({st.recentQ.to(ck.q.scalar_type()), ck.q}, 2) : ck.q;
    const int64_t n = keep < 0 ? all.size(2) : std::min(all.size(2), keep);
    st.recentQ = all.narrow(2, all.size(2) - n, n).contiguous();
}

} // namespace sparqlab::attention::detail
