// ShadowKV (METHODS3.md §3): the prompt in chunks of C positions, each with a landmark (the
// mean of its keys); the chunks least like their landmark attended exactly as outliers; the
// others ranked by the query's softmax over their landmarks, the best `budget / C` attended
// with keys rebuilt from a low-rank SVD of the prompt's keys (values exact); the last chunks,
// the remainder and the current token always exact.

#include "shadowkv.h"

#include "attention/method_kit.h"

#include <ATen/ATen.h>

#include <cmath>

namespace sparqlab::attention::detail {

/// The unit's decode kernel (decode.cpp beside this file).
const DecodeKernel& shadowkvDecodeKernel();

namespace {

constexpr double kCosEps = 1e-8; ///< §3.2: each norm clamped, as torch's cosine_similarity

struct ShadowParams {
    int64_t budget, C, rank, L, O;
    bool pre;
};

ShadowParams shadowParams(const AttentionConfig& c) {
    return {c.integer(Param::Budget),        c.integer(Param::ChunkSize),
            c.integer(Param::Rank),          c.integer(Param::LocalChunks),
            c.integer(Param::OutlierChunks), c.integer(Param::ShadowKeys) == 1};
}

void checkShadow(const ShadowParams& s) {
    if (s.C < 1)
        fail("--chunk-size: must be at least 1, got " + std::to_string(s.C));
    if (s.rank < 1)
        fail("--rank: must be at least 1, got " + std::to_string(s.rank));
    if (s.L < 0 || s.O < 0 || s.budget < 0)
        fail("shadowkv needs --local-chunks, --outlier-chunks and --budget of at least 0");
    if (s.budget % s.C != 0)
        fail("--budget: shadowkv's budget must be a multiple of --chunk-size (" +
             std::to_string(s.C) + "), got " + std::to_string(s.budget));
}

/// The pre-RoPE keys [B, Hkv, S, D] and the RoPE tables [B, S, D] of key_mode = pre: given, or
/// made from the keys and the layer's RoPE (§2: K_pre = rope⁻¹(K)).
struct PreKeys {
    at::Tensor k, cos, sin;
};

PreKeys preKeys(const Prepared& p, const AttentionInputs& in, const AttentionConfig& c,
                bool validate) {
    PreKeys r;
    if (p.D % 2 != 0)
        fail("shadowkv --shadowkv-keys pre needs an even head dimension (RoPE pairs), got " +
             std::to_string(p.D));
    r.cos = in.input("rope_cos");
    r.sin = in.input("rope_sin");
    r.k = in.input("k_pre");
    const at::Tensor used = p.valid.any(1); // [B, S]
    if (!r.cos.defined() || !r.sin.defined()) {
        if (!c.ropeInvFreq.defined())
            fail("shadowkv --shadowkv-keys pre needs the model's RoPE (the pre-RoPE keys or "
                 "its tables; this layer or capture records none)");
        const at::Tensor f = c.ropeInvFreq.to(at::kDouble);
        if (f.dim() != 1 || f.size(0) != p.D / 2)
            fail("shadowkv: the RoPE inverse frequencies must be [D/2] = [" +
                 std::to_string(p.D / 2) + "], got " + shapeOf(f));
        // Position ids: the forward index of each position in its row (an unpadded prompt).
        const at::Tensor fi = forwardIndex(used).clamp_min(0);
        std::tie(r.cos, r.sin) = ropeTables(fi, f);
    }
    const std::vector<int64_t> tableShape{p.B, p.S, p.D};
    if (r.cos.sizes() != at::IntArrayRef(tableShape) ||
        r.sin.sizes() != at::IntArrayRef(tableShape))
        fail("shadowkv: the RoPE tables must be [B, S, D] = [" + std::to_string(p.B) + ", " +
             std::to_string(p.S) + ", " + std::to_string(p.D) + "], got " + shapeOf(r.cos) +
             " and " + shapeOf(r.sin));
    const at::ScalarType ct = p.qg.scalar_type();
    const at::Tensor zero = at::zeros({}, p.options());
    const at::Tensor ut = used.unsqueeze(-1);
    if (validate && !(at::isfinite(r.cos).logical_or(ut.logical_not()).all().item<bool>() &&
                      at::isfinite(r.sin).logical_or(ut.logical_not()).all().item<bool>()))
        throw NonFiniteInputError("shadowkv: the RoPE tables have non-finite entries at valid "
                                  "positions");
    r.cos = at::where(ut, r.cos.to(ct), zero);
    r.sin = at::where(ut, r.sin.to(ct), zero);
    if (!r.k.defined()) {
        r.k = ropeApply(p.k, r.cos.unsqueeze(1), -r.sin.unsqueeze(1));
    } else {
        if (r.k.sizes() != p.k.sizes())
            fail("shadowkv: the pre-RoPE keys must be [B, Hkv, S, D] like K " + shapeOf(p.k) +
                 ", got " + shapeOf(r.k));
        const at::Tensor uk = used.view({p.B, 1, p.S, 1});
        if (validate && !at::isfinite(r.k).logical_or(uk.logical_not()).all().item<bool>())
            throw NonFiniteInputError("shadowkv: the pre-RoPE keys have non-finite entries at "
                                      "valid positions");
        r.k = at::where(uk, r.k.to(ct), zero);
    }
    return r;
}

/// What may be given instead of made from the keys (the decode engine's prepared state, on q's
/// device; each pair undefined: made here): the chunks' landmarks [B, Hkv, n_ch, D] and outlier
/// mask [B, Hkv, n_ch], the low-rank factors A [B, n_p, r] and Vt [B, r, Hkv·D].
struct ShadowGiven {
    at::Tensor landmarks, outliers, A, Vt;
};

ShadowGiven givenState(const Prepared& p, const AttentionInputs& in, bool validate) {
    ShadowGiven g;
    g.landmarks = in.input("landmarks");
    g.outliers = in.input("outlier_mask");
    g.A = in.input("svd_a");
    g.Vt = in.input("svd_vt");
    if (g.landmarks.defined() != g.outliers.defined())
        fail("shadowkv: given landmarks need their outlier mask, and the other way round");
    if (g.A.defined() != g.Vt.defined())
        fail("shadowkv: a given low-rank factor svd_a needs svd_vt, and the other way round");
    const auto dims = [](const at::Tensor& t, std::vector<int64_t> want) {
        if (t.dim() != static_cast<int64_t>(want.size()))
            return false;
        for (size_t i = 0; i < want.size(); ++i)
            if (want[i] >= 0 && t.size(static_cast<int64_t>(i)) != want[i])
                return false;
        return true;
    };
    const auto finite = [&](const at::Tensor& t, const char* what) {
        if (validate && !at::isfinite(t).all().item<bool>())
            throw NonFiniteInputError(std::string("shadowkv: the ") + what +
                                      " have non-finite entries");
    };
    const at::ScalarType ct = p.qg.scalar_type();
    const at::Device dev = p.qg.device();
    if (g.landmarks.defined()) {
        if (!dims(g.landmarks, {p.B, p.Hkv, -1, p.D}) ||
            !dims(g.outliers, {p.B, p.Hkv, g.landmarks.size(2)}))
            fail("shadowkv: the landmarks must be [B, Hkv, n_ch, D] and the outlier mask "
                 "[B, Hkv, n_ch] for B = " +
                 std::to_string(p.B) + ", Hkv = " + std::to_string(p.Hkv) +
                 ", D = " + std::to_string(p.D) + ", got " + shapeOf(g.landmarks) + " and " +
                 shapeOf(g.outliers));
        finite(g.landmarks, "landmarks");
        g.landmarks = g.landmarks.to(dev, ct);
        g.outliers = g.outliers.to(dev, at::kBool);
    }
    if (g.A.defined()) {
        if (!dims(g.A, {p.B, -1, -1}) || g.A.size(2) < 1 ||
            !dims(g.Vt, {p.B, g.A.size(2), p.Hkv * p.D}))
            fail("shadowkv: the low-rank factors must be svd_a [B, n_p, r] and svd_vt "
                 "[B, r, Hkv·D] for B = " +
                 std::to_string(p.B) + ", Hkv·D = " + std::to_string(p.Hkv * p.D) +
                 ", r ≥ 1, got " + shapeOf(g.A) + " and " + shapeOf(g.Vt));
        finite(g.A, "low-rank factors");
        finite(g.Vt, "low-rank factors");
        g.A = g.A.to(dev, ct);
        g.Vt = g.Vt.to(dev, ct);
    }
    return g;
}

RowResult shadowRow(const Prepared& p, const StepRow& row, const ShadowParams& sp,
                    const PreKeys* pre, const ShadowGiven& given, const AttentionConfig& c,
                    const AttendOptions& o) {
    const int64_t Hkv = p.Hkv, g = p.g, S = p.S, D = p.D, Hq = p.Hq, C = sp.C;
    const int64_t U = c.gqa == GroupSelect::PerHead ? g : 1;
    const int64_t Wc = std::max<int64_t>(1, std::max<int64_t>(0, (S - 1) / C - sp.L));
    const at::Tensor prompt = row.pos.narrow(0, 0, row.nValid - 1); // §3.1
    const int64_t nP = prompt.numel();
    const int64_t nCh = std::max<int64_t>(0, nP / C - sp.L);
    const auto longs = row.pos.options();
    at::Tensor local = at::zeros({S}, row.valid.options());
    local.index_fill_(0, prompt.narrow(0, nCh * C, nP - nCh * C), true);
    local[row.pos[row.nValid - 1]] = true; // the current token
    RowResult r;
    r.sel = local.view({1, 1, S}).expand({Hkv, U, S}).clone();
    const auto dopt = p.options();
    at::Tensor minCos = at::full({Hkv, Wc}, kInf, dopt),
               landmarkProbs = at::zeros({Hkv, g, Wc}, dopt);
    at::Tensor chunkSel = at::zeros({Hkv, U, Wc}, row.valid.options());
    at::Tensor chunkOut = at::zeros({Hkv, Wc}, row.valid.options());
    at::Tensor outMargin = at::full({Hkv}, kInf, dopt), outMarginRel = outMargin.clone();
    int64_t rankEff = 0;
    double svGap = kInf;
    if (nCh > 0) {
        const at::Tensor cpos = prompt.narrow(0, 0, nCh * C);                     // [n_ch·C]
        const at::Tensor Kc = row.k.index_select(1, cpos).view({Hkv, nCh, C, D}); // post-RoPE
        const int64_t nOut = std::min(sp.O, nCh);
        ShadowChunks chunks;
        if (given.landmarks.defined()) {
            if (given.landmarks.size(2) != nCh)
                fail("shadowkv: the given landmarks hold " +
                     std::to_string(given.landmarks.size(2)) + " chunks, the prompt has " +
                     std::to_string(nCh));
            chunks.landmarks = given.landmarks[row.b];
            chunks.minCos = at::full({Hkv, nCh}, kInf, dopt);
            chunks.outliers = {given.outliers[row.b], at::full({Hkv}, kInf, dopt),
                               at::full({Hkv}, kInf, dopt)};
        } else {
            chunks = shadowChunks(Kc, nOut);
        }
        const at::Tensor& lam = chunks.landmarks;
        const Selection& out = chunks.outliers;
        minCos.narrow(1, 0, nCh).copy_(chunks.minCos);
        outMargin = out.margin;
        outMarginRel = out.marginRel;
        chunkOut.narrow(1, 0, nCh).copy_(out.mask);
        const at::Tensor rest = out.mask.logical_not(); // [Hkv, n_ch]
        // §3.3: the query's softmax over the remaining landmarks.
        const at::Tensor zl = scaledLogits(p, at::matmul(row.q, lam.transpose(1, 2)))
                                  .masked_fill(rest.unsqueeze(1).logical_not(), -kInf);
        // (a head whose every chunk is an outlier ranks none)
        const at::Tensor anyRest = rest.any(-1).view({Hkv, 1, 1});
        const at::Tensor a = at::where(anyRest, at::softmax(zl, -1), at::zeros({}, dopt));
        landmarkProbs.narrow(2, 0, nCh).copy_(a);
        at::Tensor G;
        if (c.gqa == GroupSelect::MaxProbs)
            G = std::get<0>(a.max(1, /*keepdim=*/true));
        else if (c.gqa == GroupSelect::SumProbs)
            G = seqSum(a, 1).unsqueeze(1);
        else
            G = zl;
        // min(budget / C, the chunks left), nCh − nOut in every head unless the outliers are given
        const at::Tensor nSel =
            rest.sum(-1).clamp_max(sp.budget / C).view({Hkv, 1}).expand({Hkv, U});
        const at::Tensor restU = rest.unsqueeze(1).expand({Hkv, U, nCh});
        const Selection cs = select(G, restU, at::zeros_like(restU), nSel);
        r.margin = cs.margin;
        r.marginRel = cs.marginRel;
        chunkSel.narrow(2, 0, nCh).copy_(cs.mask);
        // The positions of the outlier and the selected chunks.
        const at::Tensor outPos = at::zeros({Hkv, S}, row.valid.options());
        outPos.index_copy_(1, cpos,
                           out.mask.unsqueeze(-1).expand({Hkv, nCh, C}).reshape({Hkv, nCh * C}));
        const at::Tensor selPos = at::zeros({Hkv, U, S}, row.valid.options());
        selPos.index_copy_(
            2, cpos, cs.mask.unsqueeze(-1).expand({Hkv, U, nCh, C}).reshape({Hkv, U, nCh * C}));
        r.sel = r.sel.logical_or(outPos.unsqueeze(1)).logical_or(selPos);
        // §3.4: keys rebuilt from the rank-r SVD of the prompt's keys of every KV head.
        LowRankFactors f;
        if (given.A.defined()) {
            if (given.A.size(1) != nP)
                fail("shadowkv: the given low-rank factor svd_a has " +
                     std::to_string(given.A.size(1)) + " rows, the prompt " + std::to_string(nP) +
                     " positions");
            f.A = given.A[row.b];
            f.Vt = given.Vt[row.b];
            rankEff = f.A.size(1);
        } else {
            const at::Tensor src = pre ? pre->k[row.b] : row.k;
            const at::Tensor X =
                src.index_select(1, prompt).permute({1, 0, 2}).reshape({nP, Hkv * D});
            f = lowRankFactors(X, sp.rank);
            rankEff = std::min({sp.rank, nP, Hkv * D});
        }
        const at::Tensor Xt = at::matmul(f.A, f.Vt), &sv = f.sv;
        if (sv.defined() && rankEff < sv.numel()) {
            const double s0 = sv[0].item<double>();
            svGap =
                s0 > 0 ? (sv[rankEff - 1].item<double>() - sv[rankEff].item<double>()) / s0 : 0.0;
        }
        at::Tensor Kt = Xt.view({nP, Hkv, D}).permute({1, 0, 2}); // [Hkv, n_p, D]
        if (pre)
            Kt = ropeApply(Kt, pre->cos[row.b].index_select(0, prompt).unsqueeze(0),
                           pre->sin[row.b].index_select(0, prompt).unsqueeze(0));
        const at::Tensor Krec = row.k.clone().index_copy_(1, prompt, Kt.contiguous());
        const at::Tensor zRec = scaledLogits(p, at::matmul(row.q, Krec.transpose(1, 2)));
        const at::Tensor zExact = scaledLogits(p, at::matmul(row.q, row.k.transpose(1, 2)));
        r.logits = at::where(selPos.expand({Hkv, g, S}), zRec, zExact)
                       .masked_fill(row.valid.logical_not().view({1, 1, S}), -kInf);
    }
    if (o.diagnostics) {
        auto perHead = [&](const at::Tensor& x) { // [Hkv, …] → [Hq, …]
            std::vector<int64_t> shape{Hkv, g};
            shape.insert(shape.end(), x.sizes().begin() + 1, x.sizes().end());
            std::vector<int64_t> flat{Hq};
            flat.insert(flat.end(), x.sizes().begin() + 1, x.sizes().end());
            return x.unsqueeze(1).expand(shape).reshape(flat);
        };
        r.extra["selected_chunks"] =
            maskToIndices(chunkSel.expand({Hkv, g, Wc}), Wc).reshape({Hq, Wc});
        r.extra["outlier_chunks"] = perHead(maskToIndices(chunkOut, Wc));
        r.extra["outlier_margin"] = perHead(outMargin);
        r.extra["outlier_margin_rel"] = perHead(outMarginRel);
        r.extra["n_chunks"] = at::full({Hq}, nCh, longs);
        r.extra["rank_eff"] = at::full({Hq}, rankEff, longs);
        r.extra["sv_gap_rel"] = at::full({Hq}, svGap, dopt);
        r.extra["min_cos"] = perHead(minCos);
        r.extra["landmark_probs"] = landmarkProbs.reshape({Hq, Wc});
    }
    return r;
}

AttentionResult runShadowKV(const Prepared& p, const AttentionInputs& in, const AttentionConfig& c,
                            const AttendOptions& o) {
    const ShadowParams sp = shadowParams(c);
    checkShadow(sp);
    std::optional<PreKeys> pre;
    if (sp.pre)
        pre = preKeys(p, in, c, o.validate);
    const ShadowGiven given = givenState(p, in, o.validate);
    return runRows(p, p.S, o, [&](const StepRow& row) {
        return shadowRow(p, row, sp, pre ? &*pre : nullptr, given, c, o);
    });
}

/// §3.9: the defaults are sized for long contexts of large models (Llama-3-8B: keys of 8 × 128 =
/// 1,024 per position, S in the tens of thousands). At a shorter S or a narrower key each one left
/// unset is scaled down: the rank with the key width, the local and outlier chunks to an eighth
/// of the ⌊S/C⌋ chunks each, the budget to a quarter of the chunks left to rank. A user's value
/// is never changed.
std::vector<std::string> fitShadow(AttentionConfig& c, int64_t S, const ModelShape& m) {
    constexpr int64_t kReferenceWidth = 1024; // the key width the default rank is for
    std::vector<std::string> notes;
    const auto fit = [&](Param p, int64_t v, const std::string& why) {
        const int64_t was = c.integer(p);
        if (c.given(p) || v >= was)
            return;
        c.values[p] = static_cast<double>(v);
        notes.push_back(std::string(paramInfo(p).label) + " " + std::to_string(was) + " → " +
                        std::to_string(v) + " (" + why + ")");
    };
    const int64_t C = std::max<int64_t>(1, c.integer(Param::ChunkSize));
    const int64_t nCh = S / C, width = m.kvHeads * m.headDim;
    const std::string chunks =
        std::to_string(nCh) + " chunks of " + std::to_string(C) + " at S = " + std::to_string(S);
    if (width > 0 && width < kReferenceWidth)
        fit(Param::Rank,
            std::max<int64_t>(1, (c.integer(Param::Rank) * width + kReferenceWidth - 1) /
                                     kReferenceWidth),
            "scaled to keys " + std::to_string(width) + " wide from the default's 1,024");
    fit(Param::Rank, std::max<int64_t>(1, S), "at most S = " + std::to_string(S));
    fit(Param::LocalChunks, std::max<int64_t>(1, nCh / 8), "an eighth of the " + chunks);
    fit(Param::OutlierChunks, nCh / 8, "an eighth of the " + chunks);
    const int64_t ranked =
        std::max<int64_t>(0, nCh - c.integer(Param::LocalChunks) - c.integer(Param::OutlierChunks));
    fit(Param::Budget, C * std::max<int64_t>(1, ranked / 4),
        "a quarter of the " + std::to_string(ranked) + " chunks ranked");
    return notes;
}

void validateShadow(const AttentionConfig& c, const ModelShape&) {
    checkShadow(shadowParams(c));
}

/// METHODS3.md §6, literal (k = the budget; MLA's values count d_v).
double shadowTransfer(const TransferArgs& a) {
    const double C = a.param(Param::ChunkSize), L = a.param(Param::LocalChunks),
                 O = a.param(Param::OutlierChunks), r = a.param(Param::Rank),
                 k = a.param(Param::Budget), d = static_cast<double>(a.d);
    const double chunks = std::floor(static_cast<double>(a.S) / C);
    return (chunks - L - O) * d + r * d + k * r + k * a.v() + (L + O) * C * a.kv() + a.kv();
}

/// Step 1: the query's softmax over the landmarks, a bar per chunk; the selected orange.
StepOneView shadowStepOne(const StepOneInputs& in) {
    StepOneView v;
    const int64_t C = in.config->integer(Param::ChunkSize);
    v.caption = "<b>Step 1</b> — ShadowKV's landmarks: the query's softmax over the mean key of "
                "each chunk of " +
                std::to_string(C) +
                " positions (outlier chunks, attended exactly, left out); the selected chunks "
                "(orange) are attended with keys rebuilt from a rank-" +
                paramValue(*in.config, Param::Rank) + " SVD";
    v.xLabel = "position (one bar per chunk)";
    v.yLabel = "landmark probability";
    v.x0 = static_cast<double>(C - 1) / 2;
    v.dx = static_cast<double>(C);
    const int64_t nCh = in.result->output("n_chunks")[0][in.head].item<int64_t>();
    const at::Tensor probs =
        in.result->output("landmark_probs")[0][in.head].to(at::kCPU, at::kDouble).contiguous();
    for (int64_t i = 0; i < nCh; ++i) {
        v.values.push_back(probs.data_ptr<double>()[i]);
        v.used.push_back(0);
    }
    const at::Tensor sel = in.result->output("selected_chunks")[0][in.head].cpu().contiguous();
    for (int64_t i = 0; i < sel.numel(); ++i) {
        const int64_t ch = sel.data_ptr<int64_t>()[i];
        if (ch >= 0 && ch < nCh)
            v.used[static_cast<size_t>(ch)] = 1;
    }
    return v;
}

} // namespace

ShadowChunks shadowChunks(const at::Tensor& Kc, int64_t nOut) {
    const int64_t Hkv = Kc.size(0), nCh = Kc.size(1), C = Kc.size(2);
    ShadowChunks r;
    r.landmarks = seqSum(Kc, 2) / static_cast<double>(C);
    const at::Tensor num = (r.landmarks.unsqueeze(2) * Kc).sum(-1);
    const at::Tensor den = r.landmarks.norm(2, -1).clamp_min(kCosEps).unsqueeze(-1) *
                           Kc.norm(2, -1).clamp_min(kCosEps);
    r.minCos = (num / den).amin(-1); // [Hkv, n_ch]
    const at::Tensor all = at::ones({Hkv, nCh}, Kc.options().dtype(at::kBool));
    r.outliers = select(-r.minCos, all, at::zeros_like(all),
                        at::full({Hkv}, nOut, Kc.options().dtype(at::kLong)));
    return r;
}

LowRankFactors lowRankFactors(const at::Tensor& X, int64_t rank) {
    const auto [U, sv, Vh] = at::linalg_svd(X, /*full_matrices=*/false);
    const int64_t r = std::min({rank, X.size(0), X.size(1)});
    const at::Tensor Vr = Vh.narrow(0, 0, r);
    return {at::matmul(X, Vr.t()), Vr, sv};
}

} // namespace sparqlab::attention::detail

