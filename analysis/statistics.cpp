#include "statistics.h"

#include "attention/temperature.h"

#include "attention/select.h"

#include <ATen/ATen.h>

#include <cmath>
#include <limits>
#include <optional>

namespace sparqlab::analysis {

namespace att = sparqlab::attention;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
const double kGaussTwoSided3 = std::erfc(3.0 / std::sqrt(2.0)); // 2·(1 − Φ(3))

/// Inputs in float64, grouped by KV head: qg [B, Hkv, g, D], K [B, Hkv, S, D] (zero where
/// invalid), valid [B, S].
struct Grouped {
    int64_t B, Hq, Hkv, g, S, D;
    at::Tensor qg, k, valid, nValid;
    std::optional<double> scale; ///< the model's logit scale (unset: 1/sqrt(D))
    double softcap = 0;          ///< the model's logit soft-cap
    at::Tensor sinks;            ///< [1, Hkv, g, 1] the model's sink logits (undefined: none)
    at::Tensor validKS() const { return valid.view({B, 1, 1, S}); }
    at::Tensor heads(const at::Tensor& x) const { return x.reshape({B, Hq}); }
};

Grouped group(const at::Tensor& q, const at::Tensor& k, const at::Tensor& valid,
              const att::AttentionConfig& mods) {
    if (q.dim() != 3 || k.dim() != 4 || q.size(0) != k.size(0) || q.size(2) != k.size(3) ||
        q.size(1) % k.size(1) != 0)
        throw att::AttentionError("statistics need q [B, Hq, D] and K [B, Hkv, S, D]");
    Grouped p;
    p.B = q.size(0);
    p.Hq = q.size(1);
    p.D = q.size(2);
    p.Hkv = k.size(1);
    p.S = k.size(2);
    p.g = p.Hq / p.Hkv;
    p.valid =
        valid.defined() ? valid.to(at::kBool).expand({p.B, p.S}) : at::ones({p.B, p.S}, at::kBool);
    if (mods.slidingWindow > 0) // the model's window: older keys are invalid (CONTRACTS.md §7)
        p.valid = p.valid.logical_and(att::causalIndex(p.valid).lt(mods.slidingWindow));
    if (mods.chunk > 0) { // the query's chunk only (it sits at the last valid position)
        const at::Tensor pos = at::arange(p.S, at::kLong).view({1, p.S});
        const at::Tensor last =
            at::where(p.valid, pos, at::full({}, int64_t{0}, at::kLong)).amax(-1, true);
        p.valid = p.valid.logical_and(
            at::floor_divide(pos, mods.chunk).eq(at::floor_divide(last, mods.chunk)));
    }
    p.nValid = p.valid.sum(-1);
    // SPARQ.md §2.1's preconditions, as attend() checks them: an error, not NaN numbers.
    if (p.nValid.lt(1).any().item<bool>())
        throw att::AttentionError("statistics: every batch row needs at least one valid position");
    if (!at::isfinite(q).all().item<bool>())
        throw att::NonFiniteInputError("statistics: q has non-finite entries (NaN or inf)");
    if (!at::isfinite(k)
             .logical_or(p.valid.logical_not().view({p.B, 1, p.S, 1}))
             .all()
             .item<bool>())
        throw att::NonFiniteInputError(
            "statistics: K has non-finite entries (NaN or inf) at valid positions");
    if (mods.sinks.defined()) {
        if (mods.sinks.numel() != p.Hq)
            throw att::AttentionError("statistics: the attention sinks need one logit per "
                                      "query head");
        p.sinks = mods.sinks.to(at::kDouble).view({1, p.Hkv, p.g, 1});
    }
    p.scale = mods.scale;
    p.softcap = mods.softcap;
    p.qg = q.to(at::kDouble).reshape({p.B, p.Hkv, p.g, p.D});
    p.k = at::where(p.valid.view({p.B, 1, p.S, 1}), k.to(at::kDouble),
                    at::scalar_tensor(0.0, at::kDouble));
    return p;
}

/// Scores (q·K or their approximations at the 1/sqrt(D) scale) as the model's logits: its
/// scale and soft-cap, −inf at invalid positions.
at::Tensor asLogits(const Grouped& p, at::Tensor z) {
    if (p.scale)
        z = z * (*p.scale * std::sqrt(static_cast<double>(p.D)));
    if (p.softcap > 0)
        z = at::tanh(z / p.softcap) * p.softcap;
    return z.masked_fill(p.validKS().logical_not(), -kInf);
}

/// Attention probabilities of logits [B, Hkv, g, S], the model's sinks included.
at::Tensor probabilities(const Grouped& p, const at::Tensor& z) {
    return att::softmaxWithSink(z, p.sinks);
}

/// x plus the sink's share 1 − Σ s where the model has sinks: every method keeps the sink
/// (docs/sinks-chunks-nope-mla.md), so a selection's mass counts it.
at::Tensor withSink(const Grouped& p, const at::Tensor& x, const at::Tensor& s) {
    return p.sinks.defined() ? x + (1 - s.sum(-1)).clamp_min(0) : x;
}

at::Tensor exactLogits(const Grouped& p) {
    return asLogits(p,
                    at::matmul(p.qg, p.k.transpose(-1, -2)) / std::sqrt(static_cast<double>(p.D)));
}

/// Σ_{c ∈ components} q_c K_jc per head, components [B, Hkv, g, r]. [B, Hkv, g, S]
at::Tensor partialDots(const Grouped& p, const at::Tensor& comp) {
    const int64_t r = comp.size(-1);
    const at::Tensor qh = p.qg.gather(-1, comp);
    const at::Tensor idx = comp.unsqueeze(3).expand({p.B, p.Hkv, p.g, p.S, r});
    const at::Tensor kh = p.k.unsqueeze(2).expand({p.B, p.Hkv, p.g, p.S, p.D}).gather(-1, idx);
    return at::matmul(kh, qh.unsqueeze(-1)).squeeze(-1);
}

/// Per-head component sets of §6.4. [B, Hkv, g, r_eff]
at::Tensor components(const Grouped& p, int64_t r, AgreementMethod m) {
    const int64_t rEff = std::min(r, p.D);
    const std::vector<int64_t> shape{p.B, p.Hkv, p.g, rEff};
    switch (m) {
    case AgreementMethod::TopR:
        return att::topnIndices(p.qg.abs(), rEff);
    case AgreementMethod::FirstR:
        return at::arange(rEff, at::kLong).expand(shape);
    case AgreementMethod::LastR:
        return at::arange(p.D - rEff, p.D, at::kLong).expand(shape);
    case AgreementMethod::RandomProj:
        break;
    }
    throw att::AttentionError("no component set for a random projection");
}

/// The exact top-k selection (by logits) per head, k_eff = min(k, n_valid).
att::Selection exactTopK(const Grouped& p, const at::Tensor& z, int64_t topK) {
    const at::Tensor cand = p.validKS().expand_as(z);
    return att::select(z, cand, at::zeros_like(cand), p.nValid.clamp_max(topK).view({p.B, 1, 1}));
}

/// x [B, *mid, D] → [*mid, B·D] in float64.
at::Tensor pool(const at::Tensor& Q) {
    const at::Tensor x = Q.to(at::kDouble).movedim(0, -2);
    std::vector<int64_t> shape(x.sizes().begin(), x.sizes().end() - 2);
    shape.push_back(-1);
    return x.reshape(shape);
}

} // namespace

