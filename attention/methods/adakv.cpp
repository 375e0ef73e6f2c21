// AdaKV (METHODS3.md §5): SnapKV's pooled window scores, but the layer's budget split across
// heads by where the scores are: the n_U·(k − w) largest (head, rank) entries of the layer
// decide each head's share, floored at alpha of the uniform budget; each head keeps its best
// positions and the window.

#include "attention/method_kit.h"

#include <ATen/ATen.h>

#include <cmath>

namespace sparqlab::attention::detail {

namespace {

/// §5.3 in the original's float32 arithmetic: round_half_even(f32(c)·f32(1 − alpha) + f32(F)),
/// F = ⌊B_pre·alpha⌋ (the float64 product, truncated); each step one IEEE float operation.
int64_t adakvCapacity(int64_t c, int64_t bPre, double alpha) {
    const auto F = static_cast<int64_t>(static_cast<double>(bPre) * alpha);
    volatile float x = static_cast<float>(c) * static_cast<float>(1.0 - alpha);
    x = x + static_cast<float>(F);
    return static_cast<int64_t>(std::nearbyint(x)); // the default rounding: half to even
}

/// One row: the allocation of §5.3 and the kept sets of §5.4 from the pooled scores
/// [Hkv, U, S] over the prefix and the window [S].
RowResult adaRow(const Prepared& p, const StepRow& row, const at::Tensor& pooled,
                 const at::Tensor& prefix, const at::Tensor& window, const AttentionConfig& c,
                 const AttendOptions& o) {
    const int64_t Hkv = p.Hkv, g = p.g, S = p.S, Hq = p.Hq, U = pooled.size(1), w = c.snapWindow;
    const int64_t bPre = c.k - w;
    const double alpha = c.value(Param::Alpha);
    RowResult r;
    auto perHead = [&](const at::Tensor& x) { // [Hkv, U] → [Hq]
        return x.expand({Hkv, g}).reshape({Hq});
    };
    if (row.nValid <= c.k) { // §5.6: dense
        r.sel = row.valid.view({1, 1, S}).expand({Hkv, U, S});
        if (o.diagnostics) {
            const at::Tensor zero = at::zeros({Hq}, at::kLong);
            r.extra["alloc"] = zero;
            r.extra["capacity"] = zero;
            r.extra["alloc_margin"] = at::full({Hq}, kInf, p.options());
            r.extra["alloc_margin_rel"] = at::full({Hq}, kInf, p.options());
            r.extra["pooled"] = at::zeros({Hq, S}, p.options());
        }
        return r;
    }
    const int64_t nPre = prefix.sum().item<int64_t>();
    const at::Tensor cand = prefix.view({1, 1, S}).expand({Hkv, U, S});
    // Each unit's prefix by score, descending (ties → lower position).
    const at::Tensor order = rankOrder(pooled, cand.to(at::kLong)).narrow(-1, 0, nPre);
    at::Tensor vals = pooled.gather(-1, order); // [Hkv, U, n_pre]
    if (c.integer(Param::Normalize) != 0) {
        const at::Tensor total = vals.sum(-1, /*keepdim=*/true);
        const at::Tensor top = vals.narrow(-1, 0, bPre).sum(-1, /*keepdim=*/true);
        vals =
            vals * at::where(total.gt(0), top / at::where(total.gt(0), total, at::ones_like(total)),
                             at::ones_like(total));
    }
    // The layer's N = n_U·B_pre largest (unit, rank) entries; index = rank·n_U + unit.
    const int64_t nU = Hkv * U, N = nU * bPre;
    const at::Tensor flat = vals.reshape({nU, nPre}).t().reshape({1, nPre * nU});
    const at::Tensor all = at::ones_like(flat, flat.options().dtype(at::kBool));
    const Selection top = select(flat, all, all.logical_not(), at::full({1}, N, at::kLong));
    const at::Tensor alloc = top.mask.view({nPre, nU}).sum(0).view({Hkv, U}); // c_U
    at::Tensor cap = at::empty({Hkv, U}, at::kLong);
    const at::Tensor allocC = alloc.contiguous();
    for (int64_t i = 0; i < nU; ++i)
        cap.view({nU})[i] =
            std::min(adakvCapacity(allocC.view({nU})[i].item<int64_t>(), bPre, alpha), nPre);
    const Selection keep = select(pooled, cand, at::zeros_like(cand), cap);
    r.sel = keep.mask.logical_or(window.view({1, 1, S}));
    r.margin = keep.margin;
    r.marginRel = keep.marginRel;
    if (o.diagnostics) {
        r.extra["alloc"] = perHead(alloc);
        r.extra["capacity"] = perHead(cap);
        r.extra["alloc_margin"] = top.margin.expand({Hq}).to(p.qg.scalar_type());
        r.extra["alloc_margin_rel"] = top.marginRel.expand({Hq}).to(p.qg.scalar_type());
        r.extra["pooled"] = pooled.expand({Hkv, g, S}).reshape({Hq, S});
    }
    return r;
}

AttentionResult runAdaKV(const Prepared& p, const AttentionInputs& in, const AttentionConfig& c,
                         const AttendOptions& o) {
    const int64_t w = c.snapWindow; // (its range and w ≤ k: checkParamRules)
    checkWindowQueries(p, in.qWin, w, "adakv");
    // §5.2: mean window votes, the unit's combination, pooling — in chunks of steps.
    const int64_t chunk = stepsPerChunk(p.B * p.Hq * w * p.S);
    std::vector<at::Tensor> pooledAll, prefixAll, windowAll;
    for (int64_t t0 = 0; t0 < p.T; t0 += chunk) {
        const int64_t n = std::min(chunk, p.T - t0);
        const WindowVotes wv = windowVotes(p, in.qWin, w, t0, n, o.validate);
        const at::Tensor v = wv.votes / static_cast<double>(w); // [B, Hkv, g, n, S]
        at::Tensor x;
        switch (c.gqa) {
        case GroupSelect::PerHead:
            x = v;
            break;
        case GroupSelect::MaxProbs:
            x = std::get<0>(v.max(2, /*keepdim=*/true));
            break;
        default:
            x = seqSum(v, 2).unsqueeze(2) / static_cast<double>(p.g);
        }
        pooledAll.push_back(poolPrefix(x, wv, c.kernel, c.pooling)); // [B, Hkv, U, n, S]
        prefixAll.push_back(wv.prefix);
        windowAll.push_back(wv.window);
    }
    const at::Tensor pooled = at::cat(pooledAll, 3), prefix = at::cat(prefixAll, 1),
                     window = at::cat(windowAll, 1);
    AttentionResult out = runRows(p, p.S, o, [&](const StepRow& row) {
        return adaRow(p, row, pooled[row.b].select(2, row.t), prefix[row.b][row.t],
                      window[row.b][row.t], c, o);
    });
    if (const auto it = out.extra.find("pooled"); it != out.extra.end()) {
        out.pooled = it->second;
        out.extra.erase(it);
    }
    return out;
}

/// In a model: the prompt compressed once, at the first decode step (CompressOnce).
constexpr CompressOnce kAdaCompress{};

/// METHODS3.md §6: K and V of the n positions a head keeps (n: the mean count measured, else k).
double adaTransfer(const TransferArgs& a) {
    return transfer::count(a) * a.kv() + a.kv();
}

/// Step 1: each head's share of the layer's budget (its capacity); this head's marked.
StepOneView adaStepOne(const StepOneInputs& in) {
    StepOneView v;
    v.caption = "<b>Step 1</b> — AdaKV's budgets: the layer's k − w prompt positions per head, "
                "shared out by where the window's pooled votes are largest (at least " +
                paramValue(*in.config, Param::Alpha) +
                " of an even share each); this head (orange) keeps its best positions and the "
                "window";
    v.xLabel = "query head";
    v.yLabel = "positions kept (capacity)";
    const at::Tensor cap = in.result->output("capacity")[0].to(at::kDouble).contiguous();
    for (int64_t h = 0; h < cap.numel(); ++h) {
        v.values.push_back(cap.data_ptr<double>()[h]);
        v.used.push_back(h == in.head ? 1 : 0);
    }
    return v;
}

} // namespace
} // namespace sparqlab::attention::detail

