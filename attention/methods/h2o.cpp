// H2O (SPARQ.md §4.4): heavy hitters by the attention earlier queries gave each position
// (accumulated, §4.4.1) and a local window; its causal state is that accumulation, and
// H2OState the variant with permanent eviction (§4.4.3).

#include "attention/causal.h"
#include "attention/method_kit.h"
#include "attention/select.h"

#include <ATen/ATen.h>

namespace sparqlab::attention::detail {
namespace {

AttentionResult runH2O(const Prepared& p, const AttentionInputs& in, const AttentionConfig& c,
                       const AttendOptions& o) {
    const at::Tensor& acc = in.acc;
    if (!acc.defined())
        fail("H2O needs the accumulated attention scores (acc) of earlier steps");
    const bool perStep = acc.dim() == 4;
    if ((acc.dim() != 3 && !perStep) || acc.size(0) != p.B || acc.size(1) != p.Hkv ||
        acc.size(-1) != p.S || (perStep && acc.size(2) != p.T))
        fail("acc must be [B, Hkv, S] (or [B, Hkv, T, S]), got " + shapeOf(acc));
    const at::Tensor a = (perStep ? acc : acc.unsqueeze(2)).to(p.qg.scalar_type()).unsqueeze(2);
    const at::Tensor vm = p.validU();
    if (o.validate && !at::isfinite(a).logical_or(vm.logical_not()).all().item<bool>())
        throw NonFiniteInputError("acc has non-finite entries at valid positions");
    const at::Tensor G = at::where(vm, a, at::scalar_tensor(0, a.options()));
    const Selection sel = selectPositions(p, G, c.k, c.effectiveLocal());
    return attendSelection(p, exactLogits(p), sel, c.k, o);
}

/// The attention every earlier query gave each position (group mean over the query heads of a
/// KV head, summed over the queries): [B, Hkv, S].
struct H2OAcc : MethodState {
    at::Tensor acc;
    std::shared_ptr<MethodState> clone() const override {
        auto s = std::make_shared<H2OAcc>();
        s->acc = acc.defined() ? acc.clone() : acc;
        return s;
    }
    std::map<std::string, at::Tensor> tensors() const override { return {{"acc", acc}}; }
};

/// The state's accumulation, grown to S positions (new positions start with none).
at::Tensor& accOf(std::shared_ptr<MethodState>& state, const CausalChunk& ck) {
    if (!state)
        state = std::make_shared<H2OAcc>();
    at::Tensor& acc = static_cast<H2OAcc&>(*state).acc;
    const int64_t B = ck.k.size(0), Hkv = ck.k.size(1), S = ck.k.size(2);
    if (!acc.defined())
        acc = at::zeros({B, Hkv, S}, ck.q.options().dtype(computeType(ck.q)));
    else if (acc.size(2) < S)
        acc = at::constant_pad_nd(acc, {0, S - acc.size(2)});
    return acc;
}

/// §4.4.1 over a chunk of queries: each step ranks by the state's accumulation plus the
/// attention of the chunk's queries before it; the state then holds all of them.
AttentionResult h2oCausal(const CausalChunk& ck, const AttentionConfig& c,
                          std::shared_ptr<MethodState>& state, const AttendOptions& o) {
    at::Tensor& acc = accOf(state, ck);
    const int64_t B = ck.q.size(0), Hq = ck.q.size(1), n = ck.q.size(2);
    const int64_t Hkv = ck.k.size(1), S = ck.k.size(2);
    const at::Tensor probs =
        ck.dense ? ck.dense->probs : causalProbabilities(ck.q, ck.k, ck.pos0, c);
    const at::Tensor w = probs.view({B, Hkv, Hq / Hkv, n, S}).mean(2);
    const at::Tensor incl = w.cumsum(2);
    AttentionInputs in{ck.q, ck.k, ck.v, ck.valid, {}, {}};
    if (ck.steps)
        in.acc = acc.unsqueeze(2) + incl - w;
    acc = acc + incl.select(2, n - 1);
    return ck.steps ? attendSteps(in, c, o) : AttentionResult{};
}

/// Dense steps before H2O add their attention to the accumulation.
void h2oObserve(const CausalChunk& ck, const at::Tensor& probs, const AttentionConfig&,
                std::shared_ptr<MethodState>& state) {
    at::Tensor& acc = accOf(state, ck);
    const int64_t B = ck.q.size(0), Hq = ck.q.size(1), n = ck.q.size(2);
    const int64_t Hkv = ck.k.size(1), S = ck.k.size(2);
    acc = acc + probs.reshape({B, Hkv, Hq / Hkv, n, S}).mean(2).sum(2);
}

const CausalHooks kH2OCausal{
    .history = CausalHooks::History::All, .run = h2oCausal, .observeDense = h2oObserve};

double h2oTransfer(const TransferArgs& a) {
    return 1.0 * a.k * a.kv() + a.kv() + 2.0 * a.S;
}

/// SPARQ.md §4.4.2: the local window is k/4 unless given.
int64_t h2oDefaultLocal(const AttentionConfig& c) {
    return c.k / 4;
}

} // namespace
} // namespace sparqlab::attention::detail