at::Tensor coverage(const at::Tensor& q, const at::Tensor& k, const at::Tensor& valid, int64_t topK,
                    const att::AttentionConfig& mods) {
    const Grouped p = group(q, k, valid, mods);
    const at::Tensor s = probabilities(p, exactLogits(p));
    const at::Tensor sorted = std::get<0>(at::sort(s, -1, /*descending=*/true));
    const at::Tensor keep =
        at::arange(p.S, at::kLong).view({1, p.S}).lt(p.nValid.clamp_max(topK).unsqueeze(1));
    return p.heads(withSink(p, (sorted * keep.view({p.B, 1, 1, p.S})).sum(-1), s));
}

at::Tensor kurtosis(const at::Tensor& Q) {
    const at::Tensor x = pool(Q);
    const at::Tensor c = x - x.mean(-1, true);
    const at::Tensor m2 = c.pow(2).mean(-1), m4 = c.pow(4).mean(-1);
    return at::where(m2.gt(0), m4 / (m2 * m2) - 3.0, at::scalar_tensor(kNaN, at::kDouble));
}

at::Tensor zmassRatio(const at::Tensor& Q) {
    const at::Tensor x = pool(Q);
    const double n = static_cast<double>(x.size(-1));
    const at::Tensor mu = x.mean(-1, true);
    const at::Tensor sd = ((x - mu).pow(2).sum(-1, true) / (n - 1)).sqrt();
    const at::Tensor frac = ((x - mu) / sd).abs().gt(3.0).to(at::kDouble).mean(-1);
    return at::where(sd.squeeze(-1).gt(0), frac / kGaussTwoSided3,
                     at::scalar_tensor(kNaN, at::kDouble));
}

at::Tensor zmassRatioNotebook(const at::Tensor& Q) {
    const at::Tensor x = pool(Q);
    const double n = static_cast<double>(x.size(-1));
    const at::Tensor mu = x.mean(-1, true);
    const at::Tensor sd = ((x - mu).pow(2).sum(-1, true) / (n - 1)).sqrt();
    return (x - mu / sd).gt(3.0).to(at::kDouble).mean(-1) /
           kGaussTwoSided3; // the notebook's precedence
}

