// ChunkKV (METHODS3.md §13): a composition of SnapKV's scorer (the observation window's pooled
// votes, METHODS.md §7.1–7.2, from window_votes.cpp) with a selection of whole chunks: the
// prefix in chunks of c positions, each scored by the mean over its positions of the votes summed
// over the layer's KV heads; the best ⌊(k − w)/c⌋ chunks are kept for every head, with the window
// (Liu et al. 2025; kvpress's ChunkKVPress wrapping SnapKVPress).

#include "attention/method_kit.h"
#include "attention/select.h"

#include <ATen/ATen.h>

namespace sparqlab::attention::detail {

namespace {

/// §13.1–13.2 for the steps [t0, t0 + n): the selection [B, 1, 1, n, S] shared by the layer's
/// heads, its chunk margins [B, 1, 1, n], and SnapKV's pooled votes [B, Hkv, 1, n, S].
struct ChunkKeep {
    Selection sel;
    at::Tensor pooled;
};

ChunkKeep chunkKeep(const Prepared& p, const at::Tensor& qWin, const AttentionConfig& c, int64_t t0,
                    int64_t n, bool validate) {
    const int64_t B = p.B, S = p.S, w = c.snapWindow, size = c.integer(Param::ChunkSize);
    // SnapKV's scorer, composed: the group's votes summed head by head, pooled along the prefix.
    const WindowVotes wv = windowVotes(p, qWin, w, t0, n, validate);
    const at::Tensor pooled = poolPrefix(seqSum(wv.votes, 2).unsqueeze(2), wv, c.kernel,
                                         c.pooling); // [B, Hkv, 1, n, S]
    // §13.1: the layer's score of a position, its KV heads summed left to right (0 outside the
    // prefix), and its chunk by forward index among the row's valid positions.
    const at::Tensor layer = seqSum(pooled.squeeze(2), 1); // [B, n, S]
    const int64_t C = (S + size - 1) / size;               // chunks a row can have
    const at::Tensor chunk = at::where(wv.prefix, forwardIndex(wv.valid).div(size, "floor"),
                                       at::full_like(wv.nValid, C).unsqueeze(-1));
    const at::Tensor sums =
        at::zeros({B, n, C + 1}, layer.options()).scatter_add_(-1, chunk, layer).narrow(-1, 0, C);
    const at::Tensor counts = at::zeros({B, n, C + 1}, chunk.options())
                                  .scatter_add_(-1, chunk, wv.prefix.to(at::kLong))
                                  .narrow(-1, 0, C);
    const at::Tensor means = sums / counts.clamp_min(1).to(sums.scalar_type());
    // §13.2: ⌊(k − w)/c⌋ chunks of a row that compresses (ties to the lower chunk).
    const at::Tensor compress = wv.nValid.gt(c.k); // [B, n]
    const at::Tensor exists = counts.gt(0);
    const at::Tensor want = exists.sum(-1).clamp_max((c.k - w) / size);
    const at::Tensor nKeep = at::where(compress, want, at::zeros_like(want));
    const Selection top = select(means, exists, at::zeros_like(exists), nKeep);
    const at::Tensor keptChunk =
        at::cat({top.mask, at::zeros({B, n, 1}, top.mask.options())}, -1); // (the outside bin)
    const at::Tensor kept = keptChunk.gather(-1, chunk).logical_and(wv.prefix);
    const at::Tensor cm = compress.unsqueeze(-1);
    ChunkKeep r;
    r.sel.mask = at::where(cm, kept.logical_or(wv.window), wv.valid).view({B, 1, 1, n, S});
    r.sel.margin =
        at::where(compress, top.margin, at::full_like(top.margin, kInf)).view({B, 1, 1, n});
    r.sel.marginRel =
        at::where(compress, top.marginRel, at::full_like(top.marginRel, kInf)).view({B, 1, 1, n});
    r.pooled = at::where(cm.view({B, 1, 1, n, 1}), pooled, at::scalar_tensor(0, pooled.options()));
    return r;
}

AttentionResult runChunkKV(const Prepared& p, const AttentionInputs& in, const AttentionConfig& c,
                           const AttendOptions& o) {
    const int64_t w = c.snapWindow; // (its range, w ≤ k and c ≥ 1: the table's rules)
    checkWindowQueries(p, in.qWin, w, "chunkkv");
    const int64_t steps = stepsPerChunk(p.B * p.Hq * w * p.S);
    std::vector<at::Tensor> masks, margins, rels, pooled;
    for (int64_t t0 = 0; t0 < p.T; t0 += steps) {
        const int64_t n = std::min(steps, p.T - t0);
        const ChunkKeep s = chunkKeep(p, in.qWin, c, t0, n, o.validate);
        masks.push_back(s.sel.mask.expand({p.B, p.Hkv, p.g, n, p.S}));
        margins.push_back(s.sel.margin.expand({p.B, p.Hkv, p.g, n}));
        rels.push_back(s.sel.marginRel.expand({p.B, p.Hkv, p.g, n}));
        pooled.push_back(s.pooled.expand({p.B, p.Hkv, p.g, n, p.S}));
    }
    const Selection sel{at::cat(masks, 3), at::cat(margins, 3), at::cat(rels, 3)};
    AttentionResult out = attendSelection(p, exactLogits(p), sel, c.k, o);
    if (o.diagnostics)
        out.pooled = p.heads(at::cat(pooled, 3));
    return out;
}

/// In a model: the prompt compressed once, at the first decode step (as SnapKV).
constexpr CompressOnce kChunkCompress{};

/// Step 1: SnapKV's pooled votes per position, the kept chunks in orange.
StepOneView chunkStepOne(const StepOneInputs& in) {
    return positionScoresView("<b>Step 1</b> — ChunkKV scores the prompt with SnapKV's pooled "
                              "window votes, then keeps whole chunks of c positions, the best by "
                              "their mean (orange), with the window",
                              "pooled votes", in.result->pooled[0][in.head],
                              in.result->selected[0][in.head]);
}

/// §13.3: the kept positions' keys and values (n: the count measured, at most k) and the query.
double chunkTransfer(const TransferArgs& a) {
    return transfer::count(a) * a.kv() + a.kv();
}

} // namespace
} // namespace sparqlab::attention::detail

SPARQLAB_METHOD(chunkkv) {
    return {.info = {.id = Method::ChunkKV,
                     .name = "chunkkv",
                     .label = "ChunkKV",
                     .summary = "SnapKV's window votes, kept in whole chunks of c positions that "
                                "the layer's heads share (Liu et al. 2025)",
                     .spec = "METHODS3.md §13",
                     .params = {Param::K, Param::Window, Param::Kernel, Param::Pooling,
                                Param::ChunkSize},
                     .defaults = {{Param::ChunkSize, "20"}},
                     .atMost = {{Param::Window, Param::K}}, // (the window is kept)
                     .budgetVaries = true,
                     .transfer = detail::chunkTransfer,
                     .transferFormula = "2·n·d + 2·d",
                     .evalGrid = "k=192,256,384,512,768"},
            .run = detail::runChunkKV,
            .causal = &detail::compressOnceHooks<detail::kChunkCompress>,
            .stepOne = detail::chunkStepOne};
}
