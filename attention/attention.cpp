#include "attention.h"

#include "select.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <cmath>
#include <limits>
#include <sstream>

namespace sparqlab::attention {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

[[noreturn]] void fail(const std::string& message) {
    throw AttentionError(message);
}

std::string shapeOf(const at::Tensor& t) {
    std::ostringstream os;
    os << t.sizes();
    return os.str();
}

/// Inputs checked, converted to the compute dtype and grouped by KV head (SPARQ.md §1–2.1).
struct Prepared {
    int64_t B = 0, Hq = 0, Hkv = 0, g = 0, S = 0, D = 0;
    at::Tensor qg;     // [B, Hkv, g, D]
    at::Tensor k;      // [B, Hkv, S, D], zero at invalid positions
    at::Tensor v;      // [B, Hkv, S, D], zero at invalid positions (undefined if not given)
    at::Tensor valid;  // [B, S] bool
    at::Tensor nValid; // [B] int64
    double scale = 0;  // logit scale
    bool defaultScale = true;

    at::Tensor validKS() const { return valid.view({B, 1, 1, S}); } // broadcast to [B,Hkv,g,S]
    at::Tensor heads(const at::Tensor& x) const {                   // [B,Hkv,g,...] → [B,Hq,...]
        std::vector<int64_t> shape{B, Hq};
        for (int64_t d = 3; d < x.dim(); ++d)
            shape.push_back(x.size(d));
        return x.reshape(shape);
    }
};

at::ScalarType computeType(const at::Tensor& t) {
    return t.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
}

Prepared prepare(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                 const at::Tensor& valid, std::optional<double> scale, bool validate) {
    if (!q.defined() || !k.defined())
        fail("attention needs q and K");
    if (q.dim() != 3)
        fail("q must be [B, Hq, D], got " + shapeOf(q));
    if (k.dim() != 4)
        fail("K must be [B, Hkv, S, D], got " + shapeOf(k));
    Prepared p;
    p.B = q.size(0);
    p.Hq = q.size(1);
    p.D = q.size(2);
    p.Hkv = k.size(1);
    p.S = k.size(2);
    if (k.size(0) != p.B || k.size(3) != p.D)
        fail("shape mismatch: q " + shapeOf(q) + " and K " + shapeOf(k));
    if (p.Hkv < 1 || p.Hq % p.Hkv != 0)
        fail("the number of query heads (" + std::to_string(p.Hq) +
             ") must be a multiple of the number of KV heads (" + std::to_string(p.Hkv) + ")");
    if (p.S < 1 || p.D < 1)
        fail("K must have at least one position and one dimension, got " + shapeOf(k));
    if (v.defined() && v.sizes() != k.sizes())
        fail("V must have the shape of K: V " + shapeOf(v) + ", K " + shapeOf(k));
    p.g = p.Hq / p.Hkv;

    const at::ScalarType ct = computeType(q);
    const auto opts = q.options().dtype(ct);
    p.valid = valid.defined() ? valid.to(at::kBool) : at::ones({p.B, p.S}, opts.dtype(at::kBool));
    if (p.valid.dim() == 1)
        p.valid = p.valid.unsqueeze(0);
    if (p.valid.dim() != 2 || p.valid.size(1) != p.S ||
        (p.valid.size(0) != p.B && p.valid.size(0) != 1))
        fail("valid must be [B, S] = [" + std::to_string(p.B) + ", " + std::to_string(p.S) +
             "], got " + shapeOf(p.valid));
    p.valid = p.valid.expand({p.B, p.S}).contiguous();
    p.nValid = p.valid.sum(-1);
    if (p.nValid.lt(1).any().item<bool>())
        fail("every batch row needs at least one valid position");

    const at::Tensor qc = q.to(ct);
    const at::Tensor kc = k.to(ct);
    const at::Tensor vm = p.valid.view({p.B, 1, p.S, 1});
    if (validate) {
        if (!at::isfinite(qc).all().item<bool>())
            throw NonFiniteInputError("q has non-finite entries (NaN or inf)");
        if (!at::isfinite(kc).logical_or(vm.logical_not()).all().item<bool>())
            throw NonFiniteInputError("K has non-finite entries (NaN or inf) at valid positions");
    }
    const at::Tensor zero = at::scalar_tensor(0, opts);
    // SPARQ.md §2.1: invalid positions are never read; `where`, since NaN·0 = NaN.
    p.k = at::where(vm, kc, zero);
    if (v.defined()) {
        const at::Tensor vc = v.to(ct);
        if (validate && !at::isfinite(vc).logical_or(vm.logical_not()).all().item<bool>())
            throw NonFiniteInputError("V has non-finite entries (NaN or inf) at valid positions");
        p.v = at::where(vm, vc, zero);
    }
    p.qg = qc.reshape({p.B, p.Hkv, p.g, p.D});
    if (scale) {
        if (!std::isfinite(*scale) || *scale <= 0)
            fail("the logit scale must be a finite positive number");
        p.scale = *scale;
        p.defaultScale = false;
    } else {
        p.scale = 1.0 / std::sqrt(static_cast<double>(p.D));
    }
    return p;
}

/// z = q·K_j / sqrt(D) (or · scale), −inf at invalid j. [B, Hkv, g, S]
at::Tensor exactLogits(const Prepared& p) {
    at::Tensor dots = at::matmul(p.qg, p.k.transpose(-1, -2));
    dots = p.defaultScale ? dots / std::sqrt(static_cast<double>(p.D)) : dots * p.scale;
    return dots.masked_fill(p.validKS().logical_not(), -kInf);
}

/// Softmax restricted to `sel` (renormalised over it), then the weighted sum of V (§2.4).
at::Tensor attendOver(const Prepared& p, const at::Tensor& z, const at::Tensor& sel) {
    const at::Tensor w = at::softmax(z.masked_fill(sel.logical_not(), -kInf), -1);
    return at::matmul(w, p.v);
}

/// §2.5: mean of V over valid positions. [B, Hkv, D]
at::Tensor meanValue(const Prepared& p) {
    return p.v.sum(-2) / p.nValid.view({p.B, 1, 1}).to(p.v.scalar_type());
}

/// §2.6: ranking score per selection unit, [B, Hkv, 1 or g, S].
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

/// §2.7: k_eff = min(k, n_valid), the l_eff = min(l, k_eff) most recent valid positions
/// forced, the rest ranked by G. Selection expanded to [B, Hkv, g, S].
Selection selectPositions(const Prepared& p, const at::Tensor& G, int64_t k, int64_t l) {
    if (k < 1)
        fail("k must be at least 1, got " + std::to_string(k));
    if (l < 0)
        fail("the local window l must be at least 0, got " + std::to_string(l));
    const at::Tensor kEff = p.nValid.clamp_max(k);
    const at::Tensor lEff = kEff.clamp_max(l);
    const at::Tensor forced =
        p.valid.logical_and(causalIndex(p.valid).lt(lEff.unsqueeze(-1))).view({p.B, 1, 1, p.S});
    Selection s = select(G, p.validKS(), forced, kEff.view({p.B, 1, 1}));
    const std::vector<int64_t> full{p.B, p.Hkv, p.g, p.S};
    s.mask = s.mask.expand(full);
    s.margin = s.margin.expand({p.B, p.Hkv, p.g});
    s.marginRel = s.marginRel.expand({p.B, p.Hkv, p.g});
    return s;
}

/// Fills the outputs every position-selecting method shares.
void fillSelection(const Prepared& p, const Selection& s, int64_t width, AttentionResult& out) {
    const at::Tensor mask = p.heads(s.mask);
    out.selected = mask;
    out.indices = maskToIndices(mask, width);
    out.margin = p.heads(s.margin);
    out.marginRel = p.heads(s.marginRel);
}

void keepExact(const Prepared& p, const at::Tensor& z, const at::Tensor& s, const AttendOptions& o,
               AttentionResult& out) {
    if (!o.keepScores)
        return;
    out.logits = p.heads(z);
    out.probs = p.heads(s);
}

// ---------------------------------------------------------------------------------------------

AttentionResult runDense(const Prepared& p, const AttendOptions& o) {
    const at::Tensor z = exactLogits(p);
    const at::Tensor s = at::softmax(z, -1);
    AttentionResult out;
    out.y = p.heads(at::matmul(s, p.v));
    out.selected = p.heads(p.validKS().expand({p.B, p.Hkv, p.g, p.S}));
    out.indices = maskToIndices(out.selected, p.S);
    out.alpha = at::ones({p.B, p.Hq}, out.y.options());
    out.meanV = meanValue(p);
    keepExact(p, z, s, o, out);
    return out;
}

/// §3.1: ascending component indices [B, Hkv, 1 or g, r_eff].
at::Tensor sparqComponents(const Prepared& p, int64_t rEff, ComponentSelect cs) {
    at::Tensor a = p.qg.abs();
    if (cs == ComponentSelect::Group)
        a = a.sum(2, /*keepdim=*/true);
    return topnIndices(a, rEff);
}

AttentionResult runSparq(const Prepared& p, const AttentionConfig& c, const AttendOptions& o) {
    if (c.r < 1)
        fail("r must be at least 1, got " + std::to_string(c.r));
    const int64_t rEff = std::min(c.r, p.D);
    // Step 1: the r_eff largest components of |q| (Eq. 7), approximate scores.
    const at::Tensor i1 = sparqComponents(p, rEff, c.components).expand({p.B, p.Hkv, p.g, rEff});
    const at::Tensor qHat = p.qg.gather(-1, i1); // [B,Hkv,g,r]
    at::Tensor raw;
    if (c.components == ComponentSelect::Group) {
        // One component set per KV group: gather K's columns once per KV head.
        const at::Tensor idx = i1.select(2, 0).unsqueeze(2).expand({p.B, p.Hkv, p.S, rEff});
        const at::Tensor kHat = p.k.gather(-1, idx); // [B,Hkv,S,r]
        raw = at::matmul(qHat, kHat.transpose(-1, -2));
    } else {
        const at::Tensor idx = i1.unsqueeze(3).expand({p.B, p.Hkv, p.g, p.S, rEff});
        const at::Tensor kHat =
            p.k.unsqueeze(2).expand({p.B, p.Hkv, p.g, p.S, p.D}).gather(-1, idx);
        raw = at::matmul(kHat, qHat.unsqueeze(-1)).squeeze(-1);
    }
    // §3.2: temperature per query head.
    const auto opts = p.qg.options();
    at::Tensor tau;
    const double D = static_cast<double>(p.D);
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
        tau = at::full({p.B, p.Hkv, p.g}, std::sqrt(D), opts);
        break;
    case TauMode::SqrtR:
        tau = at::full({p.B, p.Hkv, p.g}, std::sqrt(static_cast<double>(rEff)), opts);
        break;
    case TauMode::One:
        tau = at::ones({p.B, p.Hkv, p.g}, opts);
        break;
    case TauMode::Fixed:
        if (!std::isfinite(c.tauValue) || c.tauValue <= 0)
            fail("the temperature must be a finite positive number");
        tau = at::full({p.B, p.Hkv, p.g}, c.tauValue, opts);
        break;
    }
    // §3.3: ẑ = q̂·K̂ / τ; a model whose logit scale is not 1/sqrt(D) rescales alike.
    at::Tensor zHat = raw / tau.unsqueeze(-1);
    if (!p.defaultScale)
        zHat = zHat * (p.scale * std::sqrt(D));
    zHat = zHat.masked_fill(p.validKS().logical_not(), -kInf);
    const at::Tensor sHat = at::softmax(zHat, -1);

