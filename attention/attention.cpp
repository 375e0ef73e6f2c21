// The attention interface (attention.h), the shared steps of SPARQ.md §2 (detail.h) and the
// kernels of the paper's methods: dense, SparQ (§3), oracle, FlexGen, LM-Infinite and H2O (§4).
// The successors of METHODS.md live in their own files (quest.cpp, loki.cpp, …).

#include "attention.h"

#include "detail.h"
#include "select.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <cerrno>
#include <cmath>
#include <sstream>

namespace sparqlab::attention {

namespace detail {

void fail(const std::string& message) {
    throw AttentionError(message);
}

std::string shapeOf(const at::Tensor& t) {
    std::ostringstream os;
    os << t.sizes();
    return os.str();
}

namespace {

at::ScalarType computeType(const at::Tensor& t) {
    return t.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
}

void checkModifiers(const AttentionConfig& c) {
    if (c.scale && (!std::isfinite(*c.scale) || *c.scale <= 0))
        fail("the logit scale must be a finite positive number");
    if (!std::isfinite(c.softcap) || c.softcap < 0)
        fail("the logit soft-cap must be a finite number >= 0 (0: none)");
    if (c.slidingWindow < 0)
        fail("the sliding window must be >= 0 (0: none)");
}

} // namespace

at::Tensor Prepared::heads(const at::Tensor& x) const {
    std::vector<int64_t> full(x.sizes().begin(), x.sizes().end());
    full[2] = g;
    std::vector<int64_t> shape{B, Hq};
    shape.insert(shape.end(), full.begin() + 3, full.end());
    return x.expand(full).reshape(shape);
}

Prepared prepare(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                 const at::Tensor& valid, const AttentionConfig& c, bool validate) {
    if (!q.defined() || !k.defined())
        fail("attention needs q and K");
    if (q.dim() != 4)
        fail("q must be [B, Hq, T, D], got " + shapeOf(q));
    if (k.dim() != 4)
        fail("K must be [B, Hkv, S, D], got " + shapeOf(k));
    Prepared p;
    p.B = q.size(0);
    p.Hq = q.size(1);
    p.T = q.size(2);
    p.D = q.size(3);
    p.Hkv = k.size(1);
    p.S = k.size(2);
    if (k.size(0) != p.B || k.size(3) != p.D)
        fail("shape mismatch: q " + shapeOf(q) + " and K " + shapeOf(k));
    if (p.Hkv < 1 || p.Hq % p.Hkv != 0)
        fail("the number of query heads (" + std::to_string(p.Hq) +
             ") must be a multiple of the number of KV heads (" + std::to_string(p.Hkv) + ")");
    if (p.S < 1 || p.D < 1 || p.T < 1)
        fail("attention needs at least one position, one query and one dimension: q " + shapeOf(q) +
             ", K " + shapeOf(k));
    if (v.defined() && v.sizes() != k.sizes())
        fail("V must have the shape of K: V " + shapeOf(v) + ", K " + shapeOf(k));
    checkModifiers(c);
    p.g = p.Hq / p.Hkv;

    const at::ScalarType ct = computeType(q);
    at::Tensor vd = valid.defined() ? valid.to(at::kBool)
                                    : at::ones({p.B, p.T, p.S}, q.options().dtype(at::kBool));
    if (vd.dim() == 1)
        vd = vd.view({1, 1, vd.size(0)});
    else if (vd.dim() == 2)
        vd = vd.unsqueeze(1);
    if (vd.dim() != 3 || vd.size(2) != p.S || (vd.size(0) != p.B && vd.size(0) != 1) ||
        (vd.size(1) != p.T && vd.size(1) != 1))
        fail("valid must be [B, S] = [" + std::to_string(p.B) + ", " + std::to_string(p.S) +
             "] (or [B, T, S] for T steps), got " + shapeOf(valid));
    p.valid = vd.expand({p.B, p.T, p.S}).contiguous();
    if (c.slidingWindow > 0) // a sliding window: older keys are invalid (CONTRACTS.md §7)
        p.valid = p.valid.logical_and(causalIndex(p.valid).lt(c.slidingWindow));
    p.nValid = p.valid.sum(-1);
    p.invalid = p.valid.logical_not();
    if (p.nValid.lt(1).any().item<bool>())
        fail("every batch row needs at least one valid position");

    // Positions some step may read; the others are never read (SPARQ.md §2.1).
    const at::Tensor used = p.valid.any(1).view({p.B, 1, p.S, 1});
    const at::Tensor qc = q.to(ct);
    const at::Tensor kc = k.to(ct);
    if (validate) {
        if (!at::isfinite(qc).all().item<bool>())
            throw NonFiniteInputError("q has non-finite entries (NaN or inf)");
        if (!at::isfinite(kc).logical_or(used.logical_not()).all().item<bool>())
            throw NonFiniteInputError("K has non-finite entries (NaN or inf) at valid positions");
    }
    const at::Tensor zero = at::scalar_tensor(0, q.options().dtype(ct));
    // `where`, since NaN·0 = NaN.
    p.k = at::where(used, kc, zero);
    if (v.defined()) {
        const at::Tensor vc = v.to(ct);
        if (validate && !at::isfinite(vc).logical_or(used.logical_not()).all().item<bool>())
            throw NonFiniteInputError("V has non-finite entries (NaN or inf) at valid positions");
        p.v = at::where(used, vc, zero);
    }
    p.qg = qc.reshape({p.B, p.Hkv, p.g, p.T, p.D});
    if (c.scale) {
        p.scale = *c.scale;
        p.defaultScale = false;
    } else {
        p.scale = 1.0 / std::sqrt(static_cast<double>(p.D));
    }
    p.softcap = c.softcap;
    return p;
}

at::Tensor softcapped(const at::Tensor& z, double cap) {
    return cap > 0 ? at::tanh(z / cap) * cap : z;
}

at::Tensor scaledLogits(const Prepared& p, const at::Tensor& dots) {
    const at::Tensor z =
        p.defaultScale ? dots / std::sqrt(static_cast<double>(p.D)) : dots * p.scale;
    return softcapped(z, p.softcap);
}

at::Tensor toLogits(const Prepared& p, const at::Tensor& dots) {
    return scaledLogits(p, dots).masked_fill(p.invalidU(), -kInf);
}

namespace {
/// The soft-cap and the mask on logits this code owns, in place (the same values as
/// softcapped(z).masked_fill(…), without score-sized temporaries).
at::Tensor capAndMaskInPlace(const Prepared& p, at::Tensor z) {
    if (p.softcap > 0)
        z.div_(p.softcap).tanh_().mul_(p.softcap);
    return z.masked_fill_(p.invalidU(), -kInf);
}
} // namespace

at::Tensor exactLogits(const Prepared& p) {
    // One product per KV head: [B, Hkv, g·T, D] × [B, Hkv, D, S].
    at::Tensor z = at::matmul(p.qg.reshape({p.B, p.Hkv, p.g * p.T, p.D}), p.k.transpose(-1, -2))
                       .view({p.B, p.Hkv, p.g, p.T, p.S});
    if (p.defaultScale)
        z.div_(std::sqrt(static_cast<double>(p.D)));
    else
        z.mul_(p.scale);
    return capAndMaskInPlace(p, std::move(z));
}

at::Tensor approxLogits(const Prepared& p, const at::Tensor& raw, const at::Tensor& tau) {
    return approxLogits(p, raw / tau.unsqueeze(-1));
}

at::Tensor approxLogits(const Prepared& p, const at::Tensor& rawOverTau) {
    // A model whose logit scale is not 1/sqrt(D) rescales alike (Eq. 9's τ estimates sqrt(D)).
    at::Tensor z = p.defaultScale ? rawOverTau.clone()
                                  : rawOverTau * (p.scale * std::sqrt(static_cast<double>(p.D)));
    // A soft-capped model: ẑ estimates the logit before the cap, so it is capped alike
    // (docs/softcap-and-windows.md).
    return capAndMaskInPlace(p, std::move(z));
}

at::Tensor approxLogits(const Prepared& p, at::Tensor&& rawOverTau) {
    at::Tensor z = std::move(rawOverTau);
    if (!p.defaultScale)
        z.mul_(p.scale * std::sqrt(static_cast<double>(p.D)));
    return capAndMaskInPlace(p, std::move(z));
}

at::Tensor attendOver(const Prepared& p, const at::Tensor& z, const at::Tensor& sel) {
    at::Tensor w = at::where(sel, z, at::scalar_tensor(-kInf, z.options()));
    at::_softmax_out(w, w, -1, /*half_to_float=*/false);
    return at::matmul(w.reshape({p.B, p.Hkv, p.g * p.T, p.S}), p.v)
        .view({p.B, p.Hkv, p.g, p.T, p.D});
}

at::Tensor meanValue(const Prepared& p) {
    // Steps whose valid positions are a prefix 0..j (causal steps, the teacher-forced path):
    // a cumulative sum in float64, O(S·D) rather than a [T, S] × [S, D] product.
    if (p.T > 1 && p.S > 1) {
        const at::Tensor vu = p.valid.to(at::kByte);
        const bool prefix =
            vu.narrow(-1, 1, p.S - 1).le(vu.narrow(-1, 0, p.S - 1)).all().item<bool>();
        if (prefix) {
            const at::Tensor cs = p.v.to(at::kDouble).cumsum(2); // [B, Hkv, S, D]
            const at::Tensor last =
                (p.nValid - 1).view({p.B, 1, p.T, 1}).expand({p.B, p.Hkv, p.T, p.D});
            return (cs.gather(2, last) / p.nValid.view({p.B, 1, p.T, 1}).to(at::kDouble))
                .to(p.v.scalar_type());
        }
    }
    const at::Tensor w = p.valid.to(p.v.scalar_type()).unsqueeze(1); // [B, 1, T, S]
    return at::matmul(w, p.v) / p.nValid.view({p.B, 1, p.T, 1}).to(p.v.scalar_type());
}

at::Tensor groupRankScore(const at::Tensor& z, const at::Tensor& probs, GroupSelect gs) {
    switch (gs) {
    case GroupSelect::SumProbs:
        return probs.sum(2, /*keepdim=*/true);
    case GroupSelect::SumLogits:
        return z.sum(2, /*keepdim=*/true);
    case GroupSelect::PerHead:
        return z;
    }
    fail("unknown group selection");
}

at::Tensor recentIndex(const Prepared& p) {
    return causalIndex(p.valid);
}

at::Tensor mostRecent(const Prepared& p, const at::Tensor& n) {
    return p.valid.logical_and(recentIndex(p).lt(n.unsqueeze(-1))).view({p.B, 1, 1, p.T, p.S});
}

void checkBudget(int64_t k, int64_t l) {
    if (k < 1)
        fail("k must be at least 1, got " + std::to_string(k));
    if (l < 0)
        fail("the local window l must be at least 0, got " + std::to_string(l));
}

Selection expandUnits(const Prepared& p, Selection s) {
    s.mask = s.mask.expand({p.B, p.Hkv, p.g, p.T, p.S});
    if (s.margin.defined()) {
        s.margin = s.margin.expand({p.B, p.Hkv, p.g, p.T});
        s.marginRel = s.marginRel.expand({p.B, p.Hkv, p.g, p.T});
    }
    return s;
}

Selection selectPositions(const Prepared& p, const at::Tensor& G, int64_t k, int64_t l,
                          bool margins) {
    checkBudget(k, l);
    const at::Tensor kEff = p.nValid.clamp_max(k);
    const at::Tensor lEff = kEff.clamp_max(l);
    return expandUnits(
        p, select(G, p.validU(), mostRecent(p, lEff), kEff.view({p.B, 1, 1, p.T}), margins));
}

void fillSelection(const Prepared& p, const at::Tensor& z, const Selection& s, int64_t width,
                   const AttendOptions& o, AttentionResult& out) {
    if (!o.diagnostics)
        return;
    const at::Tensor mask = p.heads(s.mask);
    out.selected = mask;
    out.indices = maskToIndices(mask, std::min(width, p.S));
    out.count = mask.sum(-1);
    out.mass = p.heads((at::softmax(z, -1) * s.mask).sum(-1));
    out.margin = p.heads(s.margin);
    out.marginRel = p.heads(s.marginRel);
}

void keepExact(const Prepared& p, const at::Tensor& z, const AttendOptions& o,
               AttentionResult& out) {
    if (!o.keepScores)
        return;
    out.logits = p.heads(z);
    out.probs = p.heads(at::softmax(z, -1));
}

void scoreSelectAttend(const Prepared& p, const at::Tensor& zHat, const AttentionConfig& c,
                       const AttendOptions& o, AttentionResult& out) {
    const at::Tensor sHat = at::softmax(zHat, -1);
    const Selection sel = selectPositions(p, groupRankScore(zHat, sHat, c.gqa), c.k,
                                          c.effectiveLocal(), o.diagnostics);
    const at::Tensor z = exactLogits(p);
    out.y = p.heads(attendOver(p, z, sel.mask));
    out.alpha = at::ones({p.B, p.Hq, p.T}, out.y.options());
    fillSelection(p, z, sel, c.k, o, out);
    keepExact(p, z, o, out);
    if (o.keepScores) {
        out.zHat = p.heads(zHat);
        out.sHat = p.heads(sHat);
    }
}

SparqStep1 sparqStep1(const Prepared& p, const AttentionConfig& c) {
    if (c.r < 1)
        fail("r must be at least 1, got " + std::to_string(c.r));
    const int64_t rEff = std::min(c.r, p.D);
    // §3.1: the r_eff largest components of |q| (Eq. 7), per group or per head.
    at::Tensor a = p.qg.abs();
    if (c.components == ComponentSelect::Group)
        a = a.sum(2, /*keepdim=*/true);
    const at::Tensor i1 = topnIndices(a, rEff).expand({p.B, p.Hkv, p.g, p.T, rEff});
    const at::Tensor qHat = p.qg.gather(-1, i1);
    // q̂·K̂ as q with every other component zeroed, dotted with the full rows: the same sum
    // (exact zeros added), as one product for all steps.
    const at::Tensor qMasked = at::zeros_like(p.qg).scatter_(-1, i1, qHat);
    const at::Tensor raw =
        at::matmul(qMasked.reshape({p.B, p.Hkv, p.g * p.T, p.D}), p.k.transpose(-1, -2))
            .view({p.B, p.Hkv, p.g, p.T, p.S});
    // §3.2: temperature per query head and step.
    const double D = static_cast<double>(p.D);
    const std::vector<int64_t> shape{p.B, p.Hkv, p.g, p.T};
    at::Tensor tau;
    switch (c.tau) {
    case TauMode::Adaptive: { // Eq. 9, with ρ = 1 when ‖q̂‖₁ = 0
        const at::Tensor num = qHat.abs().sum(-1);
        const at::Tensor den = p.qg.abs().sum(-1);
        const at::Tensor ratio = at::where(
            num.gt(0), num / at::where(den.gt(0), den, at::ones_like(den)), at::ones_like(num));
        tau = at::sqrt(ratio * D);
        break;
    }
    case TauMode::SqrtDh:
        tau = at::full(shape, std::sqrt(D), p.options());
        break;
    case TauMode::SqrtR:
        tau = at::full(shape, std::sqrt(static_cast<double>(rEff)), p.options());
        break;
    case TauMode::One:
        tau = at::ones(shape, p.options());
        break;
    case TauMode::Fixed:
        if (!std::isfinite(c.tauValue) || c.tauValue <= 0)
            fail("the temperature must be a finite positive number");
        tau = at::full(shape, c.tauValue, p.options());
        break;
    }
    return {approxLogits(p, raw, tau), tau, i1, qHat};
}

AttentionResult sparqStep3(const Prepared& p, const AttentionConfig& c, const SparqStep1& s1,
                           const at::Tensor& sHat, const at::Tensor& mask, const at::Tensor& z,
                           const AttendOptions& o) {
    const at::Tensor yTopk = attendOver(p, z, mask);
    const at::Tensor vbar = meanValue(p).unsqueeze(2);
    const at::Tensor alpha =
        c.meanValue ? at::where(mask, sHat, at::scalar_tensor(0, sHat.options())).sum(-1)
                    : at::ones_like(s1.tau);
    const at::Tensor a = alpha.unsqueeze(-1);
    AttentionResult out;
    out.y = p.heads(a * yTopk + (1 - a) * vbar);
    out.yTopk = p.heads(yTopk);
    out.alpha = p.heads(alpha);
    out.tau = p.heads(s1.tau);
    out.compIdx = p.heads(s1.components);
    out.meanV = vbar.squeeze(2);
    if (o.keepScores) {
        out.zHat = p.heads(s1.zHat);
        out.sHat = p.heads(sHat);
    }
    return out;
}

namespace {

AttentionResult runDense(const Prepared& p, const AttendOptions& o) {
    const at::Tensor z = exactLogits(p);
    AttentionResult out;
    out.y = p.heads(attendOver(p, z, p.validU()));
    out.alpha = at::ones({p.B, p.Hq, p.T}, out.y.options());
    out.meanV = meanValue(p);
    const at::Tensor inf = at::full({p.B, p.Hkv, 1, p.T}, kInf, p.options());
    fillSelection(p, z, expandUnits(p, {p.validU(), inf, inf}), p.S, o, out);
    keepExact(p, z, o, out);
    return out;
}

AttentionResult runSparq(const Prepared& p, const AttentionConfig& c, const AttendOptions& o) {
    // Step 1: approximate scores from the r largest components of |q|.
    const SparqStep1 s1 = sparqStep1(p, c);
    const at::Tensor sHat = at::softmax(s1.zHat, -1);
    // Step 2: top-k positions by the approximate scores, exact attention over them (Eq. 8).
    const Selection sel = selectPositions(p, groupRankScore(s1.zHat, sHat, c.gqa), c.k,
                                          c.effectiveLocal(), o.diagnostics);
    const at::Tensor z = exactLogits(p);
    // Step 3: α and the mean-value reallocation (Eq. 10).
    AttentionResult out = sparqStep3(p, c, s1, sHat, sel.mask, z, o);
    fillSelection(p, z, sel, c.k, o, out);
    keepExact(p, z, o, out);
    return out;
}

AttentionResult runOracle(const Prepared& p, const AttentionConfig& c, const AttendOptions& o) {
    const at::Tensor z = exactLogits(p);
    const at::Tensor s = at::softmax(z, -1);
    const Selection sel = selectPositions(p, groupRankScore(z, s, c.gqa), c.k, c.effectiveLocal());
    AttentionResult out;
    out.y = p.heads(attendOver(p, z, sel.mask));
    out.alpha = at::ones({p.B, p.Hq, p.T}, out.y.options());
    out.meanV = meanValue(p);
    fillSelection(p, z, sel, c.k, o, out);
    keepExact(p, z, o, out);
    return out;
}

AttentionResult runFlexGen(const Prepared& p, const AttentionConfig& c, const AttendOptions& o) {
    const at::Tensor z = exactLogits(p);
    const at::Tensor s = at::softmax(z, -1);
    const Selection sel = selectPositions(p, groupRankScore(z, s, c.gqa), c.k, /*l=*/0);
    const at::Tensor w = s * sel.mask; // Eq. 5: masked after the softmax, not renormalised
    at::Tensor y =
        at::matmul(w.reshape({p.B, p.Hkv, p.g * p.T, p.S}), p.v).view({p.B, p.Hkv, p.g, p.T, p.D});
    const at::Tensor ws = w.sum(-1);
    const at::Tensor vbar = meanValue(p).unsqueeze(2);
    if (c.flexgenReallocate) // Eq. 6
        y = y + (1 - ws.unsqueeze(-1)) * vbar;
    AttentionResult out;
    out.y = p.heads(y);
    out.weightSum = p.heads(ws);
    out.alpha = at::ones_like(out.weightSum);
    out.meanV = vbar.squeeze(2);
    fillSelection(p, z, sel, c.k, o, out);
    keepExact(p, z, o, out);
    return out;
}

AttentionResult runLmInfinite(const Prepared& p, const AttentionConfig& c, const AttendOptions& o) {
    checkBudget(c.k, 0);
    if (c.sink < 0)
        fail("the number of sink tokens must be at least 0, got " + std::to_string(c.sink));
    const int64_t nSink = std::min(c.sink, c.k);
    at::Tensor keep = p.valid.logical_and(
        forwardIndex(p.valid).lt(nSink).logical_or(recentIndex(p).lt(c.k - nSink)));
    keep = keep.logical_or(p.valid.logical_and(p.nValid.le(c.k).unsqueeze(-1)));
    const at::Tensor sel = keep.view({p.B, 1, 1, p.T, p.S});
    const at::Tensor z = exactLogits(p);
    AttentionResult out;
    out.y = p.heads(attendOver(p, z, sel));
    out.alpha = at::ones({p.B, p.Hq, p.T}, out.y.options());
    out.meanV = meanValue(p);
    const at::Tensor inf = at::full({p.B, p.Hkv, 1, p.T}, kInf, p.options());
    fillSelection(p, z, expandUnits(p, {sel, inf, inf}), c.k, o, out);
    keepExact(p, z, o, out);
    return out;
}

AttentionResult runH2O(const Prepared& p, const at::Tensor& acc, const AttentionConfig& c,
                       const AttendOptions& o) {
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
    const at::Tensor z = exactLogits(p);
    AttentionResult out;
    out.y = p.heads(attendOver(p, z, sel.mask));
    out.alpha = at::ones({p.B, p.Hq, p.T}, out.y.options());
    out.meanV = meanValue(p);
    fillSelection(p, z, sel, c.k, o, out);
    keepExact(p, z, o, out);
    return out;
}

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
            at::softmax(zt.masked_fill(C.view({p.B, 1, 1, p.S}).logical_not(), -kInf), -1);
        ys.push_back(at::matmul(w, p.v).reshape({p.B, p.Hq, p.D}));
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
AttentionResult runTova(const Prepared& p, const AttentionConfig& c, const AttendOptions& o) {
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

AttentionResult run(const Prepared& p, const AttentionInputs& in, const AttentionConfig& c,
                    const AttendOptions& o) {
    switch (c.method) {
    case Method::Dense:
        return runDense(p, o);
    case Method::Sparq:
        return runSparq(p, c, o);
    case Method::Oracle:
        return runOracle(p, c, o);
    case Method::FlexGen:
        return runFlexGen(p, c, o);
    case Method::LmInfinite:
        return runLmInfinite(p, c, o);
    case Method::H2O:
        return runH2O(p, in.acc, c, o);
    case Method::Quest:
        return runQuest(p, c, o);
    case Method::Loki:
        return runLoki(p, c, o);
    case Method::DoubleSparsity:
        return runDoubleSparsity(p, c, o);
    case Method::OracleTopP:
        return runOracleTopP(p, c, o);
    case Method::SparqTopP:
        return runSparqTopP(p, c, o);
    case Method::SnapKV:
        return runSnapKV(p, in.qWin, c, o);
    case Method::Tova:
        return runTova(p, c, o);
    }
    fail("unknown attention method");
}

} // namespace
} // namespace detail

using namespace detail;

// ---------------------------------------------------------------------------------------------

int64_t Calibration::layers() const {
    if (basis.defined())
        return basis.size(0);
    return channels.defined() ? channels.size(0) : 0;
}

int64_t AttentionConfig::effectiveLocal() const {
    if (local)
        return *local;
    return method == Method::H2O ? k / 4 : 0;
}

void AttentionConfig::validateFor(int64_t headDim, int64_t layers, int64_t heads,
                                  int64_t kvHeads) const {
    if (takes(method, Param::R) && (r < 1 || r > headDim))
        fail("--r: r must be between 1 and the head dimension " + std::to_string(headDim) +
             ", got " + std::to_string(r));
    if (method != Method::Dense) {
        if (k < 1)
            fail("--k: k must be at least 1, got " + std::to_string(k));
        if (local && *local < 0)
            fail("--local: the local window l must be at least 0, got " + std::to_string(*local));
    }
    if (takes(method, Param::Tau) && tau == TauMode::Fixed &&
        (!std::isfinite(tauValue) || tauValue <= 0))
        fail("--tau: the temperature must be a finite positive number");
    if (takes(method, Param::PageSize) && pageSize < 1)
        fail("--page-size: the page size must be at least 1, got " + std::to_string(pageSize));
    if (takes(method, Param::P) && !(p > 0 && p <= 1))
        fail("--p: the mass p must lie in (0, 1], got " + std::to_string(p));
    if (method == Method::SnapKV) {
        if (snapWindow < 1)
            fail("--window: the observation window must be at least 1, got " +
                 std::to_string(snapWindow));
        if (k < snapWindow)
            fail("--k: snapkv keeps the window, so k must be at least --window (" +
                 std::to_string(snapWindow) + "), got " + std::to_string(k));
        if (kernel < 1 || kernel % 2 == 0)
            fail("--kernel: the pooling kernel must be odd and at least 1, got " +
                 std::to_string(kernel));
        if (gqa == GroupSelect::SumLogits)
            fail("--gqa: snapkv takes sum-probs or per-head");
    }
    if (scale && (!std::isfinite(*scale) || *scale <= 0))
        fail("the logit scale must be a finite positive number");
    if (sink < 0)
        fail("the number of sink tokens must be at least 0");
    if (methodInfo(method).calibrated && calibration) {
        const Calibration& cal = *calibration;
        const char* option = method == Method::Loki ? "--basis" : "--channels";
        const std::string where = std::string(option) + ": " + cal.source + ": ";
        if (cal.method != method)
            fail(where + "a " + methodName(cal.method) + " calibration, not a " +
                 methodName(method) + " one");
        const at::Tensor& t = method == Method::Loki ? cal.basis : cal.channels;
        if (!t.defined())
            fail(where + "holds no " + (method == Method::Loki ? "basis" : "channels"));
        if (layers > 0 && cal.layers() != layers)
            fail(where + "made for " + std::to_string(cal.layers()) + " layers, the model has " +
                 std::to_string(layers) + " (a calibration of another model?)");
        if (method == Method::Loki && t.size(-1) != headDim)
            fail(where + "basis of head dimension " + std::to_string(t.size(-1)) +
                 ", the model's is " + std::to_string(headDim));
        if (method == Method::Loki && kvHeads > 0 && t.size(1) != kvHeads)
            fail(where + "basis for " + std::to_string(t.size(1)) + " KV heads, the model has " +
                 std::to_string(kvHeads));
        if (method == Method::DoubleSparsity && heads > 0 && t.size(1) != heads)
            fail(where + "channels for " + std::to_string(t.size(1)) +
                 " query heads, the model has " + std::to_string(heads));
        if (method == Method::DoubleSparsity && t.size(-1) < r)
            fail(where + "ranks " + std::to_string(t.size(-1)) +
                 " channels per head, fewer than r = " + std::to_string(r));
    }
}

AttentionResult attendSteps(const AttentionInputs& in, const AttentionConfig& c,
                            const AttendOptions& o) {
    const Prepared p = prepare(in.q, in.k, in.v, in.valid, c, o.validate);
    if (!p.v.defined())
        fail("attention needs V");
    return run(p, in, c, o);
}

AttentionResult attend(const AttentionInputs& in, const AttentionConfig& c,
                       const AttendOptions& o) {
    if (!in.q.defined() || in.q.dim() != 3)
        fail("q must be [B, Hq, D], got " + (in.q.defined() ? shapeOf(in.q) : "none"));
    AttentionInputs steps = in;
    steps.q = in.q.unsqueeze(2);
    if (in.valid.defined() && in.valid.dim() == 2)
        steps.valid = in.valid.unsqueeze(1);
    if (in.acc.defined() && in.acc.dim() == 3)
        steps.acc = in.acc.unsqueeze(2);
    if (in.qWin.defined() && in.qWin.dim() == 4)
        steps.qWin = in.qWin.unsqueeze(2);
    AttentionResult r = attendSteps(steps, c, o);
    for (at::Tensor* t :
         {&r.y,         &r.indices, &r.selected,   &r.count,       &r.mass,      &r.alpha,
          &r.tau,       &r.compIdx, &r.margin,     &r.marginRel,   &r.yTopk,     &r.meanV,
          &r.weightSum, &r.estMass, &r.massMargin, &r.pageIndices, &r.pageScore, &r.votes,
          &r.pooled,    &r.logits,  &r.probs,      &r.zHat,        &r.sHat})
        if (t->defined())
            *t = t->squeeze(2);
    return r;
}

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

at::Tensor causalLogits(const at::Tensor& q, const at::Tensor& k, int64_t firstPos,
                        const AttentionConfig& c) {
    if (q.dim() != 4 || k.dim() != 4)
        fail("causal attention needs q [B, Hq, T, D] and K [B, Hkv, S, D], got q " + shapeOf(q) +
             ", K " + shapeOf(k));
    const int64_t B = q.size(0), Hq = q.size(1), T = q.size(2), D = q.size(3);
    const int64_t Hkv = k.size(1), S = k.size(2);
    if (k.size(0) != B || k.size(3) != D || Hkv < 1 || Hq % Hkv != 0)
        fail("causal attention: q " + shapeOf(q) + " does not fit K " + shapeOf(k));
    if (firstPos < 0 || firstPos + T > S)
        fail("causal attention: queries at " + std::to_string(firstPos) + ".." +
             std::to_string(firstPos + T - 1) + " but only " + std::to_string(S) + " keys");
    checkModifiers(c);
    const int64_t g = Hq / Hkv;
    const at::ScalarType ct = computeType(q);
    const double scale = c.scale ? *c.scale : 1.0 / std::sqrt(static_cast<double>(D));
    const bool grad = at::GradMode::is_enabled() && (q.requires_grad() || k.requires_grad());
    // One batched product per KV head: [B, Hkv, g·T, S].
    at::Tensor z =
        at::matmul(q.to(ct).reshape({B, Hkv, g * T, D}), k.to(ct).transpose(-1, -2)) * scale;
    if (c.softcap > 0) // CONTRACTS.md §7: c·tanh(z/c)
        z = grad ? at::tanh(z / c.softcap) * c.softcap : z.div_(c.softcap).tanh_().mul_(c.softcap);
    const auto longs = q.options().dtype(at::kLong);
    const at::Tensor keyPos = at::arange(S, longs).unsqueeze(0);
    const at::Tensor qPos = at::arange(firstPos, firstPos + T, longs).unsqueeze(1);
    at::Tensor visible = keyPos.le(qPos); // [T, S]
    if (c.slidingWindow > 0)
        visible = visible.logical_and((qPos - keyPos).lt(c.slidingWindow));
    const at::Tensor mask =
        at::zeros({T, S}, z.options()).masked_fill_(visible.logical_not(), -kInf);
    z = z.view({B, Hkv, g, T, S});
    z = grad ? z + mask : z.add_(mask);
    return z.view({B, Hq, T, S});
}

namespace {

/// SnapKV in a model (METHODS.md §7 with a KV cache): a call of several queries treats each
/// as the first decode step after its prefix (window: the w queries ending at it) and keeps
/// the last one's compressed set; a one-query call after it attends to that set and to every
/// position after it, as SnapKV compresses the prompt once.
at::Tensor snapkvCausal(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                        int64_t firstPos, const AttentionConfig& c, CausalState& st,
                        const at::Tensor& visible) {
    const int64_t B = q.size(0), Hq = q.size(1), T = q.size(2), D = q.size(3), S = k.size(2);
    const int64_t w = c.snapWindow;
    if (T == 1 && st.snapKept.defined() && st.snapKept.size(-1) <= firstPos) {
        const int64_t S0 = st.snapKept.size(-1);
        const at::Tensor later = at::arange(S, st.snapKept.options().dtype(at::kLong)).ge(S0);
        const at::Tensor kept = at::constant_pad_nd(st.snapKept, {0, S - S0}).logical_or(later);
        const at::Tensor z = causalLogits(q, k, firstPos, c); // [B, Hq, 1, S]
        const at::Tensor wts =
            at::softmax(z.masked_fill(kept.unsqueeze(2).logical_not(), -kInf), -1);
        const int64_t Hkv = k.size(1), g = Hq / Hkv;
        return at::matmul(wts.reshape({B, Hkv, g, S}), v.to(wts.scalar_type()))
            .reshape({B, Hq, 1, D});
    }
    // Window queries of each step: the w queries ending at it, earlier calls' included.
    const at::Tensor past =
        st.recentQ.defined() ? st.recentQ.to(q.scalar_type()) : q.new_zeros({B, Hq, 0, D});
    const int64_t have = past.size(2);
    const at::Tensor all = at::cat({q.new_zeros({B, Hq, w - 1, D}), past, q}, 2)
                               .narrow(2, have, w - 1 + T);               // [B, Hq, w−1+T, D]
    const at::Tensor qWin = all.unfold(2, w, 1).permute({0, 1, 2, 4, 3}); // [B, Hq, T, w, D]
    AttentionInputs in{q, k, v, visible, {}, qWin};
    AttendOptions o;
    o.validate = false;
    const AttentionResult r = attendSteps(in, c, o);
    st.snapKept = r.selected.select(2, T - 1).narrow(-1, 0, firstPos + T).contiguous();
    st.recentQ = all.narrow(2, all.size(2) - (w - 1), w - 1).contiguous();
    return r.y;
}

} // namespace

at::Tensor attendCausal(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                        int64_t firstPos, const AttentionConfig& c, CausalState* state) {
    if (q.dim() != 4 || k.dim() != 4 || v.sizes() != k.sizes())
        fail("causal attention needs q [B, Hq, T, D] and K, V [B, Hkv, S, D], got q " + shapeOf(q) +
             ", K " + shapeOf(k) + ", V " + shapeOf(v));
    const int64_t B = q.size(0), Hq = q.size(1), T = q.size(2), D = q.size(3);
    const int64_t Hkv = k.size(1), S = k.size(2);
    if (k.size(0) != B || k.size(3) != D || Hkv < 1 || Hq % Hkv != 0)
        fail("causal attention: q " + shapeOf(q) + " does not fit K " + shapeOf(k));
    if (firstPos < 0 || firstPos + T > S)
        fail("causal attention: queries at " + std::to_string(firstPos) + ".." +
             std::to_string(firstPos + T - 1) + " but only " + std::to_string(S) + " keys");
    const int64_t g = Hq / Hkv;
    const at::ScalarType ct = computeType(q);

    if (c.method == Method::Dense) {
        // Eq. 2 for every query at once, as one batched product per KV head: [B, Hkv, g·T, S].
        at::Tensor scores = causalLogits(q, k, firstPos, c).view({B, Hkv, g * T, S});
        if (at::GradMode::is_enabled() &&
            (q.requires_grad() || k.requires_grad() || v.requires_grad()))
            scores = at::softmax(scores, -1); // training: out of place, so autograd can follow
        else                                  // inference: in place, no second score-sized buffer
            at::_softmax_out(scores, scores, -1, /*half_to_float=*/false);
        if (state && (state->h2oAcc.defined() || state->trackH2O)) {
            // Dense steps before H2O (or of an H2O model) keep their attention; the cache grew.
            at::Tensor& acc = state->h2oAcc;
            if (!acc.defined())
                acc = at::zeros({B, Hkv, S}, q.options().dtype(ct));
            else if (acc.size(2) < S)
                acc = at::constant_pad_nd(acc, {0, S - acc.size(2)});
            acc = acc + scores.view({B, Hkv, g, T, S}).mean(2).sum(2);
        }
        if (state && state->keepRecent > 0) { // for a SnapKV step after them
            const at::Tensor all =
                state->recentQ.defined() ? at::cat({state->recentQ.to(q.scalar_type()), q}, 2) : q;
            const int64_t n = std::min(all.size(2), state->keepRecent);
            state->recentQ = all.narrow(2, all.size(2) - n, n).contiguous();
        }
        return at::matmul(scores, v.to(ct)).view({B, Hkv, g, T, D}).reshape({B, Hq, T, D});
    }
    const MethodInfo& info = methodInfo(c.method);
    CausalState local;
    if (info.stateful && !state)
        state = &local;
    const auto longs = q.options().dtype(at::kLong);
    const at::Tensor keyPos = at::arange(S, longs);
    const at::Tensor qPos = at::arange(firstPos, firstPos + T, longs);
    const at::Tensor visible = keyPos.view({1, 1, S}).le(qPos.view({1, T, 1})).expand({B, T, S});
    AttendOptions opt;
    opt.validate = false;
    opt.diagnostics = false;

    if (c.method == Method::Tova) {
        at::Tensor& alive = state->alive;
        alive = alive.defined() ? at::constant_pad_nd(alive, {0, S - alive.size(1)}, 1)
                                : at::ones({B, S}, visible.options());
        const Prepared p = prepare(q, k, v, visible, c, /*validate=*/false);
        return tovaSteps(p, c, alive, /*diagnostics=*/false).y;
    }
    if (c.method == Method::SnapKV)
        return snapkvCausal(q, k, v, firstPos, c, *state, visible);
    if (c.method == Method::H2O) { // grows with the cache: new positions start with none
        at::Tensor& acc = state->h2oAcc;
        if (!acc.defined())
            acc = at::zeros({B, Hkv, S}, q.options().dtype(ct));
        else if (acc.size(2) < S)
            acc = at::constant_pad_nd(acc, {0, S - acc.size(2)});
    }
    // Every query is one decode step; chunks of queries keep the [T, S] scores bounded.
    constexpr int64_t kChunkElements = int64_t{1} << 22;
    const int64_t chunk = std::max<int64_t>(1, kChunkElements / std::max<int64_t>(1, B * Hq * S));
    std::vector<at::Tensor> ys;
    for (int64_t t0 = 0; t0 < T; t0 += chunk) {
        const int64_t n = std::min(chunk, T - t0);
        AttentionInputs in;
        in.q = q.slice(2, t0, t0 + n);
        in.k = k;
        in.v = v;
        in.valid = visible.slice(1, t0, t0 + n);
        if (c.method == Method::H2O) {
            // Accumulated dense attention of every earlier query (SPARQ.md §4.4.1).
            const at::Tensor w = at::softmax(causalLogits(in.q, k, firstPos + t0, c), -1)
                                     .view({B, Hkv, g, n, S})
                                     .mean(2);
            const at::Tensor incl = w.cumsum(2);
            in.acc = state->h2oAcc.unsqueeze(2) + incl - w;
            state->h2oAcc = state->h2oAcc + incl.select(2, n - 1);
        }
        ys.push_back(attendSteps(in, c, opt).y);
    }
    return at::cat(ys, 2);
}

CausalState CausalState::clone() const {
    CausalState c = *this;
    for (at::Tensor* t : {&c.h2oAcc, &c.alive, &c.recentQ, &c.snapKept})
        if (t->defined())
            *t = t->clone();
    return c;
}

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
    out.y = at::matmul(w.squeeze(3), p.v).reshape({p.B, p.Hq, p.D});
    out.alpha = at::ones({p.B, p.Hq}, out.y.options());
    out.selected = p.heads(mask.expand({p.B, p.Hkv, p.g, 1, p.S})).squeeze(2);
    out.indices = maskToIndices(out.selected, std::min(kKeep, S));
    return out;
}

RunningMeanV::RunningMeanV(const at::Tensor& v) {
    if (v.dim() != 4)
        fail("V must be [B, Hkv, S, D], got " + shapeOf(v));
    m_sum = v.to(at::kDouble).sum(2);
    m_count = v.size(2);
}

void RunningMeanV::append(const at::Tensor& vNew) {
    if (vNew.sizes() != m_sum.sizes())
        fail("the new value must be [B, Hkv, D] = " + shapeOf(m_sum) + ", got " + shapeOf(vNew));
    m_sum.add_(vNew.to(at::kDouble));
    ++m_count;
}

at::Tensor RunningMeanV::mean() const {
    return (m_sum / static_cast<double>(std::max<int64_t>(m_count, 1))).to(at::kFloat);
}

// --- names ------------------------------------------------------------------------------------

Method parseMethod(const std::string& name) {
    if (const MethodInfo* m = findMethod(name))
        return m->id;
    fail("unknown attention method '" + name + "' (" + methodNames() + ")");
}

std::string methodName(Method m) {
    return methodInfo(m).name;
}

TauMode parseTauMode(const std::string& name, double* value) {
    if (name == "adaptive" || name == "eq9")
        return TauMode::Adaptive;
    if (name == "sqrt-dh" || name == "sqrt_dh")
        return TauMode::SqrtDh;
    if (name == "sqrt-r" || name == "sqrt_r")
        return TauMode::SqrtR;
    if (name == "one")
        return TauMode::One;
    char* end = nullptr;
    const double x = std::strtod(name.c_str(), &end);
    if (name.empty() || end != name.c_str() + name.size())
        fail("unknown temperature '" + name + "' (adaptive, sqrt-dh, sqrt-r or a number)");
    if (!std::isfinite(x) || x <= 0) // (a number, but not one a temperature can be)
        fail("the temperature must be a finite positive number, got " + name);
    if (value)
        *value = x;
    return TauMode::Fixed;
}

std::optional<int64_t> parseWholeNumber(const std::string& text) {
    errno = 0;
    char* end = nullptr;
    const long long x = std::strtoll(text.c_str(), &end, 10);
    if (text.empty() || end != text.c_str() + text.size() || errno == ERANGE)
        return std::nullopt;
    return static_cast<int64_t>(x);
}

std::optional<double> parseFiniteNumber(const std::string& text) {
    char* end = nullptr;
    const double x = std::strtod(text.c_str(), &end);
    if (text.empty() || end != text.c_str() + text.size() || !std::isfinite(x))
        return std::nullopt;
    return x;
}

std::string tauName(TauMode mode, double value) {
    switch (mode) {
    case TauMode::Adaptive:
        return "adaptive";
    case TauMode::SqrtDh:
        return "sqrt-dh";
    case TauMode::SqrtR:
        return "sqrt-r";
    case TauMode::One:
        return "one";
    case TauMode::Fixed: {
        std::ostringstream os;
        os << value;
        return os.str();
    }
    }
    return "?";
}

GroupSelect parseGroupSelect(const std::string& name) {
    if (name == "sum-probs" || name == "sum_probs")
        return GroupSelect::SumProbs;
    if (name == "sum-logits" || name == "sum_logits")
        return GroupSelect::SumLogits;
    if (name == "per-head" || name == "per_head")
        return GroupSelect::PerHead;
    fail("unknown GQA rule '" + name + "' (sum-probs, sum-logits, per-head)");
}

std::string groupSelectName(GroupSelect g) {
    switch (g) {
    case GroupSelect::SumProbs:
        return "sum-probs";
    case GroupSelect::SumLogits:
        return "sum-logits";
    case GroupSelect::PerHead:
        return "per-head";
    }
    return "?";
}

std::string paramValue(const AttentionConfig& c, Param p) {
    auto number = [](double x) {
        std::ostringstream os;
        os << x;
        return os.str();
    };
    switch (p) {
    case Param::R:
        return std::to_string(c.r);
    case Param::K:
        return c.k >= AttentionConfig::kNoCap ? "none" : std::to_string(c.k);
    case Param::Local:
        return std::to_string(c.effectiveLocal());
    case Param::Tau:
        return tauName(c.tau, c.tauValue);
    case Param::Gqa:
        return groupSelectName(c.gqa);
    case Param::MeanValue:
        return c.meanValue ? "1" : "0";
    case Param::PageSize:
        return std::to_string(c.pageSize);
    case Param::P:
        return number(c.p);
    case Param::Window:
        return std::to_string(c.snapWindow);
    case Param::Kernel:
        return std::to_string(c.kernel);
    case Param::Pooling:
        return poolingName(c.pooling);
    case Param::Basis:
    case Param::Channels:
        return c.calibration ? c.calibration->source : "";
    }
    return "";
}

void setParamValue(AttentionConfig& c, Param p, const std::string& v) {
    const ParamInfo& info = paramInfo(p);
    auto integer = [&]() {
        const std::optional<int64_t> x = parseWholeNumber(v);
        if (!x)
            fail("needs a whole number, got '" + v + "'");
        if (*x < static_cast<int64_t>(info.min))
            fail("must be at least " + std::to_string(static_cast<int64_t>(info.min)) + ", got " +
                 std::to_string(*x));
        return *x;
    };
    switch (p) {
    case Param::R:
        c.r = integer();
        break;
    case Param::K:
        c.k = integer();
        break;
    case Param::Local:
        c.local = integer();
        break;
    case Param::Tau:
        c.tau = parseTauMode(v, &c.tauValue);
        break;
    case Param::Gqa:
        c.gqa = parseGroupSelect(v);
        break;
    case Param::MeanValue:
        c.meanValue = false;
        break;
    case Param::PageSize:
        c.pageSize = integer();
        break;
    case Param::P: {
        const std::optional<double> x = parseFiniteNumber(v);
        if (!x || !(*x > 0 && *x <= 1))
            fail("must lie in (0, 1], got " + v);
        c.p = *x;
        break;
    }
    case Param::Window:
        c.snapWindow = integer();
        break;
    case Param::Kernel:
        c.kernel = integer();
        break;
    case Param::Pooling:
        c.pooling = parsePooling(v);
        break;
    case Param::Basis:
    case Param::Channels:
        fail(std::string(info.option) + " names a calibration file, read by the caller");
    }
}

Pooling parsePooling(const std::string& name) {
    if (name == "max")
        return Pooling::Max;
    if (name == "avg")
        return Pooling::Avg;
    fail("unknown pooling '" + name + "' (max, avg)");
}

std::string poolingName(Pooling p) {
    return p == Pooling::Max ? "max" : "avg";
}

ChannelMode parseChannelMode(const std::string& name) {
    if (name == "qk")
        return ChannelMode::QK;
    if (name == "q")
        return ChannelMode::Q;
    if (name == "k")
        return ChannelMode::K;
    fail("unknown channel calibration mode '" + name + "' (qk, q, k)");
}

} // namespace sparqlab::attention