at::Tensor topkAgreement(const at::Tensor& q, const at::Tensor& k, const at::Tensor& valid,
                         int64_t r, int64_t topK, AgreementMethod method, const at::Tensor& proj,
                         at::Tensor* marginRel, const att::AttentionConfig& mods) {
    if (r < 1 || topK < 1)
        throw att::AttentionError("agreement needs r >= 1 and k >= 1");
    const Grouped p = group(q, k, valid, mods);
    const at::Tensor z = exactLogits(p);
    at::Tensor za;
    if (method == AgreementMethod::RandomProj) {
        if (!proj.defined() || proj.dim() != 3 || proj.size(0) != p.Hkv || proj.size(1) != p.D)
            throw att::AttentionError("random projection must be [Hkv, D, r]");
        const at::Tensor P = proj.to(at::kDouble).unsqueeze(0); // [1, Hkv, D, r]
        const at::Tensor qp = at::matmul(p.qg, P);              // [B, Hkv, g, r]
        const at::Tensor kp = at::matmul(p.k, P);               // [B, Hkv, S, r]
        za = at::matmul(qp, kp.transpose(-1, -2));
    } else {
        za = partialDots(p, components(p, r, method));
    }
    za = asLogits(p, za); // (monotone: the same ranking as the raw scores)
    const att::Selection a = exactTopK(p, z, topK), b = exactTopK(p, za, topK);
    const at::Tensor agree = a.mask.logical_and(b.mask).sum(-1).to(at::kDouble) /
                             p.nValid.clamp_max(topK).view({p.B, 1, 1}).to(at::kDouble);
    if (marginRel)
        *marginRel = p.heads(at::minimum(a.marginRel, b.marginRel));
    return p.heads(agree);
}

std::pair<at::Tensor, at::Tensor> alphaAgreement(const at::Tensor& q, const at::Tensor& k,
                                                 const at::Tensor& valid, int64_t r, int64_t topK,
                                                 att::TauMode tau,
                                                 const att::AttentionConfig& mods) {
    const Grouped p = group(q, k, valid, mods);
    const at::Tensor z = exactLogits(p);
    const at::Tensor s = probabilities(p, z);
    const at::Tensor T = exactTopK(p, z, topK).mask;
    const int64_t rEff = std::min(r, p.D);
    const at::Tensor comp = components(p, r, AgreementMethod::TopR);
    const at::Tensor raw = partialDots(p, comp);
    // Eq. 9 with per-head components (§6.5), or the fixed choices.
    const at::Tensor t = att::sparqTemperature(tau, 1.0, p.qg.gather(-1, comp).abs().sum(-1),
                                               p.qg.abs().sum(-1), p.D, rEff);
    // ẑ = raw/τ at the 1/sqrt(D) convention, then the model's scale and soft-cap, as SparQ does.
    const at::Tensor sh = probabilities(p, asLogits(p, raw / t.unsqueeze(-1)));
    return {p.heads(withSink(p, (s * T).sum(-1), s)), p.heads(withSink(p, (sh * T).sum(-1), sh))};
}

at::Tensor validTail(const at::Tensor& v, const at::Tensor& valid) {
    if (!valid.defined())
        return v;
    const at::Tensor all = valid.to(at::kBool).reshape({-1, valid.size(-1)}).all(0);
    const int64_t S = all.size(0);
    int64_t tail = 0;
    while (tail < S && all[S - 1 - tail].item<bool>())
        ++tail;
    return v.narrow(-2, S - tail, tail);
}

std::pair<double, double> correlationRatio(const at::Tensor& v0, int64_t axis) {
    const at::Tensor v = v0.to(at::kDouble);
    const double d = static_cast<double>(v.size(axis));
    const at::Tensor gm = v.mean();
    const double num = ((v.mean(axis) - gm).pow(2) * d).sum().item<double>();
    const double den = (v - gm).pow(2).sum().item<double>();
    if (den == 0.0 || v.numel() == 0)
        return {kNaN, kNaN};
    const double eta = std::sqrt(num / den);
    return {eta, eta - 1.0 / std::sqrt(d)};
}

at::Tensor randomProjection(int64_t kvHeads, int64_t headDim, int64_t r, uint64_t seed) {
    auto gen = at::detail::createCPUGenerator(seed);
    const int64_t rEff = std::min(r, headDim);
    std::vector<at::Tensor> mats;
    for (int64_t h = 0; h < kvHeads; ++h) {
        const at::Tensor g = at::empty({headDim, rEff}, at::kDouble).normal_(0, 1, gen);
        auto [Qm, Rm] = at::linalg_qr(g);
        mats.push_back(Qm * at::sign(at::diagonal(Rm)).unsqueeze(0)); // fix column signs
    }
    return at::stack(mats).to(at::kFloat);
}

} // namespace sparqlab::analysis