    // Step 2: top-k positions by the approximate scores, exact attention over them (Eq. 8).
    const Selection sel =
        selectPositions(p, groupRankScore(zHat, sHat, c.gqa), c.k, c.effectiveLocal());
    const at::Tensor z = exactLogits(p);
    const at::Tensor yTopk = attendOver(p, z, sel.mask);

    // Step 3: α and the mean-value reallocation (Eq. 10).
    const at::Tensor vbar = meanValue(p);
    const at::Tensor alpha = c.meanValue ? (sHat * sel.mask).sum(-1) : at::ones_like(tau);
    const at::Tensor a = alpha.unsqueeze(-1);
    const at::Tensor y = a * yTopk + (1 - a) * vbar.unsqueeze(2);

    AttentionResult out;
    out.y = p.heads(y);
    out.yTopk = p.heads(yTopk);
    out.alpha = p.heads(alpha);
    out.tau = p.heads(tau);
    out.compIdx = p.heads(i1);
    out.meanV = vbar;
    fillSelection(p, sel, std::min(c.k, p.S), out);
    if (o.keepScores) {
        out.zHat = p.heads(zHat);
        out.sHat = p.heads(sHat);
        out.logits = p.heads(z);
        out.probs = p.heads(at::softmax(z, -1));
    }
    return out;
}