SPARQLAB_METHOD(adakv) {
    return {
        .info = {.id = Method::AdaKV,
                 .name = "adakv",
                 .label = "AdaKV",
                 .summary = "SnapKV's window votes with the layer's budget shared across "
                            "heads by where the votes are (Feng et al. 2025)",
                 .spec = "METHODS3.md §5",
                 .params = {Param::K, Param::Window, Param::Kernel, Param::Pooling, Param::Alpha,
                            Param::Normalize, Param::Gqa},
                 .gqaRules = {GroupSelect::SumProbs, GroupSelect::MaxProbs, GroupSelect::PerHead},
                 .defaults = {{Param::Kernel, "7"}},
                 .atMost = {{Param::Window, Param::K}}, // (the window is kept)
                 .budgetVaries = true,
                 .transfer = detail::adaTransfer,
                 .transferFormula = "2·n·d + 2·d",
                 .evalGrid = "k=192,256,384,512,768"},
        .run = detail::runAdaKV,
        .causal = &detail::compressOnceHooks<detail::kAdaCompress>,
        .outputs = {{"alloc", "the head's entries among the layer's top N, c_U (§5.3)"},
                    {"capacity", "the head's prompt positions kept, cap_U (§5.3)"},
                    {"alloc_margin_rel", "the allocation's margin (§5.3)"}},
        .stepOne = detail::adaStepOne};
}
