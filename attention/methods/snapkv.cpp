// SnapKV (METHODS.md §7): the observation window's queries vote over the prefix, the votes are
// pooled along the prefix, and the best k − w prefix positions are kept with the window.

#include "attention/method_kit.h"

#include <ATen/ATen.h>

namespace sparqlab::attention::detail {

namespace {

AttentionResult runSnapKV(const Prepared& p, const AttentionInputs& in, const AttentionConfig& c,
                          const AttendOptions& o) {
    const at::Tensor& qWin = in.qWin;
    const int64_t w = c.snapWindow; // (its range and w ≤ k: the table's rules, checkParamRules)
    if (c.gqa == GroupSelect::SumLogits)
        fail("snapkv takes sum-probs or per-head, not sum-logits");
    checkWindowQueries(p, qWin, w, "snapkv");
    // Steps in chunks: the window's attention takes [Hq, n, w, S].
    const int64_t chunk = stepsPerChunk(p.B * p.Hq * w * p.S);
    std::vector<at::Tensor> masks, margins, rels, votes, pooled;
    for (int64_t t0 = 0; t0 < p.T; t0 += chunk) {
        const int64_t n = std::min(chunk, p.T - t0);
        const WindowKeep s =
            windowKeep(p, qWin, at::full({p.B, n}, c.k, at::kLong), w, c.kernel, c.pooling,
                       c.gqa == GroupSelect::PerHead, t0, n, o.validate);
        masks.push_back(s.sel.mask.expand({p.B, p.Hkv, p.g, n, p.S}));
        margins.push_back(s.sel.margin.expand({p.B, p.Hkv, p.g, n}));
        rels.push_back(s.sel.marginRel.expand({p.B, p.Hkv, p.g, n}));
        votes.push_back(s.votes.expand({p.B, p.Hkv, p.g, n, p.S}));
        pooled.push_back(s.pooled.expand({p.B, p.Hkv, p.g, n, p.S}));
    }
    const Selection sel{at::cat(masks, 3), at::cat(margins, 3), at::cat(rels, 3)};
    AttentionResult out = attendSelection(p, exactLogits(p), sel, c.k, o);
    if (o.diagnostics) {
        out.votes = p.heads(at::cat(votes, 3));
        out.pooled = p.heads(at::cat(pooled, 3));
    }
    return out;
}

/// SnapKV in a model (METHODS.md §7 with a KV cache): it compresses the prompt once, at the
/// first decode step, from the window's queries (CompressOnce).
constexpr CompressOnce kSnapCompress{};

void validateSnap(const AttentionConfig& c, const ModelShape&) {
    if (c.gqa == GroupSelect::SumLogits)
        fail("--gqa: snapkv takes sum-probs or per-head");
}

} // namespace
} // namespace sparqlab::attention::detail

SPARQLAB_METHOD(snapkv) {
    return {
        .info =
            {.id = Method::SnapKV,
             .name = "snapkv",
             .label = "SnapKV",
             .summary =
                 "the prompt compressed once by the pooled votes of an observation window (Li et "
                 "al. 2024)",
             .spec = "METHODS.md §7",
             .params = {Param::K, Param::Window, Param::Kernel, Param::Pooling, Param::Gqa},
             .atMost = {{Param::Window, Param::K}}, // (the window is kept)
             .transfer = transfer::kept,
             .transferFormula = "2·k·d + 2·d",
             .evalGrid = "k=192,256,384,512,768"},
        .run = detail::runSnapKV,
        .validate = detail::validateSnap,
        .causal = &detail::compressOnceHooks<detail::kSnapCompress>};
}
