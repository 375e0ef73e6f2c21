// RocketKV (METHODS3.md §4): SnapKV's eviction of the prompt to k₁ positions (max pooling,
// votes summed over the KV group), then on what it kept a hybrid sparse attention: a table of
// each chunk of c kept positions' largest signed key per channel, the query's r largest
// channels scored against it with SparQ's temperature, and exact attention over the best k.

#include "rocketkv.h"

#include "attention/method_kit.h"
#include "attention/temperature.h"

#include <ATen/ATen.h>

#include <cmath>

namespace sparqlab::attention::detail {

/// The unit's decode kernel (decode.cpp beside this file).
const DecodeKernel& rocketkvDecodeKernel();

namespace {

void checkRocket(const RocketParams& r, int64_t w) { // (the kernel: the table's rules)
    if (w < 1 || r.k1 < w)
        fail("--prompt-budget: rocketkv keeps the window, so k1 must be at least --window (" +
             std::to_string(w) + "), got " + std::to_string(r.k1));
    if (r.k < 1 || r.c < 1 || r.r < 1)
        fail("rocketkv needs --k, --chunk-size and --r of at least 1");
}

/// §4.3 for the kept set A [Hkv, S] of one row: what stage 2 selects and how it scored.
struct Stage2 {
    at::Tensor sel;               ///< [Hkv, U, S]
    at::Tensor margin, marginRel; ///< [Hkv, U]
    at::Tensor zHat;              ///< [Hkv, g, S], −inf outside A
    at::Tensor tau;               ///< [Hkv, g]
    at::Tensor comp;              ///< [Hkv, r_eff] the channels, ascending
};

Stage2 stage2(const at::Tensor& q, const at::Tensor& k, const at::Tensor& A, const RocketParams& rp,
              bool perHead, double scale, bool defaultScale, double softcap) {
    const int64_t Hkv = k.size(0), S = k.size(1), D = k.size(2), g = q.size(1);
    const int64_t rEff = std::min(rp.r, D), c = rp.c, U = perHead ? g : 1;
    const auto longs = q.options().dtype(at::kLong);
    Stage2 s;
    s.sel = at::zeros({Hkv, U, S}, A.options());
    s.margin = at::full({Hkv, U}, kInf, q.options());
    s.marginRel = s.margin.clone();
    s.zHat = at::full({Hkv, g, S}, -kInf, q.options());
    s.tau = at::zeros({Hkv, g}, q.options());
    s.comp = at::zeros({Hkv, rEff}, longs);
    for (int64_t u = 0; u < Hkv; ++u) {
        const at::Tensor pos = A[u].nonzero().flatten(); // A, ascending
        const int64_t nA = pos.numel();
        if (nA == 0)
            continue;
        const at::Tensor Ku = k[u].index_select(0, pos); // [nA, D]
        const at::Tensor Qu = q[u];                      // [g, D]
        const at::Tensor sign =
            at::where(seqSum(Qu, 0).gt(0), at::ones({D}, q.options()), -at::ones({D}, q.options()));
        // The chunk table: each chunk's largest sign·K per channel (a partial last chunk).
        const int64_t nb = (nA + c - 1) / c;
        at::Tensor padded = at::full({nb * c, D}, -kInf, q.options());
        padded.narrow(0, 0, nA).copy_(Ku * sign);
        const at::Tensor Mx = std::get<0>(padded.view({nb, c, D}).max(1)); // [nb, D]
        // The r channels of largest Σ_h |q_h| (ties → lower channel), ascending.
        const at::Tensor aq = seqSum(Qu.abs(), 0);
        const Selection cs = select(aq.unsqueeze(0), at::ones({1, D}, A.options()),
                                    at::zeros({1, D}, A.options()), at::full({1}, rEff, longs),
                                    /*margins=*/false);
        const at::Tensor i1 = cs.mask[0].nonzero().flatten();
        s.comp[u].copy_(i1);
        const at::Tensor qi = Qu.index_select(1, i1);
        const at::Tensor tau = sparqTemperature(TauMode::Adaptive, 0.0, qi.abs().sum(-1),
                                                Qu.abs().sum(-1), D, rEff); // Eq. 9
        s.tau[u].copy_(tau);
        const at::Tensor est =
            at::matmul(qi * sign.index_select(0, i1), Mx.index_select(1, i1).t()); // [g, nb]
        at::Tensor zc = est.repeat_interleave(c, 1).narrow(1, 0, nA) / tau.unsqueeze(-1);
        if (!defaultScale) // a model whose scale is not 1/sqrt(D) rescales alike
            zc = zc * (scale * std::sqrt(static_cast<double>(D)));
        zc = softcapped(zc, softcap);
        s.zHat[u].index_copy_(1, pos, zc);
        const at::Tensor G = perHead ? zc : seqSum(at::softmax(zc, -1), 0).unsqueeze(0);
        const int64_t n2 = std::min(rp.k, nA);
        const Selection sel = select(G, at::ones_like(G, A.options()),
                                     at::zeros_like(G, A.options()), at::full({U}, n2, longs));
        s.margin[u].copy_(sel.margin);
        s.marginRel[u].copy_(sel.marginRel);
        s.sel[u].index_copy_(1, pos, sel.mask);
    }
    return s;
}

AttentionResult runRocketKV(const Prepared& p, const AttentionInputs& in, const AttentionConfig& c,
                            const AttendOptions& o) {
    const int64_t w = c.snapWindow;
    // The first stage's kept set given (the decode engine's: its cache's input or the last k₁):
    // stage 2 alone, without the window's queries.
    at::Tensor givenKept = in.input("rocketkv_kept");
    if (givenKept.defined()) {
        if (givenKept.dim() != 3 || givenKept.size(0) != p.B || givenKept.size(1) != p.Hkv ||
            givenKept.size(2) != p.S)
            fail("rocketkv: the kept set must be [B, Hkv, S] = [" + std::to_string(p.B) + ", " +
                 std::to_string(p.Hkv) + ", " + std::to_string(p.S) + "], got " +
                 shapeOf(givenKept));
        givenKept = givenKept.to(p.valid.device(), at::kBool);
    } else {
        checkWindowQueries(p, in.qWin, w, "rocketkv");
    }
    const bool perHead = c.gqa == GroupSelect::PerHead;
    // Each step's parameters (from its length with --token-budget).
    const at::Tensor nv = p.nValid.contiguous();
    std::vector<RocketParams> params;
    at::Tensor k1 = at::empty({p.B, p.T}, at::kLong);
    for (int64_t b = 0; b < p.B; ++b)
        for (int64_t t = 0; t < p.T; ++t) {
            params.push_back(rocketParams(c, nv[b][t].item<int64_t>(), p.D));
            checkRocket(params.back(), w);
            k1[b][t] = params.back().k1;
        }
    k1 = k1.to(p.valid.device());
    // Stage 1 (§4.2): SnapKV with max pooling and the group's votes, in chunks of steps.
    at::Tensor A, M1, R1, P1;
    if (givenKept.defined()) {
        A = givenKept.unsqueeze(2).logical_and(p.valid.unsqueeze(1)); // [B, Hkv, T, S]
        M1 = at::full({p.B, p.Hkv, p.T}, kInf, p.options());
        R1 = M1;
        P1 = at::zeros({p.B, p.Hkv, p.T, p.S}, p.options());
    } else {
        const int64_t chunk = stepsPerChunk(p.B * p.Hq * w * p.S);
        std::vector<at::Tensor> keep, m1, r1, pooled;
        for (int64_t t0 = 0; t0 < p.T; t0 += chunk) {
            const int64_t n = std::min(chunk, p.T - t0);
            const WindowKeep s = windowKeep(p, in.qWin, k1.narrow(1, t0, n), w, c.kernel,
                                            Pooling::Max, /*perHead=*/false, t0, n, o.validate);
            keep.push_back(s.sel.mask.select(2, 0)); // [B, Hkv, n, S]
            m1.push_back(s.sel.margin.select(2, 0)); // [B, Hkv, n]
            r1.push_back(s.sel.marginRel.select(2, 0));
            pooled.push_back(s.pooled.select(2, 0));
        }
        A = at::cat(keep, 2);
        M1 = at::cat(m1, 2);
        R1 = at::cat(r1, 2);
        P1 = at::cat(pooled, 2);
    }
    AttentionResult out = runRows(p, p.S, o, [&](const StepRow& row) {
        const RocketParams& rp = params[static_cast<size_t>(row.b * p.T + row.t)];
        const at::Tensor Ar = A[row.b].select(1, row.t); // [Hkv, S]
        const Stage2 s2 = stage2(row.q, row.k, Ar, rp, perHead, p.scale, p.defaultScale, p.softcap);
        RowResult r;
        r.sel = s2.sel;
        r.margin = s2.margin;
        r.marginRel = s2.marginRel;
        if (o.diagnostics) {
            const int64_t Hkv = p.Hkv, g = p.g, Hq = p.Hq, S = p.S;
            auto perHeadOf = [&](const at::Tensor& x) {
                std::vector<int64_t> shape{Hkv, g}, flat{Hq};
                shape.insert(shape.end(), x.sizes().begin() + 1, x.sizes().end());
                flat.insert(flat.end(), x.sizes().begin() + 1, x.sizes().end());
                return x.unsqueeze(1).expand(shape).reshape(flat);
            };
            r.extra["kept"] =
                perHeadOf(maskToIndices(Ar, givenKept.defined() ? S : std::min(rp.k1, S)));
            r.extra["stage1_margin"] = perHeadOf(M1[row.b].select(1, row.t));
            r.extra["stage1_margin_rel"] = perHeadOf(R1[row.b].select(1, row.t));
            r.extra["tau"] = s2.tau.reshape({Hq});
            r.extra["comp_idx"] = perHeadOf(s2.comp);
            r.extra["z_hat"] = s2.zHat.reshape({Hq, S});
            r.extra["stage1_pooled"] = perHeadOf(P1[row.b].select(1, row.t));
        }
        return r;
    });
    for (auto [name, field] : {std::pair{"z_hat", &AttentionResult::zHat},
                               std::pair{"stage1_pooled", &AttentionResult::pooled}})
        if (const auto it = out.extra.find(name); it != out.extra.end()) {
            out.*field = it->second;
            out.extra.erase(it);
        }
    return out;
}

/// A later step in a model: stage 2 over what stage 1 kept and every position after it.
AttentionResult rocketLater(const CausalChunk& ck, const AttentionConfig& c, const at::Tensor& kept,
                            const AttendOptions& o) {
    const int64_t B = ck.q.size(0), Hq = ck.q.size(1), D = ck.q.size(3), S = ck.k.size(2);
    const int64_t Hkv = ck.k.size(1), g = Hq / Hkv;
    const at::ScalarType ct = computeType(ck.q);
    const at::Tensor z = causalLogits(ck.q, ck.k, ck.pos0, c); // [B, Hq, 1, S]
    at::Tensor sel = at::zeros({B, Hkv, g, S}, kept.options());
    const double scale = c.scale ? *c.scale : 1.0 / std::sqrt(static_cast<double>(D));
    for (int64_t b = 0; b < B; ++b) {
        const at::Tensor A = kept[b]
                                 .view({Hkv, g, S})
                                 .select(1, 0)
                                 .logical_and(z[b].view({Hkv, g, S}).select(1, 0).gt(-kInf));
        const RocketParams rp = rocketParams(c, ck.pos0 + 1, D);
        const Stage2 s2 = stage2(ck.q[b].reshape({Hkv, g, D}).to(ct), ck.k[b].to(ct), A, rp,
                                 c.gqa == GroupSelect::PerHead, scale, !c.scale, c.softcap);
        sel[b].copy_(s2.sel.expand({Hkv, g, S}));
    }
    // The chosen positions lie inside A (valid logits), so exact attention over them is the
    // compressed prompt's.
    return attendKept(ck, c, sel.view({B, Hq, S}), o, z);
}

/// In a model: stage 1 compresses the prompt once (CompressOnce), stage 2 runs every step.
constexpr CompressOnce kRocketCompress{.keptOutput = "kept", .later = rocketLater};

void validateRocket(const AttentionConfig& c, const ModelShape& shape) {
    if (c.integer(Param::TokenBudget) > 0)
        return; // derived per step (§4.5)
    checkRocket(rocketParams(c, 0, std::max<int64_t>(shape.headDim, 1)), c.snapWindow);
}

/// METHODS3.md §6: r channels of the chunk table's ⌈k₁/c⌉ rows, K and V of the k chosen.
double rocketTransfer(const TransferArgs& a) {
    const RocketParams rp =
        a.config ? rocketParams(*a.config, a.S, a.d)
                 : RocketParams{static_cast<int64_t>(a.param(Param::PromptBudget)), a.k, 2, a.r};
    const double rows = std::ceil(static_cast<double>(rp.k1) / static_cast<double>(rp.c));
    return rows * static_cast<double>(rp.r) + static_cast<double>(a.positions(rp.k)) * a.kv() +
           a.kv();
}

/// Step 1: the reduced-dimension score ẑ of each kept position; the chosen ones marked.
StepOneView rocketStepOne(const StepOneInputs& in) {
    StepOneView v;
    v.caption = "<b>Step 1</b> — RocketKV's second stage: each position SnapKV kept, scored by "
                "the query's largest channels against its chunk's largest key (a Quest-like "
                "bound on few channels); the best (orange) are attended exactly";
    v.xLabel = "position";
    v.yLabel = "chunk score ẑ";
    setPositionScores(v, in.result->zHat[0][in.head], in.result->selected[0][in.head]);
    return v;
}

} // namespace

/// §4.5: the original's four parameters from one token budget T at sequence length L_seq
/// (max_new_tokens 0); without a budget the ones given.
RocketParams rocketParams(const AttentionConfig& cfg, int64_t seqLen, int64_t D) {
    const int64_t w = cfg.snapWindow;
    const int64_t T = cfg.integer(Param::TokenBudget);
    if (T <= 0)
        return {cfg.integer(Param::PromptBudget), cfg.k, cfg.integer(Param::ChunkSize), cfg.r};
    const double L = static_cast<double>(seqLen);
    const double cr = std::max(1.0, L / static_cast<double>(T));
    const double e = std::min(0.2 + std::log2(cr) * 0.06, 0.8);
    int64_t cap = static_cast<int64_t>(L / std::pow(cr, e));
    cap = std::max<int64_t>(cap, 0); // max(cap, min(2N, L)) with N = 0
    RocketParams p;
    p.k1 = std::max(cap, w); // (the window is always kept: k₁ ≥ w)
    p.k = std::max<int64_t>(T / 2, 1);
    const double cr2 = std::max(1.0, static_cast<double>(cap) / static_cast<double>(T));
    const auto c = static_cast<int64_t>(std::ceil(std::sqrt(cr2)));
    p.c = static_cast<double>(c) <= cr2 ? c : 1;
    p.r = std::max<int64_t>(1, static_cast<int64_t>(static_cast<double>(D * p.c) / cr2));
    return p;
}

} // namespace sparqlab::attention::detail