namespace sparqlab::attention {

using namespace detail;

at::Tensor h2oAccumulate(const at::Tensor& qHist, const at::Tensor& k, const at::Tensor& valid,
                         const std::vector<int64_t>& histPos, std::optional<double> scale) {
    if (qHist.dim() != 4)
        fail("history queries must be [B, Hq, T, D], got " + shapeOf(qHist));
    const int64_t T = qHist.size(2);
    if (static_cast<int64_t>(histPos.size()) != T)
        fail("one history position per history query is needed");
    const int64_t S = k.size(2);
    AttentionConfig c;
    c.scale = scale;
    at::Tensor acc;
    for (int64_t t = 0; t < T; ++t) {
        const int64_t pos = histPos[t];
        if (pos < 0 || pos >= S)
            fail("history position " + std::to_string(pos) + " is outside 0.." +
                 std::to_string(S - 1));
        at::Tensor vis = at::arange(S, k.options().dtype(at::kLong)).le(pos);
        vis = valid.defined() ? valid.to(at::kBool).logical_and(vis) : vis.unsqueeze(0);
        const Prepared p = prepare(qHist.narrow(2, t, 1), k, {}, vis, c, /*validate=*/true);
        if (!p.valid.select(2, pos).all().item<bool>())
            fail("history query positions must be valid positions");
        const at::Tensor w = at::softmax(exactLogits(p), -1).mean(2).squeeze(2); // GQA: group mean
        acc = acc.defined() ? acc + w : w;
    }
    return acc;
}

H2OState::H2OState(at::Tensor acc0, const at::Tensor& valid) : m_acc(std::move(acc0)) {
    if (m_acc.dim() != 3)
        fail("acc0 must be [B, Hkv, S], got " + shapeOf(m_acc));
    const int64_t B = m_acc.size(0), S = m_acc.size(2);
    m_valid = valid.defined() ? valid.to(at::kBool).expand({B, S}).contiguous()
                              : at::ones({B, S}, m_acc.options().dtype(at::kBool));
    const at::Tensor vm = m_valid.unsqueeze(1);
    if (!at::isfinite(m_acc).logical_or(vm.logical_not()).all().item<bool>())
        throw NonFiniteInputError("acc0 has non-finite entries at valid positions");
    m_acc = at::where(vm, m_acc, at::scalar_tensor(0, m_acc.options())).clone();
    m_alive = at::ones(m_acc.sizes(), m_acc.options().dtype(at::kBool));
}

AttentionResult H2OState::step(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                               int64_t pos, int64_t kKeep, int64_t local,
                               std::optional<double> scale) {
    if (kKeep < 1 || local < 0)
        fail("H2O needs k >= 1 and l >= 0");
    const int64_t S = m_acc.size(2);
    if (pos < 0 || pos >= S)
        fail("step position " + std::to_string(pos) + " is outside 0.." + std::to_string(S - 1));
    const at::Tensor vis =
        m_valid.logical_and(at::arange(S, m_valid.options().dtype(at::kLong)).le(pos));
    if (!vis.select(1, pos).all().item<bool>())
        fail("step positions must be valid positions");
    AttentionConfig c;
    c.scale = scale;
    const Prepared p = prepare(q.unsqueeze(2), k, v, vis, c, /*validate=*/true);
    if (m_acc.size(0) != p.B || m_acc.size(1) != p.Hkv)
        fail("acc0 does not match K: " + shapeOf(m_acc) + " vs " + shapeOf(k));
    const at::Tensor nValid = p.nValid.squeeze(1);
    const at::Tensor kEff = nValid.clamp_max(kKeep);
    const at::Tensor lEff = kEff.clamp_max(local);
    const at::Tensor visU = vis.unsqueeze(1); // [B,1,S]
    const at::Tensor cand = m_alive.logical_and(visU);
    const at::Tensor forced =
        cand.logical_and(causalIndex(vis).lt(lEff.unsqueeze(-1)).unsqueeze(1));
    Selection sel = select(m_acc.to(p.qg.scalar_type()), cand, forced, kEff.unsqueeze(-1));
    // Permanent eviction of the visible positions that were not kept.
    m_alive = m_alive.logical_and(sel.mask.logical_or(visU.logical_not()));
    const at::Tensor mask = sel.mask.view({p.B, p.Hkv, 1, 1, p.S});
    const at::Tensor z = exactLogits(p);
    const at::Tensor w = at::softmax(z.masked_fill(mask.logical_not(), -kInf), -1);
    m_acc = m_acc + w.mean(2).squeeze(2).to(m_acc.scalar_type());
    AttentionResult out;
    out.y = at::matmul(w.squeeze(3), p.v).reshape({p.B, p.Hq, p.Dv});
    out.alpha = at::ones({p.B, p.Hq}, out.y.options());
    out.selected = p.heads(mask.expand({p.B, p.Hkv, p.g, 1, p.S})).squeeze(2);
    out.indices = maskToIndices(out.selected, std::min(kKeep, S));
    return out;
}

} // namespace sparqlab::attention

SPARQLAB_METHOD(h2o) {
    return {
        .info =
            {.id = Method::H2O,
             .name = "h2o",
             .label = "H2O",
             .summary =
                 "heavy hitters by accumulated attention and a local window (l = k/4 by default)",
             .spec = "SPARQ.md §4.4",
             .params = {Param::K, Param::Local},
             .transfer = detail::h2oTransfer,
             .transferFormula = "2·k·d + 2·d + 2·S",
             .evalGrid = "k=192,256,384,512,768 local=k/4"},
        .run = detail::runH2O,
        .causal = &detail::kH2OCausal,
        .defaultLocal = detail::h2oDefaultLocal};
}
