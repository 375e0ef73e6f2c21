// The shared steps of SPARQ.md §2 (method_kit.h), written once for every method unit: the prepared
// inputs, logits (scale, soft-cap, window), the selection rules, exact attention over a set,
// the mean value, Eq. 9's temperature and the parameter checks.

#include "method_kit.h"

#include "select.h"

#include <ATen/ATen.h>

#include <algorithm>
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
    if (c.chunk < 0)
        fail("the attention chunk must be >= 0 (0: none)");
    // Sinks on a device are a model's, checked finite as its weights loaded: checking them again
    // would wait for the device at every layer of every step.
    if (c.sinks.defined() &&
        (c.sinks.dim() != 1 ||
         (c.sinks.is_cpu() && !at::isfinite(c.sinks.to(at::kDouble)).all().item<bool>())))
        fail("the attention sinks must be one finite logit per query head, got " +
             shapeOf(c.sinks));
}

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
    if (v.defined() && (v.dim() != 4 || v.size(0) != p.B || v.size(1) != p.Hkv ||
                        v.size(2) != p.S || v.size(3) < 1))
        fail("V must be [B, Hkv, S, Dv] beside K " + shapeOf(k) + ", got V " + shapeOf(v));
    checkModifiers(c);
    p.g = p.Hq / p.Hkv;
    p.Dv = v.defined() ? v.size(3) : 0;
    if (c.sinks.defined() && c.sinks.numel() != p.Hq)
        fail("the attention sinks hold " + std::to_string(c.sinks.numel()) +
             " logits, one per query head is " + std::to_string(p.Hq));

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
    if (c.chunk > 0) { // chunked attention: only keys of the query's chunk are visible
        const at::Tensor pos = at::arange(p.S, p.valid.options().dtype(at::kLong));
        const at::Tensor last =
            at::where(p.valid, pos.view({1, 1, p.S}), at::full({}, -1, pos.options()))
                .amax(-1, /*keepdim=*/true); // [B, T, 1]
        p.valid = p.valid.logical_and(at::floor_divide(pos.view({1, 1, p.S}), c.chunk)
                                          .eq(at::floor_divide(last.clamp_min(0), c.chunk)));
    }
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
    if (c.sinks.defined())
        p.sinks = c.sinks.to(ct).view({1, p.Hkv, p.g, 1, 1});
    return p;
}

at::Tensor probabilities(const Prepared& p, const at::Tensor& z) {
    return softmaxWithSink(z, p.sinks);
}

at::Tensor sinkShare(const Prepared& p, const at::Tensor& probs) {
    return p.sinks.defined() ? (1 - probs.sum(-1)).clamp_min(0) : at::Tensor();
}

at::Tensor withSink(const Prepared& p, const at::Tensor& x, const at::Tensor& probs) {
    return p.sinks.defined() ? x + sinkShare(p, probs) : x;
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
    softmaxWithSinkInPlace(w, p.sinks); // the sink is always selected
    return at::matmul(w.reshape({p.B, p.Hkv, p.g * p.T, p.S}), p.v)
        .view({p.B, p.Hkv, p.g, p.T, p.Dv});
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
                (p.nValid - 1).view({p.B, 1, p.T, 1}).expand({p.B, p.Hkv, p.T, p.Dv});
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
    case GroupSelect::MaxProbs:
        return probs.amax(2, /*keepdim=*/true);
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
    const at::Tensor probs = probabilities(p, z);
    out.mass = p.heads(withSink(p, (probs * s.mask).sum(-1), probs));
    out.margin = p.heads(s.margin);
    out.marginRel = p.heads(s.marginRel);
}

void keepExact(const Prepared& p, const at::Tensor& z, const AttendOptions& o,
               AttentionResult& out) {
    if (!o.keepScores)
        return;
    out.logits = p.heads(z);
    out.probs = p.heads(probabilities(p, z));
}

AttentionResult attendSelection(const Prepared& p, const at::Tensor& z, const Selection& s,
                                int64_t width, const AttendOptions& o) {
    AttentionResult out;
    out.y = p.heads(attendOver(p, z, s.mask));
    out.alpha = at::ones({p.B, p.Hq, p.T}, out.y.options());
    out.meanV = meanValue(p);
    fillSelection(p, z, s, width, o, out);
    keepExact(p, z, o, out);
    return out;
}