AttentionResult runOracle(const Prepared& p, const AttentionConfig& c, const AttendOptions& o) {
    const at::Tensor z = exactLogits(p);
    const at::Tensor s = at::softmax(z, -1);
    const Selection sel = selectPositions(p, groupRankScore(z, s, c.gqa), c.k, c.effectiveLocal());
    AttentionResult out;
    out.y = p.heads(attendOver(p, z, sel.mask));
    out.mass = p.heads((s * sel.mask).sum(-1));
    out.alpha = at::ones_like(out.mass);
    out.meanV = meanValue(p);
    fillSelection(p, sel, std::min(c.k, p.S), out);
    keepExact(p, z, s, o, out);
    return out;
}

AttentionResult runFlexGen(const Prepared& p, const AttentionConfig& c, const AttendOptions& o) {
    const at::Tensor z = exactLogits(p);
    const at::Tensor s = at::softmax(z, -1);
    const Selection sel = selectPositions(p, groupRankScore(z, s, c.gqa), c.k, /*l=*/0);
    const at::Tensor w = s * sel.mask; // Eq. 5: masked after the softmax, not renormalised
    at::Tensor y = at::matmul(w, p.v);
    const at::Tensor ws = w.sum(-1);
    const at::Tensor vbar = meanValue(p);
    if (c.flexgenReallocate) // Eq. 6
        y = y + (1 - ws.unsqueeze(-1)) * vbar.unsqueeze(2);
    AttentionResult out;
    out.y = p.heads(y);
    out.weightSum = p.heads(ws);
    out.alpha = at::ones_like(out.weightSum);
    out.meanV = vbar;
    fillSelection(p, sel, std::min(c.k, p.S), out);
    keepExact(p, z, s, o, out);
    return out;
}

