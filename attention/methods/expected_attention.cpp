// Expected Attention (kvpress; METHODS2.md §3): the prompt's positions scored by the attention
// a future query is expected to pay them — the prompt's queries un-rotated to their pre-RoPE
// form, their mean and covariance rotated by the average RoPE of the next n_future positions,
// and the expected logit μ̄·k + kᵀΣ̄k/2 — times each value's norm; the sinks, the best n_keep of
// the rest and the current token are kept.

#include "attention/method_kit.h"

#include <ATen/ATen.h>

#include <cmath>

namespace sparqlab::attention::detail {

namespace {

/// §3.4: the prompt positions kept, n_keep.
int64_t keepCount(int64_t nPrompt, const AttentionConfig& c) {
    if (c.given(Param::Ratio)) {
        const double share = 1.0 - c.value(Param::Ratio); // rounded first, then the product
        return std::min<int64_t>(
            nPrompt, static_cast<int64_t>(std::floor(static_cast<double>(nPrompt) * share)));
    }
    return std::min<int64_t>(c.k - 1, nPrompt);
}

/// The layer's inverse frequencies [D/2] (float64): the model's, or θ = 10000's.
at::Tensor invFreqOf(const AttentionConfig& c, int64_t D) {
    if (D % 2 != 0)
        fail("expected-attention needs an even head dimension (RoPE pairs), got " +
             std::to_string(D));
    if (!c.ropeInvFreq.defined())
        return defaultInvFreq(D);
    const at::Tensor f = c.ropeInvFreq.to(at::kDouble);
    if (f.dim() != 1 || f.size(0) != D / 2 || !at::isfinite(f).all().item<bool>())
        fail("expected-attention: the RoPE inverse frequencies must be a finite [D/2] = [" +
             std::to_string(D / 2) + "], got " + shapeOf(f));
    return f;
}

/// §3.2: R with (R x)[i] = c_i x[i] − s_i x[i + D/2], (R x)[i + D/2] = s_i x[i] + c_i x[i + D/2].
at::Tensor rotation(const at::Tensor& c, const at::Tensor& s) {
    const int64_t h = c.size(0);
    at::Tensor R = at::zeros({2 * h, 2 * h}, c.options());
    const at::Tensor i = at::arange(h, at::kLong);
    R.index_put_({i, i}, c);
    R.index_put_({i + h, i + h}, c);
    R.index_put_({i, i + h}, -s);
    R.index_put_({i + h, i}, s);
    return R;
}

RowResult eaRow(const Prepared& p, const StepRow& row, const at::Tensor& qAll,
                const at::Tensor& invFreq, const AttentionConfig& c, const AttendOptions& o) {
    const int64_t Hkv = p.Hkv, g = p.g, S = p.S, D = p.D;
    const int64_t nSink = c.integer(Param::Sink), nFuture = c.integer(Param::NFuture);
    const at::Tensor prompt = row.valid.logical_and(row.cidx.ge(1));
    const at::Tensor X = prompt.logical_and(row.fidx.ge(nSink)); // statistics and scored keys
    const int64_t nPrompt = row.nValid - 1, nx = X.sum().item<int64_t>();
    const auto dbl = p.options().dtype(at::kDouble);
    // §3.3: the pre-RoPE queries of X, their mean and (biased) covariance, in float64.
    const at::Tensor xs = X.nonzero().flatten();
    at::Tensor mu = at::zeros({p.Hq, D}, dbl), cov = at::zeros({p.Hq, D, D}, dbl);
    if (nx > 0) {
        const at::Tensor qx = qAll[row.b].index_select(1, xs).to(at::kDouble);   // [Hq, nx, D]
        const auto [cs, sn] = ropeTables(row.fidx.index_select(0, xs), invFreq); // [nx, D]
        const at::Tensor pre = ropeApply(qx, cs, -sn);
        mu = pre.sum(1) / static_cast<double>(nx);
        const at::Tensor cen = pre - mu.unsqueeze(1);
        cov = at::matmul(cen.transpose(1, 2), cen) / static_cast<double>(nx);
    }
    const at::Tensor future = at::arange(nPrompt, nPrompt + nFuture, dbl);
    const at::Tensor angles = future.unsqueeze(-1) * invFreq; // [n_f, D/2]
    const at::Tensor Rbar = rotation(angles.cos().sum(0) / static_cast<double>(nFuture),
                                     angles.sin().sum(0) / static_cast<double>(nFuture));
    const at::Tensor muBar = at::matmul(mu, Rbar.t());                     // [Hq, D]
    const at::Tensor covBar = at::matmul(at::matmul(Rbar, cov), Rbar.t()); // [Hq, D, D]
    // §3.4: the expected logit of a future query (scale s: s·μ̄·k + s²·kᵀΣ̄k/2).
    const at::ScalarType ct = p.qg.scalar_type();
    const double s = p.defaultScale ? 1.0 / std::sqrt(static_cast<double>(D)) : p.scale;
    const at::Tensor K = row.k; // [Hkv, S, D]
    const at::Tensor mub = muBar.to(ct).view({Hkv, g, D});
    at::Tensor zHat = at::matmul(mub, K.transpose(1, 2)) * s; // [Hkv, g, S]
    if (c.integer(Param::NoCovariance) == 0) {
        const at::Tensor cb = covBar.to(ct).view({Hkv, g, D, D});
        const at::Tensor kc = at::matmul(K.unsqueeze(1), cb); // [Hkv, g, S, D]
        zHat = zHat + (kc * K.unsqueeze(1)).sum(-1) * (s * s / 2);
    }
    const at::Tensor Xm = X.view({1, 1, S});
    zHat = zHat.masked_fill(Xm.logical_not(), -kInf);
    at::Tensor a = at::softmax(zHat, -1);
    a = nx > 0 ? at::where(Xm, a, at::zeros_like(a)) : at::zeros_like(a);
    const bool perHead = c.gqa == GroupSelect::PerHead;
    at::Tensor unit = perHead ? a : seqSum(a, 1).unsqueeze(1) / static_cast<double>(g);
    at::Tensor G = unit;
    if (c.integer(Param::NoVnorm) == 0) {
        const at::Tensor vn = row.v.pow(2).sum(-1).sqrt().unsqueeze(1); // [Hkv, 1, S]
        G = (unit + c.value(Param::Epsilon)) * vn;
    }
    G = at::where(Xm, G, at::zeros_like(G));
    // §3.4: the sinks first (lower index), then the best by G; the current token always.
    const int64_t nKeep = keepCount(nPrompt, c);
    const int64_t sEff = std::min(nSink, nPrompt), nForced = std::min(nKeep, sEff);
    at::Tensor forced = prompt.logical_and(row.fidx.lt(nForced));
    if (nKeep >= nPrompt)
        forced = prompt;
    const int64_t U = G.size(1);
    const at::Tensor Gs = at::where(Xm, G, at::full_like(G, -kInf));
    const Selection sel =
        select(Gs, prompt.view({1, 1, S}).expand({Hkv, U, S}),
               forced.view({1, 1, S}).expand({Hkv, U, S}), at::full({Hkv, U}, nKeep, at::kLong));
    RowResult r;
    r.sel = sel.mask.logical_or(row.valid.logical_and(row.cidx.eq(0)).view({1, 1, S}));
    r.margin = sel.margin;
    r.marginRel = sel.marginRel;
    if (o.diagnostics) {
        const int64_t Hq = p.Hq;
        r.extra["z_hat"] = zHat.reshape({Hq, S});
        r.extra["score"] = G.expand({Hkv, g, S}).reshape({Hq, S});
        r.extra["mu_bar"] = muBar.to(ct);
        r.extra["n_keep"] = at::full({Hq}, nKeep, at::kLong);
    }
    return r;
}

AttentionResult runExpectedAttention(const Prepared& p, const AttentionInputs& in,
                                     const AttentionConfig& c, const AttendOptions& o) {
    checkBudget(c.k, 0);
    const at::Tensor qAll = in.input("q_all");
    if (!qAll.defined())
        fail("expected-attention needs the query of every prompt position (a capture made with "
             "--all-queries)");
    if (qAll.dim() != 4 || qAll.size(0) != p.B || qAll.size(1) != p.Hq || qAll.size(2) != p.S ||
        qAll.size(3) != p.D)
        fail("the queries of every position must be [B, Hq, S, D] = [" + std::to_string(p.B) +
             ", " + std::to_string(p.Hq) + ", " + std::to_string(p.S) + ", " + std::to_string(p.D) +
             "], got " + shapeOf(qAll));
    const at::Tensor invFreq = invFreqOf(c, p.D);
    // Only the statistics positions of some step are read (§2.3: garbage elsewhere).
    const int64_t nSink = c.integer(Param::Sink);
    const at::Tensor X = p.valid.logical_and(causalIndex(p.valid).ge(1))
                             .logical_and(forwardIndex(p.valid).ge(nSink))
                             .any(1); // [B, S]
    const at::Tensor Xq = X.view({p.B, 1, p.S, 1});
    if (o.validate && !at::isfinite(qAll).logical_or(Xq.logical_not()).all().item<bool>())
        throw NonFiniteInputError("the queries of the prompt have non-finite entries at "
                                  "positions expected-attention reads");
    const at::Tensor qa = at::where(Xq, qAll, at::zeros({}, qAll.options()));
    AttentionResult out =
        runRows(p, p.S, o, [&](const StepRow& row) { return eaRow(p, row, qa, invFreq, c, o); });
    if (const auto it = out.extra.find("z_hat"); it != out.extra.end()) {
        out.zHat = it->second;
        out.extra.erase(it);
    }
    return out;
}

void validateEA(const AttentionConfig& c, const ModelShape& shape) {
    if (shape.headDim > 0 && shape.headDim % 2 != 0)
        fail("expected-attention needs an even head dimension (RoPE pairs), the model's is " +
             std::to_string(shape.headDim));
}

/// METHODS2.md §7: the k kept (in ratio mode n_keep + 1 of the S − 1 prompt positions).
double eaTransfer(const TransferArgs& a) {
    TransferArgs b = a;
    if (a.config && a.config->given(Param::Ratio))
        b.k = std::min<int64_t>(a.S, keepCount(a.S - 1, *a.config) + 1);
    return transfer::kept(b);
}

/// Step 1: the expected score G of every prompt position; the kept ones marked.
StepOneView eaStepOne(const StepOneInputs& in) {
    return positionScoresView(
        "<b>Step 1</b> — Expected Attention's score of each prompt position: the attention a "
        "future query is expected to pay it (from the prompt's query mean and covariance, rotated "
        "to the positions ahead) times its value's norm; the highest (orange) are kept with the "
        "sinks and the current token",
        "expected score G", in.result->output("score")[0][in.head],
        in.result->selected[0][in.head]);
}

/// In a model (kvpress presses the prefill once): every earlier query is kept for the
/// statistics, the prompt compressed at the first decode step (CompressOnce).
constexpr CompressOnce kEACompress{.allQueries = true};

} // namespace
} // namespace sparqlab::attention::detail