void scoreSelectAttend(const Prepared& p, const at::Tensor& zHat, const AttentionConfig& c,
                       const AttendOptions& o, AttentionResult& out) {
    const at::Tensor sHat = probabilities(p, zHat);
    const Selection sel = selectPositions(p, groupRankScore(zHat, sHat, c.gqa), c.k,
                                          c.effectiveLocal(), o.diagnostics);
    out = attendSelection(p, exactLogits(p), sel, c.k, o);
    if (o.keepScores) {
        out.zHat = p.heads(zHat);
        out.sHat = p.heads(sHat);
    }
}

void checkGroupRule(const AttentionConfig& c) {
    const Method m = c.method;
    if (!takes(m, Param::Gqa))
        return;
    const std::vector<GroupSelect> rules = gqaRules(m);
    if (std::find(rules.begin(), rules.end(), c.gqa) != rules.end())
        return;
    std::string names;
    for (const GroupSelect g : rules)
        names += (names.empty() ? "" : ", ") + groupSelectName(g);
    fail("--gqa: " + methodName(m) + " takes " + names + ", not " + groupSelectName(c.gqa));
}

void checkConfig(const AttentionConfig& c, const ModelShape& shape, bool user) {
    const MethodSpec& spec = methodSpec(c.method);
    const Method m = c.method;
    if (takes(m, Param::R) && c.r < 1)
        fail("--r: r must be at least 1, got " + std::to_string(c.r));
    if (user && takes(m, Param::R) && c.r > shape.headDim)
        fail("--r: r must be between 1 and the head dimension " + std::to_string(shape.headDim) +
             ", got " + std::to_string(c.r));
    if (spec.info.selects) {
        if (c.k < 1)
            fail("--k: k must be at least 1, got " + std::to_string(c.k));
        if (c.local && *c.local < 0)
            fail("--local: the local window l must be at least 0, got " + std::to_string(*c.local));
    }
    if (takes(m, Param::Tau) && c.tau == TauMode::Fixed &&
        (!std::isfinite(c.tauValue) || c.tauValue <= 0))
        fail("--tau: the temperature must be a finite positive number");
    if (takes(m, Param::PageSize) && c.pageSize < 1)
        fail("--page-size: the page size must be at least 1, got " + std::to_string(c.pageSize));
    if (takes(m, Param::P) && !(c.p > 0 && c.p <= 1))
        fail("--p: the mass p must lie in (0, 1], got " + std::to_string(c.p));
    if (c.scale && (!std::isfinite(*c.scale) || *c.scale <= 0))
        fail("the logit scale must be a finite positive number");
    checkGroupRule(c);
    checkParamRules(c); // the table's ranges and pairs
    if (spec.validate)
        spec.validate(c, shape);
    if (spec.calibrator && c.calibration) {
        const Calibration& cal = *c.calibration;
        const CalibratorSpec& k = *spec.calibrator;
        const std::string where = std::string("--") + k.option + ": " + cal.source + ": ";
        if (cal.method != m)
            fail(where + "a " + methodName(cal.method) + " calibration, not a " + methodName(m) +
                 " one");
        const at::Tensor t = cal.tensor(k.dataset());
        if (!t.defined())
            fail(where + "holds no " + k.dataset());
        if (shape.layers > 0 && cal.layers() != shape.layers)
            fail(where + "made for " + std::to_string(cal.layers()) + " layers, the model has " +
                 std::to_string(shape.layers) + " (a calibration of another model?)");
        // Each dimension of the method's tensor named by the model's shape must match it.
        const std::string dims = k.datasets.front().shape;
        for (size_t i = 1; i < dims.size() && static_cast<int64_t>(i) < t.dim(); ++i) {
            const char d = dims[i];
            const int64_t want = d == 'H'   ? shape.heads
                                 : d == 'K' ? shape.kvHeads
                                 : d == 'D' ? shape.headDim
                                            : 0;
            const int64_t have = t.size(static_cast<int64_t>(i));
            if (want > 0 && have != want)
                fail(where + k.dataset() +
                     (d == 'D' ? " of head dimension " + std::to_string(have) +
                                     ", the model's is " + std::to_string(want)
                               : " for " + std::to_string(have) +
                                     (d == 'H' ? " query heads" : " KV heads") +
                                     ", the model has " + std::to_string(want)));
        }
        if (k.check)
            k.check(cal, c, shape, where);
    }
}

} // namespace detail
} // namespace sparqlab::attention