AttentionResult runLmInfinite(const Prepared& p, const AttentionConfig& c, const AttendOptions& o) {
    if (c.k < 1)
        fail("k must be at least 1, got " + std::to_string(c.k));
    if (c.sink < 0)
        fail("the number of sink tokens must be at least 0, got " + std::to_string(c.sink));
    const int64_t nSink = std::min(c.sink, c.k);
    at::Tensor keep = p.valid.logical_and(
        forwardIndex(p.valid).lt(nSink).logical_or(causalIndex(p.valid).lt(c.k - nSink)));
    keep = keep.logical_or(p.valid.logical_and(p.nValid.le(c.k).unsqueeze(-1)));
    const at::Tensor sel = keep.view({p.B, 1, 1, p.S}).expand({p.B, p.Hkv, p.g, p.S});
    const at::Tensor z = exactLogits(p);
    AttentionResult out;
    out.y = p.heads(attendOver(p, z, sel));
    out.alpha = at::ones({p.B, p.Hq}, out.y.options());
    out.meanV = meanValue(p);
    out.selected = p.heads(sel);
    out.indices = maskToIndices(out.selected, std::min(c.k, p.S));
    keepExact(p, z, at::softmax(z, -1), o, out);
    return out;
}

AttentionResult runH2O(const Prepared& p, const at::Tensor& acc, const AttentionConfig& c,
                       const AttendOptions& o) {
    if (!acc.defined())
        fail("H2O needs the accumulated attention scores (acc) of earlier steps");
    if (acc.dim() != 3 || acc.size(0) != p.B || acc.size(1) != p.Hkv || acc.size(2) != p.S)
        fail("acc must be [B, Hkv, S], got " + shapeOf(acc));
    const at::Tensor a = acc.to(p.qg.scalar_type()).unsqueeze(2);
    const at::Tensor vm = p.validKS();
    if (o.validate && !at::isfinite(a).logical_or(vm.logical_not()).all().item<bool>())
        throw NonFiniteInputError("acc has non-finite entries at valid positions");
    const at::Tensor G = at::where(vm, a, at::scalar_tensor(0, a.options()));
    const Selection sel = selectPositions(p, G, c.k, c.effectiveLocal());
    const at::Tensor z = exactLogits(p);
    AttentionResult out;
    out.y = p.heads(attendOver(p, z, sel.mask));
    out.alpha = at::ones({p.B, p.Hq}, out.y.options());
    out.meanV = meanValue(p);
    fillSelection(p, sel, std::min(c.k, p.S), out);
    keepExact(p, z, at::softmax(z, -1), o, out);
    return out;
}

} // namespace

// ---------------------------------------------------------------------------------------------

int64_t AttentionConfig::effectiveLocal() const {
    if (local)
        return *local;
    return method == Method::H2O ? k / 4 : 0;
}

