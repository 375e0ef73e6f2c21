// TOVA (METHODS.md §8): one layer-wide cache of k − 1 positions that evicts, after each step,
// the position of least attention (mean over every query head). Its causal state is the cache.

#include "attention/method_kit.h"
#include "attention/select.h"

#include <ATen/ATen.h>

namespace sparqlab::attention::detail {
namespace {

/// METHODS.md §8.2 over the steps of `p` (each step's valid row is its visible set), with the
/// layer-wide cache `alive` [B, S] carried in and out.
TovaResult tovaSteps(const Prepared& p, const AttentionConfig& c, at::Tensor& alive,
                     bool diagnostics) {
    checkBudget(c.k, 0);
    TovaResult r;
    std::vector<at::Tensor> ys, sets, counts, margins, rels;
    const at::Tensor z = exactLogits(p); // [B, Hkv, g, T, S]
    for (int64_t t = 0; t < p.T; ++t) {
        const at::Tensor C = alive.logical_and(p.valid.select(1, t)); // [B, S]
        const at::Tensor zt = z.select(3, t);                         // [B, Hkv, g, S]
        const at::Tensor w =
            softmaxWithSink(zt.masked_fill(C.view({p.B, 1, 1, p.S}).logical_not(), -kInf),
                            p.sinks.defined() ? p.sinks.squeeze(-1) : p.sinks);
        ys.push_back(at::matmul(w, p.v).reshape({p.B, p.Hq, p.Dv}));
        const at::Tensor a = w.mean(at::IntArrayRef{1, 2}); // mean over ALL query heads
        const at::Tensor cnt = C.sum(-1);
        const at::Tensor keepN = cnt.clamp_max(c.k - 1);
        const Selection keep = select(a, C, at::zeros_like(C), keepN);
        const at::Tensor evicted = cnt.gt(c.k - 1);
        const at::Tensor inf = at::full_like(keep.margin, kInf);
        if (diagnostics) {
            sets.push_back(C);
            counts.push_back(cnt);
            margins.push_back(at::where(evicted, keep.margin, inf));
            rels.push_back(at::where(evicted, keep.marginRel, inf));
        }
        alive = alive.logical_and(C.logical_and(keep.mask.logical_not()).logical_not());
    }
    r.y = at::stack(ys, 2);
    if (diagnostics) {
        r.attended = at::stack(sets, 1);
        r.count = at::stack(counts, 1);
        r.evictMargin = at::stack(margins, 1);
        r.evictMarginRel = at::stack(rels, 1);
        r.indices = maskToIndices(sets.back().unsqueeze(1).expand({p.B, p.Hq, p.S}), p.S);
    }
    return r;
}

/// Per-step TOVA through the common outputs (y, indices, count, mass of each step's set).
AttentionResult runTova(const Prepared& p, const AttentionInputs&, const AttentionConfig& c,
                        const AttendOptions& o) {
    at::Tensor alive = at::ones({p.B, p.S}, p.valid.options());
    const TovaResult r = tovaSteps(p, c, alive, /*diagnostics=*/true);
    AttentionResult out;
    out.y = r.y;
    out.alpha = at::ones({p.B, p.Hq, p.T}, out.y.options());
    out.meanV = meanValue(p);
    const at::Tensor sel = r.attended.view({p.B, 1, 1, p.T, p.S});
    const at::Tensor margin = r.evictMargin.view({p.B, 1, 1, p.T});
    const at::Tensor rel = r.evictMarginRel.view({p.B, 1, 1, p.T});
    const at::Tensor z = exactLogits(p);
    fillSelection(p, z, expandUnits(p, {sel, margin, rel}), p.S, o, out);
    keepExact(p, z, o, out);
    return out;
}

/// The positions not evicted so far: [B, S].
struct TovaCache : MethodState {
    at::Tensor alive;
    std::shared_ptr<MethodState> clone() const override {
        auto s = std::make_shared<TovaCache>();
        s->alive = alive.defined() ? alive.clone() : alive;
        return s;
    }
    std::map<std::string, at::Tensor> tensors() const override { return {{"alive", alive}}; }
};

/// The chunk's queries as TOVA's steps in order; the cache grows with the keys (new positions
/// are alive) and evicts after each step, history or not.
AttentionResult tovaCausal(const CausalChunk& ck, const AttentionConfig& c,
                           std::shared_ptr<MethodState>& state, const AttendOptions& o) {
    if (!state)
        state = std::make_shared<TovaCache>();
    at::Tensor& alive = static_cast<TovaCache&>(*state).alive;
    const int64_t B = ck.q.size(0), Hq = ck.q.size(1), S = ck.k.size(2);
    alive = alive.defined() ? at::constant_pad_nd(alive, {0, S - alive.size(1)}, 1)
                            : at::ones({B, S}, ck.valid.options());
    const Prepared p = prepare(ck.q, ck.k, ck.v, ck.valid, c, o.validate);
    const bool diagnostics = ck.steps && ck.diagnostics;
    const TovaResult r = tovaSteps(p, c, alive, diagnostics);
    AttentionResult out;
    if (!ck.steps)
        return out;
    out.y = r.y;
    out.alpha = at::ones({B, Hq, p.T}, out.y.options());
    if (diagnostics) {
        out.selected = r.attended.unsqueeze(1).expand({B, Hq, p.T, S});
        out.indices = maskToIndices(out.selected, S);
        out.count = out.selected.sum(-1);
    }
    return out;
}

const CausalHooks kTovaCausal{
    .history = CausalHooks::History::Run, .stateParams = {Param::K}, .run = tovaCausal};

} // namespace
} // namespace sparqlab::attention::detail