SPARQLAB_METHOD(expected_attention) {
    return {.info = {.id = Method::ExpectedAttention,
                     .name = "expected-attention",
                     .label = "Expected Attention",
                     .summary = "the prompt compressed once by the attention future queries are "
                                "expected to pay each position, from the prompt's query statistics "
                                "(NVIDIA kvpress 2025)",
                     .spec = "METHODS2.md §3",
                     .params = {Param::K, Param::Ratio, Param::Sink, Param::NFuture,
                                Param::NoCovariance, Param::NoVnorm, Param::Epsilon, Param::Gqa},
                     .gqaRules = {GroupSelect::SumProbs, GroupSelect::PerHead},
                     .transfer = detail::eaTransfer,
                     .transferFormula = "2·k·d + 2·d",
                     .evalGrid = "k=128,256,512,1024"},
            .run = detail::runExpectedAttention,
            .validate = detail::validateEA,
            .causal = &detail::compressOnceHooks<detail::kEACompress>,
            .inputs = {{"q_all", "[B, Hq, S, D]",
                        "the post-RoPE query of every position (a capture made with --all-queries)",
                        /*positions=*/true}},
            .outputs = {{"score", "G per position, 0 outside the scored prompt (§3.4)"},
                        {"mu_bar", "the rotated query mean μ̄ [D] (§3.3)"},
                        {"n_keep", "the prompt positions kept (§3.4)"}},
            .stepOne = detail::eaStepOne};
}