void AttentionConfig::validateFor(int64_t headDim) const {
    if (method == Method::Sparq && (r < 1 || r > headDim))
        fail("r must be between 1 and the head dimension " + std::to_string(headDim) + ", got " +
             std::to_string(r));
    if (method != Method::Dense) {
        if (k < 1)
            fail("k must be at least 1, got " + std::to_string(k));
        if (local && (*local < 0 || *local > k))
            fail("the local window l must be between 0 and k = " + std::to_string(k) + ", got " +
                 std::to_string(*local));
    }
    if (method == Method::Sparq && tau == TauMode::Fixed &&
        (!std::isfinite(tauValue) || tauValue <= 0))
        fail("the temperature must be a finite positive number");
    if (scale && (!std::isfinite(*scale) || *scale <= 0))
        fail("the logit scale must be a finite positive number");
    if (sink < 0)
        fail("the number of sink tokens must be at least 0");
}

AttentionResult attend(const AttentionInputs& in, const AttentionConfig& c,
                       const AttendOptions& o) {
    const Prepared p = prepare(in.q, in.k, in.v, in.valid, c.scale, o.validate);
    if (!p.v.defined())
        fail("attention needs V");
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
    }
    fail("unknown attention method");
}

at::Tensor attendCausal(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                        int64_t firstPos, const AttentionConfig& c, at::Tensor* h2oAcc) {
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
    const double scale = c.scale ? *c.scale : 1.0 / std::sqrt(static_cast<double>(D));
    const at::Tensor keyPos = at::arange(S, q.options().dtype(at::kLong));
    const at::Tensor qPos = at::arange(firstPos, firstPos + T, q.options().dtype(at::kLong));
    const at::Tensor visible = keyPos.unsqueeze(0).le(qPos.unsqueeze(1)); // [T, S]
    if (h2oAcc) { // grows with the cache: new positions start with no accumulated attention
        if (!h2oAcc->defined())
            *h2oAcc = at::zeros({B, Hkv, S}, q.options().dtype(ct));
        else if (h2oAcc->size(2) < S)
            *h2oAcc = at::constant_pad_nd(*h2oAcc, {0, S - h2oAcc->size(2)});
    }

    if (c.method == Method::Dense) {
        // Eq. 2 for every query at once, as one batched product per KV head: [B, Hkv, g·T, S].
        const at::Tensor qg = q.to(ct).reshape({B, Hkv, g * T, D});
        at::Tensor scores = at::matmul(qg, k.to(ct).transpose(-1, -2)) * scale;
        const at::Tensor mask =
            at::zeros({T, S}, scores.options()).masked_fill_(visible.logical_not(), -kInf);
        if (at::GradMode::is_enabled() &&
            (q.requires_grad() || k.requires_grad() || v.requires_grad())) {
            // training: out of place, so autograd can follow
            scores =
                at::softmax((scores.view({B, Hkv, g, T, S}) + mask).view({B, Hkv, g * T, S}), -1);
        } else { // inference: in place, no second score-sized buffer
            scores.view({B, Hkv, g, T, S}).add_(mask);
            at::_softmax_out(scores, scores, -1, /*half_to_float=*/false);
        }
        if (h2oAcc)
            *h2oAcc =
                *h2oAcc + scores.view({B, Hkv, g, T, S}).mean(2).sum(2).to(h2oAcc->scalar_type());
        return at::matmul(scores, v.to(ct)).view({B, Hkv, g, T, D}).reshape({B, Hq, T, D});
    }
    if (c.method == Method::H2O && !h2oAcc)
        fail("H2O needs the accumulated attention of earlier queries");
    // Every query is one decode step; chunks of queries keep the expanded K, V bounded.
    constexpr int64_t kChunkElements = int64_t{1} << 24;
    const int64_t chunk =
        std::max<int64_t>(1, kChunkElements / std::max<int64_t>(1, B * Hkv * S * D));
    std::vector<at::Tensor> ys;
    AttentionConfig dense = c;
    dense.method = Method::Dense;
    for (int64_t t0 = 0; t0 < T; t0 += chunk) {
        const int64_t n = std::min(chunk, T - t0);
        AttentionInputs in;
        in.q = q.slice(2, t0, t0 + n).permute({2, 0, 1, 3}).reshape({n * B, Hq, D});
        in.k = k.unsqueeze(0).expand({n, B, Hkv, S, D}).reshape({n * B, Hkv, S, D});
        in.v = v.unsqueeze(0).expand({n, B, Hkv, S, D}).reshape({n * B, Hkv, S, D});
        in.valid = visible.slice(0, t0, t0 + n).unsqueeze(1).expand({n, B, S}).reshape({n * B, S});
        if (c.method == Method::H2O) {
            AttendOptions keep;
            keep.keepScores = true;
            const at::Tensor w = attend(in, dense, keep).probs.view({n, B, Hkv, g, S}).mean(3);
            const at::Tensor incl = w.cumsum(0);
            in.acc = (h2oAcc->to(w.scalar_type()).unsqueeze(0) + incl - w).reshape({n * B, Hkv, S});
            *h2oAcc = *h2oAcc + incl[n - 1].to(h2oAcc->scalar_type());
        }
        ys.push_back(attend(in, c).y.view({n, B, Hq, D}));
    }
    return at::cat(ys, 0).permute({1, 2, 0, 3}).contiguous();
}

