// MagicPIG (METHODS2.md §5): the sinks and the local window attended exactly; every other key,
// centred by their mean, hashed by SimHash into L tables of K bits; the keys that share the
// query's bucket in at least two tables are sampled, each weighted by the inverse of its
// probability of being sampled (importance sampling instead of top-k).

#include "magicpig.h"

#include "attention/method_kit.h"

#include <ATen/ATen.h>

#include <cmath>

namespace sparqlab::attention::detail {

/// The unit's decode kernel (decode.cpp beside this file).
const DecodeKernel& magicpigDecodeKernel();

namespace {

constexpr double kWeightOffset = kMagicpigWeightOffset;
constexpr int64_t kMinCollisions = kMagicpigMinCollisions;
constexpr double kPi = 3.14159265358979323846;

/// Gaussian hyperplanes [D, n] (float64) from `seed`, the same on every machine: splitmix64
/// uniforms through Box–Muller, column by column (§10.5: the original draws torch.randn at
/// start-up; here they are an input drawn from --hash-seed).
at::Tensor gaussianHyperplanes(int64_t D, int64_t n, uint64_t seed) {
    uint64_t state = seed * 0x9E3779B97F4A7C15ULL + 0x632BE59BD9B4E019ULL;
    auto next = [&state] {
        uint64_t z = (state += 0x9E3779B97F4A7C15ULL);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
        return z ^ (z >> 31);
    };
    auto uniform = [&] { // (0, 1]
        return (static_cast<double>(next() >> 11) + 1.0) * (1.0 / 9007199254740992.0);
    };
    at::Tensor W = at::empty({n, D}, at::kDouble);
    double* w = W.data_ptr<double>();
    for (int64_t i = 0; i < n * D; i += 2) {
        const double r = std::sqrt(-2.0 * std::log(uniform())), a = 2.0 * kPi * uniform();
        w[i] = r * std::cos(a);
        if (i + 1 < n * D)
            w[i + 1] = r * std::sin(a);
    }
    return W.t().contiguous();
}

int64_t hashBits(const AttentionConfig& c) {
    return c.integer(Param::HashBits);
}
int64_t hashTables(const AttentionConfig& c) {
    return c.integer(Param::HashTables);
}

std::map<std::string, at::Tensor> magicpigInputs(const AttentionConfig& c, int64_t D) {
    return {{"hyperplanes", gaussianHyperplanes(D, hashBits(c) * hashTables(c),
                                                static_cast<uint64_t>(c.integer(Param::HashSeed)))
                                .to(at::kFloat)}};
}

/// min over the hyperplanes of |x·w| / (‖x‖ ‖w‖): how far x is from flipping a bit, [...].
at::Tensor hashMargin(const at::Tensor& x, const at::Tensor& W) {
    if (W.size(1) == 0)
        return at::full(x.sizes().slice(0, x.dim() - 1), kInf, x.options());
    const at::Tensor den = x.norm(2, -1, /*keepdim=*/true) * W.norm(2, 0);
    return ratioOrZero(at::matmul(x, W).abs(), den).amin(-1);
}

/// §5.3: P(at least 2 of L tables collide) for a key at angle θ, cos θ given.
at::Tensor sampleProbability(const at::Tensor& cos, int64_t K, int64_t L) {
    const at::Tensor theta = at::acos(cos.clamp(-1.0, 1.0));
    const at::Tensor p = (1.0 - theta / kPi).pow(static_cast<double>(K));
    const at::Tensor q = 1.0 - p;
    return 1.0 - q.pow(static_cast<double>(L - 1)) * (p * static_cast<double>(L) + q);
}

/// §5.2–5.3 on one row; `keyCodes` [Hkv, L, S]: the keys' codes given (undefined: hashed here).
RowResult magicpigRow(const Prepared& p, const StepRow& row, const at::Tensor& W,
                      const at::Tensor& keyCodes, const AttentionConfig& c,
                      const AttendOptions& o) {
    const int64_t Hkv = p.Hkv, g = p.g, S = p.S, Hq = p.Hq;
    const int64_t K = hashBits(c), L = hashTables(c);
    const int64_t sink = c.integer(Param::Sink), l = std::max<int64_t>(1, c.effectiveLocal());
    const at::Tensor E = row.valid.logical_and(row.fidx.lt(sink).logical_or(row.cidx.lt(l)));
    const at::Tensor O = row.valid.logical_and(E.logical_not());
    const int64_t nO = O.sum().item<int64_t>();
    RowResult r;
    r.sel = E.view({1, 1, S}).expand({Hkv, g, S});
    const at::Tensor Om = O.view({1, S, 1});
    const at::Tensor zero = at::zeros({}, row.k.options());
    const at::Tensor kbar =
        at::where(Om, row.k, zero).sum(1) / static_cast<double>(std::max<int64_t>(nO, 1));
    const at::Tensor Kc = at::where(Om, row.k - kbar.unsqueeze(1), zero); // centred keys of O
    const at::Tensor Wc = W.to(row.k.device(), row.k.scalar_type());
    const at::Tensor kcode =
        (keyCodes.defined() ? keyCodes.transpose(1, 2).to(at::kLong) : simhash(Kc, Wc, K, L))
            .masked_fill(O.view({1, S, 1}).logical_not(), -1); // [Hkv, S, L]
    const at::Tensor qcode = simhash(row.q, Wc, K, L);         // [Hkv, g, L]
    const at::Tensor Oh = O.view({1, 1, S});
    at::Tensor coll = qcode.unsqueeze(2).eq(kcode.unsqueeze(1)).sum(-1); // [Hkv, g, S]
    coll = at::where(Oh, coll, at::full_like(coll, -1));
    const at::Tensor R = Oh.logical_and(coll.ge(kMinCollisions));
    const at::Tensor z = scaledLogits(p, at::matmul(row.q, row.k.transpose(1, 2)));
    const at::Tensor dot = at::matmul(row.q, Kc.transpose(1, 2));
    const at::Tensor den = row.q.norm(2, -1).unsqueeze(-1) * Kc.norm(2, -1).unsqueeze(1);
    const at::Tensor cos = at::where(den.gt(0), dot / den.clamp_min(1e-300), zero);
    // The sampling probability in float64 whatever the compute type: (1 − p)^(L−1) of a
    // float32 p loses the small weights (the decode kernel computes it so too).
    const at::Tensor w = sampleProbability(cos.to(at::kDouble), K, L);
    r.logits = at::where(R, z - at::log(w + kWeightOffset).to(z.scalar_type()), z);
    r.sel = r.sel.logical_or(R);
    if (o.diagnostics) {
        r.extra["n_sampled"] = R.sum(-1).reshape({Hq});
        r.extra["n_collide"] = at::where(Oh, coll, at::zeros_like(coll)).sum(-1).reshape({Hq});
        const at::Tensor kmarg =
            at::where(O.view({1, S}), hashMargin(Kc, Wc), at::full({}, kInf, Kc.options()))
                .amin(-1); // [Hkv]
        r.extra["hash_margin_rel"] =
            at::minimum(hashMargin(row.q, Wc), kmarg.unsqueeze(-1)).reshape({Hq});
        if (o.keepScores) {
            r.extra["collisions"] = coll.reshape({Hq, S});
            r.extra["weight"] = at::where(R, w.to(zero.scalar_type()), zero).reshape({Hq, S});
            r.extra["q_codes"] = qcode.reshape({Hq, L});
            r.extra["key_codes"] =
                kcode.transpose(1, 2).unsqueeze(1).expand({Hkv, g, L, S}).reshape({Hq, L, S});
            r.extra["key_mean"] = kbar.unsqueeze(1).expand({Hkv, g, p.D}).reshape({Hq, p.D});
        }
    }
    return r;
}

at::Tensor hyperplanesOf(const AttentionInputs& in, const AttentionConfig& c, int64_t D,
                         bool validate) {
    const int64_t K = hashBits(c), L = hashTables(c);
    at::Tensor W = in.input("hyperplanes");
    if (!W.defined())
        return magicpigHyperplanes(c, D);
    if (W.dim() != 2 || W.size(0) != D || W.size(1) != K * L)
        fail("magicpig: the hyperplanes must be [D, K·L] = [" + std::to_string(D) + ", " +
             std::to_string(K * L) + "], got " + shapeOf(W));
    if (validate && !at::isfinite(W).all().item<bool>())
        throw NonFiniteInputError("magicpig: the hyperplanes have non-finite entries");
    return W;
}

AttentionResult runMagicPIG(const Prepared& p, const AttentionInputs& in, const AttentionConfig& c,
                            const AttendOptions& o) {
    if (c.effectiveLocal() < 0)
        fail("the local window l must be at least 0, got " + std::to_string(c.effectiveLocal()));
    const at::Tensor W = hyperplanesOf(in, c, p.D, o.validate).to(p.qg.device());
    // The keys' codes given (the decode engine's tables): [B, Hkv, L, S] integers.
    at::Tensor codes = in.input("key_codes");
    if (codes.defined()) {
        if (codes.dim() != 4 || codes.size(0) != p.B || codes.size(1) != p.Hkv ||
            codes.size(2) != hashTables(c) || codes.size(3) != p.S ||
            at::isFloatingType(codes.scalar_type()) || codes.scalar_type() == at::kBool)
            fail("magicpig: the key codes must be integers [B, Hkv, L, S] = [" +
                 std::to_string(p.B) + ", " + std::to_string(p.Hkv) + ", " +
                 std::to_string(hashTables(c)) + ", " + std::to_string(p.S) + "], got " +
                 shapeOf(codes) + " " + std::string(c10::toString(codes.scalar_type())));
        codes = codes.to(p.qg.device());
    }
    return runRows(p, p.S, o, [&](const StepRow& row) {
        return magicpigRow(p, row, W, codes.defined() ? codes[row.b] : codes, c, o);
    });
}

void validateMagicPIG(const AttentionConfig& c, const ModelShape&) {
    if (c.local && *c.local < 0)
        fail("--local: must be at least 0, got " + std::to_string(*c.local));
}

/// METHODS2.md §2.1's default window: 64 prompt tokens and the current one.
int64_t magicpigDefaultLocal(const AttentionConfig&) {
    return 65;
}

/// METHODS2.md §7: L bucket bounds, c index entries, the n_s key norms of the sampled, K and V
/// of the n attended (n: the count measured, else k; c: measured, else its expectation L·S/2^K).
double magicpigTransfer(const TransferArgs& a) {
    const double L = a.param(Param::HashTables), K = a.param(Param::HashBits);
    const double n = transfer::count(a);
    const double local = a.config ? a.param(Param::Local) : 65.0;
    const double sampled = std::max(0.0, n - a.param(Param::Sink) - std::max(1.0, local));
    const double c =
        a.measured >= 0
            ? a.measured
            : std::ceil(L * static_cast<double>(a.S) / std::ldexp(1.0, static_cast<int>(K)));
    return 2.0 * L + c + sampled + n * a.kv() + a.kv();
}

/// Step 1: each position's collisions with the query over the L tables; sampled from 2 on.
StepOneView magicpigStepOne(const StepOneInputs& in) {
    StepOneView v;
    v.caption = "<b>Step 1</b> — MagicPIG's collisions: in how many of its " +
                paramValue(*in.config, Param::HashTables) + " SimHash tables (" +
                paramValue(*in.config, Param::HashBits) +
                " bits each) the position's centred key falls in the query's bucket; from 2 on "
                "it is sampled (orange) and weighted by the inverse of its sampling probability";
    v.xLabel = "position";
    v.yLabel = "collisions";
    v.cut = kMinCollisions;
    const at::Tensor coll =
        in.result->output("collisions")[0][in.head].to(at::kCPU, at::kDouble).contiguous();
    for (int64_t j = 0; j < coll.numel(); ++j) {
        const double x = coll.data_ptr<double>()[j];
        v.values.push_back(std::max(0.0, x));
        v.used.push_back(x >= kMinCollisions ? 1 : 0);
    }
    return v;
}

} // namespace

at::Tensor simhash(const at::Tensor& x, const at::Tensor& W, int64_t K, int64_t L) {
    const at::Tensor bits = at::matmul(x, W).gt(0).to(at::kLong); // [..., K·L]
    std::vector<int64_t> shape(x.sizes().begin(), x.sizes().end() - 1);
    shape.push_back(L);
    shape.push_back(K);
    const at::Tensor powers = at::pow(2, at::arange(K, x.options().dtype(at::kLong)));
    return (bits.view(shape) * powers).sum(-1);
}

at::Tensor magicpigHyperplanes(const AttentionConfig& c, int64_t D) {
    return magicpigInputs(c, D).at("hyperplanes");
}

} // namespace sparqlab::attention::detail