SPARQLAB_METHOD(rocketkv) {
    return {.info = {.id = Method::RocketKV,
                     .name = "rocketkv",
                     .label = "RocketKV",
                     .summary = "SnapKV's eviction to k₁ positions, then a chunk table of their "
                                "largest keys scored on r channels picks k (Behnam et al. 2025)",
                     .spec = "METHODS3.md §4",
                     .params = {Param::PromptBudget, Param::K, Param::ChunkSize, Param::R,
                                Param::TokenBudget, Param::Window, Param::Kernel, Param::Gqa},
                     .gqaRules = {GroupSelect::SumProbs, GroupSelect::PerHead},
                     .defaults = {{Param::Kernel, "63"}, {Param::ChunkSize, "2"}},
                     .transfer = detail::rocketTransfer,
                     .transferFormula = "⌈k₁/c⌉·r + 2·k·d + 2·d",
                     .evalGrid = "token-budget=128,256,512,1024"},
            .run = detail::runRocketKV,
            .validate = detail::validateRocket,
            .causal = &detail::compressOnceHooks<detail::kRocketCompress>,
            .decode = &detail::rocketkvDecodeKernel(),
            .inputs = {{"rocketkv_kept", "[B, Hkv, S]",
                        "the first stage's kept set (§4.2), which stage 2 then ranks: the "
                        "decode engine's (its cache's input of that name, else the last k₁ "
                        "positions); chosen by SnapKV from the window's queries when absent",
                        /*positions=*/true}},
            .outputs = {{"kept", "positions stage 1 kept, A (§4.2)"},
                        {"stage1_margin_rel", "stage 1's selection margin (§4.2)"},
                        {"tau", "stage 2's temperature τ (§4.3)"},
                        {"comp_idx", "stage 2's channels i1 (§4.3)"}},
            .stepOne = detail::rocketStepOne};
}