at::Tensor h2oAccumulate(const at::Tensor& qHist, const at::Tensor& k, const at::Tensor& valid,
                         const std::vector<int64_t>& histPos, std::optional<double> scale) {
    if (qHist.dim() != 4)
        fail("history queries must be [B, Hq, T, D], got " + shapeOf(qHist));
    const int64_t T = qHist.size(2);
    if (static_cast<int64_t>(histPos.size()) != T)
        fail("one history position per history query is needed");
    const int64_t S = k.size(2);
    at::Tensor acc;
    for (int64_t t = 0; t < T; ++t) {
        const int64_t pos = histPos[t];
        if (pos < 0 || pos >= S)
            fail("history position " + std::to_string(pos) + " is outside 0.." +
                 std::to_string(S - 1));
        at::Tensor vis = at::arange(S, k.options().dtype(at::kLong)).le(pos);
        vis = valid.defined() ? valid.to(at::kBool).logical_and(vis) : vis.unsqueeze(0);
        const Prepared p = prepare(qHist.select(2, t), k, {}, vis, scale, /*validate=*/true);
        if (!p.valid.select(1, pos).all().item<bool>())
            fail("history query positions must be valid positions");
        const at::Tensor w = at::softmax(exactLogits(p), -1).mean(2); // GQA: mean over the group
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
    const Prepared p = prepare(q, k, v, vis, scale, /*validate=*/true);
    if (m_acc.size(0) != p.B || m_acc.size(1) != p.Hkv)
        fail("acc0 does not match K: " + shapeOf(m_acc) + " vs " + shapeOf(k));
    const at::Tensor kEff = p.nValid.clamp_max(kKeep);
    const at::Tensor lEff = kEff.clamp_max(local);
    const at::Tensor visU = vis.unsqueeze(1); // [B,1,S]
    const at::Tensor cand = m_alive.logical_and(visU);
    const at::Tensor forced =
        cand.logical_and(causalIndex(vis).lt(lEff.unsqueeze(-1)).unsqueeze(1));
    Selection sel = select(m_acc.to(p.qg.scalar_type()), cand, forced, kEff.unsqueeze(-1));
    // Permanent eviction of the visible positions that were not kept.
    m_alive = m_alive.logical_and(sel.mask.logical_or(visU.logical_not()));
    const at::Tensor mask = sel.mask.unsqueeze(2).expand({p.B, p.Hkv, p.g, p.S});
    const at::Tensor z = exactLogits(p);
    const at::Tensor w = at::softmax(z.masked_fill(mask.logical_not(), -kInf), -1);
    m_acc = m_acc + w.mean(2).to(m_acc.scalar_type());
    AttentionResult out;
    out.y = p.heads(at::matmul(w, p.v));
    out.alpha = at::ones({p.B, p.Hq}, out.y.options());
    out.selected = p.heads(mask);
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
    if (name == "dense")
        return Method::Dense;
    if (name == "sparq")
        return Method::Sparq;
    if (name == "oracle")
        return Method::Oracle;
    if (name == "flexgen")
        return Method::FlexGen;
    if (name == "lminf" || name == "lm-infinite" || name == "lm_infinite")
        return Method::LmInfinite;
    if (name == "h2o")
        return Method::H2O;
    fail("unknown attention method '" + name + "' (dense, sparq, h2o, lminf, flexgen, oracle)");
}

std::string methodName(Method m) {
    switch (m) {
    case Method::Dense:
        return "dense";
    case Method::Sparq:
        return "sparq";
    case Method::Oracle:
        return "oracle";
    case Method::FlexGen:
        return "flexgen";
    case Method::LmInfinite:
        return "lminf";
    case Method::H2O:
        return "h2o";
    }
    return "?";
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
    if (!std::isfinite(x) || x <= 0)
        fail("the temperature must be a finite positive number, got " + name);
    if (value)
        *value = x;
    return TauMode::Fixed;
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

} // namespace sparqlab::attention