SPARQLAB_METHOD(magicpig) {
    return {.info = {.id = Method::MagicPIG,
                     .name = "magicpig",
                     .label = "MagicPIG",
                     .summary = "keys sampled by SimHash collisions with the query and weighted "
                                "by their sampling probability, sinks and window exact (Chen et "
                                "al. 2025)",
                     .spec = "METHODS2.md §5",
                     .params = {Param::HashBits, Param::HashTables, Param::HashSeed, Param::Sink,
                                Param::Local},
                     .budgetVaries = true,
                     .transfer = detail::magicpigTransfer,
                     .transferFormula = "2·L + c + n_s + 2·n·d + 2·d",
                     .evalGrid = "hash-bits=8,9,10,11"},
            .run = detail::runMagicPIG,
            .validate = detail::validateMagicPIG,
            .decode = &detail::magicpigDecodeKernel(),
            .defaultLocal = detail::magicpigDefaultLocal,
            .inputs = {{"hyperplanes", "[D, K·L]",
                        "the SimHash hyperplanes (drawn from --hash-seed when absent)"},
                       {"key_codes", "[B, Hkv, L, S]",
                        "each centred key's code in each table (§5.1), read outside the sinks "
                        "and the window (the decode engine's tables; hashed from K when absent)"}},
            .outputs = {{"n_sampled", "keys sampled, |R| (§5.2)"},
                        {"n_collide", "index entries read from the L buckets (§5.3)", true},
                        {"hash_margin_rel", "how near a hash bit is to flipping (§5.3)"}},
            .ownInputs = detail::magicpigInputs,
            .stepOne = detail::magicpigStepOne};
}