SPARQLAB_METHOD(shadowkv) {
    return {
        .info = {.id = Method::ShadowKV,
                 .name = "shadowkv",
                 .label = "ShadowKV",
                 .summary = "chunks ranked by their mean key (landmark), the best attended "
                            "with low-rank SVD keys, outlier chunks exact (Sun et al. 2025)",
                 .spec = "METHODS3.md §3",
                 .params = {Param::Budget, Param::ChunkSize, Param::Rank, Param::LocalChunks,
                            Param::OutlierChunks, Param::Gqa, Param::ShadowKeys},
                 .gqaRules = {GroupSelect::MaxProbs, GroupSelect::SumProbs, GroupSelect::PerHead},
                 .defaults = {{Param::ChunkSize, "8"}},
                 .transfer = detail::shadowTransfer,
                 .transferFormula = "(⌊S/C⌋ − L − O)·d + r·d + k·r + k·d + 2·(L + O)·C·d + 2·d",
                 .evalGrid = "budget=128,256,512,1024"},
        .run = detail::runShadowKV,
        .validate = detail::validateShadow,
        .decode = &detail::shadowkvDecodeKernel(),
        .inputs = {{"k_pre", "[B, Hkv, S, D]",
                    "pre-RoPE keys for --shadowkv-keys pre (from K and the model's RoPE when "
                    "absent)"},
                   {"rope_cos", "[B, S, D]", "the RoPE cos table of each position"},
                   {"rope_sin", "[B, S, D]", "the RoPE sin table of each position"},
                   {"landmarks", "[B, Hkv, n_ch, D]",
                    "the chunks' landmarks (§3.2; the decode engine's, made from K when absent)"},
                   {"outlier_mask", "[B, Hkv, n_ch]", "the outlier chunks of given landmarks"},
                   {"svd_a", "[B, n_p, r]",
                    "the prompt's low-rank key factor A = X·V_r (§3.4; from an SVD of K when "
                    "absent)"},
                   {"svd_vt", "[B, r, Hkv·D]", "its V_rᵀ"}},
        .outputs = {{"selected_chunks", "chunks attended with rebuilt keys (§3.3)"},
                    {"outlier_chunks", "chunks attended exactly as outliers (§3.2)"},
                    {"n_chunks", "chunks of the prompt (§3.1)"},
                    {"rank_eff", "the SVD rank used (§3.4)"},
                    {"sv_gap_rel", "the singular-value gap at the cut (§3.4)"},
                    {"landmark_probs", "the query's softmax over the landmarks (§3.3)"}},
        .stepOne = detail::shadowStepOne,
        .fit = detail::fitShadow};
}