namespace sparqlab::attention {

using namespace detail;

TovaResult tova(const at::Tensor& qSteps, const at::Tensor& k, const at::Tensor& v,
                const at::Tensor& valid, const std::vector<int64_t>& stepPos,
                const AttentionConfig& c, at::Tensor* aliveInOut) {
    if (qSteps.dim() != 4)
        fail("TOVA's step queries must be [B, Hq, T, D], got " + shapeOf(qSteps));
    const int64_t T = qSteps.size(2), S = k.size(2), B = qSteps.size(0);
    if (static_cast<int64_t>(stepPos.size()) != T || T < 1)
        fail("TOVA needs one step position per step query");
    for (size_t t = 1; t < stepPos.size(); ++t)
        if (stepPos[t] <= stepPos[t - 1])
            fail("TOVA's step positions must be strictly increasing");
    at::Tensor vd = valid.defined() ? valid.to(at::kBool).expand({B, S})
                                    : at::ones({B, S}, qSteps.options().dtype(at::kBool));
    for (int64_t pos : stepPos)
        if (pos < 0 || pos >= S || !vd.select(1, pos).all().item<bool>())
            fail("TOVA's step positions must be valid positions in every row, got " +
                 std::to_string(pos));
    const at::Tensor keyPos = at::arange(S, qSteps.options().dtype(at::kLong));
    const at::Tensor pos = at::tensor(stepPos, qSteps.options().dtype(at::kLong));
    const at::Tensor rows =
        vd.unsqueeze(1).logical_and(keyPos.view({1, 1, S}).le(pos.view({1, T, 1})));
    const Prepared p = prepare(qSteps, k, v, rows, c, /*validate=*/true);
    at::Tensor alive =
        aliveInOut && aliveInOut->defined() ? *aliveInOut : at::ones({B, S}, vd.options());
    TovaResult r = tovaSteps(p, c, alive, /*diagnostics=*/true);
    r.alive = alive.logical_and(vd);
    if (aliveInOut)
        *aliveInOut = alive;
    return r;
}

} // namespace sparqlab::attention

SPARQLAB_METHOD(tova) {
    return {
        .info =
            {.id = Method::Tova,
             .name = "tova",
             .label = "TOVA",
             .summary =
                 "a layer-wide cache that evicts the position of least attention each step (Oren "
                 "et al. 2024)",
             .spec = "METHODS.md §8",
             .params = {Param::K},
             .transfer = transfer::kept,
             .transferFormula = "2·k·d + 2·d",
             .evalGrid = "k=192,256,384,512,768"},
        .run = detail::runTova,
        .causal = &detail::kTovaCausal};
}
