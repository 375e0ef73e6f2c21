// PQCache (METHODS2.md §4): each key product-quantised by a deterministic k-means of the
// prompt's keys (m sub-spaces, 2^b centroids each); a decode step ranks the positions outside
// the sinks and the local window by the query's dot products with their centroids, and
// attends exactly to the sinks, the window and the best of the rest.

#include "pqcache.h"

#include "attention/method_kit.h"

#include <ATen/ATen.h>

#include <cmath>

namespace sparqlab::attention {

namespace {

using detail::fail;
using detail::kInf;

/// Elements of the [n, C, D/m] differences one pass of the nearest-centroid search may take.
constexpr int64_t kNearestElements = int64_t{1} << 23;

/// §4.2: the nearest centroid of each x (direct squared distances, ties → the lower centroid)
/// and the relative gap to the second nearest. x [G, n, ds], c [G, C, ds].
std::pair<at::Tensor, at::Tensor> nearest(const at::Tensor& x, const at::Tensor& c) {
    const int64_t G = x.size(0), n = x.size(1), C = c.size(1), ds = x.size(2);
    const int64_t step = std::max<int64_t>(1, kNearestElements / std::max<int64_t>(1, G * C * ds));
    std::vector<at::Tensor> codes, gaps;
    for (int64_t i0 = 0; i0 < n; i0 += step) {
        const int64_t len = std::min(step, n - i0);
        const at::Tensor d =
            (x.narrow(1, i0, len).unsqueeze(2) - c.unsqueeze(1)).pow(2).sum(-1); // [G, len, C]
        codes.push_back(d.argmin(-1));
        if (C > 1) {
            const at::Tensor two = std::get<0>(at::topk(d, 2, -1, /*largest=*/false));
            const at::Tensor d2 = two.select(-1, 1);
            gaps.push_back(detail::ratioOrZero(d2 - two.select(-1, 0), d2));
        } else {
            gaps.push_back(at::full({G, len}, kInf, d.options()));
        }
    }
    if (codes.empty())
        return {at::zeros({G, 0}, c.options().dtype(at::kLong)), at::zeros({G, 0}, c.options())};
    return {at::cat(codes, 1), at::cat(gaps, 1)};
}

void checkBuild(int64_t D, int64_t m, int64_t b, int64_t sink, int64_t iters) {
    if (m < 1 || D % m != 0)
        fail("--pq-subspaces: m must divide the head dimension " + std::to_string(D) + ", got " +
             std::to_string(m));
    if (b < 0 || b > 16)
        fail("--pq-bits: b must lie in [0, 16], got " + std::to_string(b));
    if (sink < 0)
        fail("--sink: must be at least 0, got " + std::to_string(sink));
    if (iters < 0)
        fail("--pq-iters: must be at least 0, got " + std::to_string(iters));
}

} // namespace

PqCodebook pqBuildRow(const at::Tensor& k, const at::Tensor& valid, int64_t m, int64_t b,
                      int64_t sink, int64_t iters) {
    const int64_t Hkv = k.size(0), S = k.size(1), D = k.size(2);
    checkBuild(D, m, b, sink, iters);
    const int64_t C = int64_t{1} << b, ds = D / m;
    // Every tensor on K's device (valid may come from elsewhere).
    const auto longs = k.options().dtype(at::kLong);
    const at::Tensor vk = valid.to(k.device(), at::kBool);
    const at::Tensor fi = forwardIndex(vk), ci = causalIndex(vk);
    PqCodebook out;
    out.fit = vk.logical_and(fi.ge(sink)).logical_and(ci.ge(1));
    out.centroids = at::zeros({Hkv, m, C, ds}, k.options());
    out.codes = at::full({Hkv, m, S}, -1, longs);
    out.codeGapRel = at::full({Hkv, m}, kInf, k.options());
    out.updates = at::zeros({}, longs);
    const at::Tensor idx = out.fit.nonzero().flatten();
    const int64_t nFit = idx.numel();
    out.nCentroids = at::full({}, std::min(C, nFit), longs);
    if (nFit == 0)
        return out;
    const int64_t ce = std::min(C, nFit);
    // [Hkv·m, n, ds]: each (KV head, sub-space) its own k-means.
    auto subVectors = [&](const at::Tensor& positions) {
        return k.index_select(1, positions)
            .view({Hkv, positions.numel(), m, ds})
            .permute({0, 2, 1, 3})
            .reshape({Hkv * m, positions.numel(), ds});
    };
    const at::Tensor X = subVectors(idx);
    const at::Tensor init = at::floor_divide(at::arange(ce, longs) * nFit, ce);
    at::Tensor cent = X.index_select(1, init).clone(); // [Hkv·m, ce, ds]
    at::Tensor prev;
    int64_t updates = 0;
    for (int64_t it = 0; it < iters; ++it) {
        const at::Tensor a = nearest(X, cent).first; // [Hkv·m, n]
        if (prev.defined() && a.equal(prev))
            break; // a fixed point: the update would change nothing
        const at::Tensor oneHot = at::one_hot(a, ce).to(X.scalar_type()); // [G, n, ce]
        const at::Tensor count = oneHot.sum(1);                           // [G, ce]
        const at::Tensor sums = at::matmul(oneHot.transpose(1, 2), X);    // [G, ce, ds]
        cent = at::where(count.unsqueeze(-1).gt(0), sums / count.clamp_min(1).unsqueeze(-1),
                         cent); // an empty cluster keeps its centroid
        prev = a;
        ++updates;
    }
    out.updates.fill_(updates);
    out.centroids.view({Hkv * m, C, ds}).narrow(1, 0, ce).copy_(cent);
    const at::Tensor vidx = vk.nonzero().flatten();
    const auto [codes, gap] = nearest(subVectors(vidx), cent);
    out.codes.view({Hkv * m, S}).index_copy_(1, vidx, codes);
    out.codeGapRel = gap.amin(-1).view({Hkv, m});
    return out;
}

PqCodebook pqBuild(const at::Tensor& k, const at::Tensor& valid, int64_t m, int64_t b, int64_t sink,
                   int64_t iters) {
    if (k.dim() != 4 || valid.dim() != 2 || valid.size(0) != k.size(0) ||
        valid.size(1) != k.size(2))
        fail("pq_build needs K [B, Hkv, S, D] and valid [B, S], got K " + detail::shapeOf(k) +
             " and valid " + detail::shapeOf(valid));
    std::vector<PqCodebook> rows;
    for (int64_t i = 0; i < k.size(0); ++i)
        rows.push_back(pqBuildRow(k[i], valid[i].to(at::kBool), m, b, sink, iters));
    PqCodebook out;
    auto stack = [&](at::Tensor PqCodebook::*f) {
        std::vector<at::Tensor> ts;
        for (const PqCodebook& r : rows)
            ts.push_back(r.*f);
        out.*f = at::stack(ts, 0);
    };
    for (at::Tensor PqCodebook::*f :
         {&PqCodebook::centroids, &PqCodebook::codes, &PqCodebook::nCentroids, &PqCodebook::fit,
          &PqCodebook::codeGapRel, &PqCodebook::updates})
        stack(f);
    return out;
}

namespace detail {

/// The unit's decode kernel (decode.cpp beside this file).
const DecodeKernel& pqcacheDecodeKernel();

namespace {

/// §4.3's default window: the current token and half of the budget beyond the sinks.
int64_t pqDefaultLocal(const AttentionConfig& c) {
    return 1 + std::max<int64_t>(0, (c.k - 1 - c.integer(Param::Sink)) / 2);
}

/// §4.3 on one row with its codebook: centroids [Hkv, m, C, ds], codes [Hkv, m, S].
RowResult pqRow(const Prepared& p, const StepRow& row, const at::Tensor& cent,
                const at::Tensor& codes, const AttentionConfig& c, const AttendOptions& o) {
    const int64_t Hkv = p.Hkv, g = p.g, S = p.S;
    const int64_t m = cent.size(1), C = cent.size(2), ds = cent.size(3);
    const int64_t kEff = std::min(c.k, row.nValid);
    const bool dense = row.nValid <= c.k;
    const int64_t lEff = std::min(std::max<int64_t>(1, c.effectiveLocal()), kEff);
    const int64_t sEff = std::min(c.integer(Param::Sink), kEff - lEff);
    at::Tensor F = row.valid.logical_and(row.fidx.lt(sEff).logical_or(row.cidx.lt(lEff)));
    if (dense)
        F = row.valid;
    const at::Tensor cand = row.valid.logical_and(F.logical_not());
    const int64_t nTop = dense ? 0 : kEff - sEff - lEff;
    RowResult r;
    // The codes of the ranked positions (none when nothing is ranked: code 0 stands in, as in
    // the reference, for the diagnostic ẑ).
    const at::Tensor used =
        (nTop > 0 ? cand : at::zeros_like(cand)).view({1, 1, S}).expand({Hkv, m, S});
    const at::Tensor ranked = codes.masked_select(used);
    if (ranked.numel() > 0 && (ranked.lt(0).any().item<bool>() || ranked.ge(C).any().item<bool>()))
        fail("pqcache: a ranked position has no code of the codebook's " + std::to_string(C) +
             " centroids");
    // ẑ_h[j] = Σ_s q_h^(s)·cent[u, s, codes[u, s, j]] / sqrt(D), the sub-spaces in order.
    const at::Tensor qs = row.q.view({Hkv, g, m, ds}).permute({0, 2, 1, 3}); // [Hkv, m, g, ds]
    const at::Tensor table = at::matmul(qs, cent.to(qs.scalar_type()).transpose(-1, -2));
    const at::Tensor codeIdx =
        at::where(used, codes, at::zeros_like(codes)).unsqueeze(2).expand({Hkv, m, g, S});
    const at::Tensor parts = table.gather(-1, codeIdx); // [Hkv, m, g, S]
    const at::Tensor cm = cand.view({1, 1, S});
    const at::Tensor zHat = scaledLogits(p, seqSum(parts, 1)).masked_fill(cm.logical_not(), -kInf);
    const at::Tensor z5 = zHat.view({1, Hkv, g, 1, S});
    const at::Tensor sHat =
        at::where(cm, probabilities(p, z5).view({Hkv, g, S}), at::zeros({}, zHat.options()));
    at::Tensor G;
    switch (c.gqa) {
    case GroupSelect::PerHead:
        G = zHat;
        break;
    case GroupSelect::SumLogits:
        G = zHat.sum(1, /*keepdim=*/true);
        break;
    default:
        G = sHat.sum(1, /*keepdim=*/true);
    }
    const int64_t U = G.size(1);
    const Selection sel = select(G, cm.expand({Hkv, U, S}), at::zeros({Hkv, U, S}, cm.options()),
                                 at::full({Hkv, U}, nTop, cm.options().dtype(at::kLong)));
    r.sel = sel.mask.logical_or(F.view({1, 1, S}));
    r.margin = sel.margin;
    r.marginRel = sel.marginRel;
    if (o.diagnostics && o.keepScores) {
        r.extra["z_hat"] = zHat.reshape({p.Hq, S});
        r.extra["s_hat"] = sHat.reshape({p.Hq, S});
    }
    return r;
}

AttentionResult runPQCache(const Prepared& p, const AttentionInputs& in, const AttentionConfig& c,
                           const AttendOptions& o) {
    checkBudget(c.k, c.effectiveLocal());
    // A given codebook (a file's, or the decode engine's prepared one) on q's device.
    at::Tensor givenCent = in.input("pq_centroids"), givenCodes = in.input("pq_codes");
    if (givenCent.defined())
        givenCent = givenCent.to(p.qg.device());
    if (givenCodes.defined())
        givenCodes = givenCodes.to(p.qg.device());
    if (givenCent.defined() != givenCodes.defined())
        fail("pqcache: a given codebook needs both its centroids and its codes");
    if (givenCent.defined()) {
        if (givenCent.dim() != 5 || givenCent.size(0) != p.B || givenCent.size(1) != p.Hkv ||
            givenCent.size(2) * givenCent.size(4) != p.D)
            fail("pqcache: the centroids must be [B, Hkv, m, C, D/m] for B = " +
                 std::to_string(p.B) + ", Hkv = " + std::to_string(p.Hkv) +
                 ", D = " + std::to_string(p.D) + ", got " + shapeOf(givenCent));
        if (givenCodes.sizes() !=
            at::IntArrayRef(std::vector<int64_t>{p.B, p.Hkv, givenCent.size(2), p.S}))
            fail("pqcache: the codes must be [B, Hkv, m, S] = [" + std::to_string(p.B) + ", " +
                 std::to_string(p.Hkv) + ", " + std::to_string(givenCent.size(2)) + ", " +
                 std::to_string(p.S) + "], got " + shapeOf(givenCodes));
        if (o.validate && !at::isfinite(givenCent).all().item<bool>())
            throw NonFiniteInputError("pqcache: the centroids have non-finite entries");
    } else {
        checkBuild(p.D, c.integer(Param::PqSubspaces), c.integer(Param::PqBits),
                   c.integer(Param::Sink), c.integer(Param::PqIters));
    }
    AttentionResult out = runRows(
        p, c.k, o,
        [&](const StepRow& row) {
            if (givenCent.defined())
                return pqRow(p, row, givenCent[row.b].to(p.qg.scalar_type()),
                             givenCodes[row.b].to(at::kLong), c, o);
            const PqCodebook cb = pqBuildRow(row.k, row.valid, c.integer(Param::PqSubspaces),
                                             c.integer(Param::PqBits), c.integer(Param::Sink),
                                             c.integer(Param::PqIters));
            return pqRow(p, row, cb.centroids, cb.codes, c, o);
        },
        -kInf);
    for (auto [name, field] :
         {std::pair{"z_hat", &AttentionResult::zHat}, std::pair{"s_hat", &AttentionResult::sHat}})
        if (const auto it = out.extra.find(name); it != out.extra.end()) {
            out.*field = it->second;
            out.extra.erase(it);
        }
    return out;
}

void validatePQ(const AttentionConfig& c, const ModelShape& shape) {
    if (shape.headDim > 0)
        checkBuild(shape.headDim, c.integer(Param::PqSubspaces), c.integer(Param::PqBits),
                   c.integer(Param::Sink), c.integer(Param::PqIters));
}

/// METHODS2.md §7: m codes of every key, the codebook, K and V of the k chosen.
double pqTransfer(const TransferArgs& a) {
    const double m = a.param(Param::PqSubspaces);
    const double C = std::ldexp(1.0, static_cast<int>(a.param(Param::PqBits)));
    return 1.0 * a.S * m + C * a.d + 1.0 * a.k * a.kv() + a.kv();
}

/// Step 1: the PQ scores ẑ of the ranked positions; the chosen ones marked.
StepOneView pqStepOne(const StepOneInputs& in) {
    StepOneView v;
    v.caption = "<b>Step 1</b> — PQCache's approximate score of each ranked position: the query "
                "dotted with the centroids its key was quantised to (" +
                paramValue(*in.config, Param::PqSubspaces) + " sub-spaces × 2^" +
                paramValue(*in.config, Param::PqBits) +
                " centroids); the best (orange) are attended with the sinks and the window";
    v.xLabel = "position";
    v.yLabel = "PQ score ẑ";
    setPositionScores(v, in.result->zHat[0][in.head], in.result->selected[0][in.head]);
    return v;
}

} // namespace
} // namespace detail
} // namespace sparqlab::attention

SPARQLAB_METHOD(pqcache) {
    return {.info = {.id = Method::PQCache,
                     .name = "pqcache",
                     .label = "PQCache",
                     .summary = "positions ranked by product-quantised keys: the query against "
                                "k-means centroids of the prompt's keys (Zhang et al. 2025)",
                     .spec = "METHODS2.md §4",
                     .params = {Param::K, Param::Local, Param::Sink, Param::PqSubspaces,
                                Param::PqBits, Param::PqIters, Param::Gqa},
                     .defaults = {{Param::Sink, "32"}},
                     .transfer = detail::pqTransfer,
                     .transferFormula = "S·m + 2^b·d + 2·k·d + 2·d",
                     .evalGrid = "k=64,128,256,512"},
            .run = detail::runPQCache,
            .validate = detail::validatePQ,
            .decode = &detail::pqcacheDecodeKernel(),
            .defaultLocal = detail::pqDefaultLocal,
            .inputs = {{"pq_centroids", "[B, Hkv, m, C, D/m]",
                        "a given codebook (built from the prompt's keys by §4.2 when absent)"},
                       {"pq_codes", "[B, Hkv, m, S]", "the codes of a given codebook"}},
            .stepOne = detail::pqStepOne};
}
