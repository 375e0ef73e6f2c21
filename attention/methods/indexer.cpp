// The model's own learned selection (docs/learned-sparse-and-hybrid.md): each step attends
// exactly, renormalised, to what the model's trained indexer ranks highest, beside the
// training-free methods, at any k. DeepSeek Sparse Attention's lightning indexer (DeepSeek-V3.2,
// GLM-5) scores single keys, one ranking per layer, and the k best are kept. MiniMax-M3's block
// indexer scores blocks of keys per indexer head, for its group of query heads, and the
// ⌈k / block⌉ best are kept with the local blocks (§8). The scores come from a capture
// (index_scores: one row per query position). At the model's own top-k this is the model's own
// attention.

#include "attention/method_kit.h"

#include "attention/select.h"

#include <ATen/ATen.h>

namespace sparqlab::attention::detail {
namespace {

/// Each step's position: its last valid key. [B, T]
at::Tensor stepPositions(const Prepared& p) {
    const at::Tensor at = at::arange(p.S, at::kLong).view({1, 1, p.S});
    return at::where(p.valid, at, at::full_like(at, -1)).amax(-1);
}

const char* const kNotHeld = "indexer: the capture holds no indexer scores for a step's query "
                             "(capture the positions it runs, e.g. with --all-queries)";

/// Each step's row of a per-key indexer's scores [B, S, S] (row = the query's position), as a
/// ranking [B, 1, 1, T, S] shared by every head.
at::Tensor stepScores(const Prepared& p, const at::Tensor& scores) {
    if (scores.dim() != 3 || scores.size(0) != p.B || scores.size(2) != p.S ||
        scores.size(1) != p.S)
        fail("indexer: index_scores must be [B, S, S] = [" + std::to_string(p.B) + ", " +
             std::to_string(p.S) + ", " + std::to_string(p.S) + "], got " + shapeOf(scores));
    const at::Tensor pos = stepPositions(p);
    const at::Tensor rows =
        scores.to(at::kFloat).gather(1, pos.clamp_min(0).unsqueeze(-1).expand({p.B, p.T, p.S}));
    if (!at::isfinite(rows.masked_select(p.valid)).all().item<bool>())
        fail(kNotHeld);
    return rows.masked_fill(p.valid.logical_not(), -std::numeric_limits<float>::infinity())
        .view({p.B, 1, 1, p.T, p.S});
}

/// A block indexer (MiniMax-M3): each step's block scores per indexer head, [B, Hi, S, blocks]
/// by position, keep ⌈k / block⌉ blocks with the local ones (attention::keepBlocks, as the model
/// does) for the indexer head's group of query heads. The selection [B, Hkv, g, T, S] and each
/// key's block score per head [B, Hq, T, S] (−inf where not valid).
std::pair<Selection, at::Tensor> blockSelection(const Prepared& p, const at::Tensor& scores,
                                                const AttentionConfig& c) {
    const int64_t bs = c.indexBlock, blocks = blocksForKeys(p.S, bs);
    if (scores.dim() != 4 || scores.size(0) != p.B || scores.size(1) < 1 ||
        p.Hq % scores.size(1) != 0 || scores.size(2) != p.S || scores.size(3) != blocks)
        fail("indexer: a block indexer's index_scores must be [B, Hi, S, ⌈S/" + std::to_string(bs) +
             "⌉] = [" + std::to_string(p.B) + ", Hi, " + std::to_string(p.S) + ", " +
             std::to_string(blocks) + "] with Hi dividing " + std::to_string(p.Hq) +
             " heads, got " + shapeOf(scores));
    if (c.local.value_or(0) > 0)
        fail("indexer: --local does not apply to a block indexer (MiniMax-M3 keeps its own "
             "local blocks, index_local_blocks)");
    const int64_t Hi = scores.size(1);
    const at::Tensor last = stepPositions(p);         // [B, T], −1: a step without keys
    const at::Tensor pos = last.clamp_min(0);         // [B, T]
    const at::Tensor own = at::floor_divide(pos, bs); // each step's own block
    at::Tensor rows =
        scores.to(at::kFloat)
            .gather(
                2, pos.view({p.B, 1, p.T, 1}).expand({p.B, Hi, p.T, blocks})); // [B, Hi, T, blocks]
    // A step's own block has a score wherever the capture holds the step's query.
    const at::Tensor ownScores =
        rows.gather(3, own.view({p.B, 1, p.T, 1}).expand({p.B, Hi, p.T, 1}));
    if (!at::isfinite(ownScores.squeeze(-1).masked_select(last.ge(0).unsqueeze(1)))
             .all()
             .item<bool>())
        fail(kNotHeld);
    // A block without a valid key (after the query, or outside the model's window) is never kept.
    const at::Tensor padded = at::constant_pad_nd(p.valid, {0, blocks * bs - p.S}, 0);
    const at::Tensor seen = padded.view({p.B, 1, p.T, blocks, bs}).any(-1);
    constexpr float kInf = std::numeric_limits<float>::infinity();
    rows = rows.masked_fill(seen.logical_not().logical_or(at::isnan(rows)), -kInf);
    const Selection keep = keepBlocks(rows, own.unsqueeze(1), c.indexLocalBlocks,
                                      blocksForKeys(c.k, bs), /*margins=*/true); // per block
    auto perHead = [&](const at::Tensor& t) { // [B, Hi, T, …] → [B, Hkv, g, T, …]
        std::vector<int64_t> shape{p.B, p.Hkv, p.g, p.T};
        shape.insert(shape.end(), t.sizes().begin() + 3, t.sizes().end());
        return t.repeat_interleave(p.Hq / Hi, 1).view(shape);
    };
    auto perKey = [&](const at::Tensor& t) { // [B, Hi, T, blocks] → [B, Hkv, g, T, S]
        return perHead(t.repeat_interleave(bs, -1).narrow(-1, 0, p.S).contiguous());
    };
    const Selection sel{perKey(keep.mask).logical_and(p.validU()), perHead(keep.margin),
                        perHead(keep.marginRel)};
    const at::Tensor keyScores = perKey(rows).masked_fill(p.invalidU(), -kInf);
    return {sel, keyScores.view({p.B, p.Hq, p.T, p.S})};
}

AttentionResult runIndexer(const Prepared& p, const AttentionInputs& in, const AttentionConfig& c,
                           const AttendOptions& o) {
    const at::Tensor scores = in.input("index_scores");
    if (!scores.defined())
        fail("indexer needs the model's indexer scores: a capture of a model with a learned "
             "selection (DeepSeek-V3.2, GLM-5, MiniMax-M3)");
    const at::Tensor z = exactLogits(p);
    if (c.indexBlock > 0) {
        const auto [sel, keyScores] = blockSelection(p, scores, c);
        // Whole blocks: up to ⌈k / block⌉·block keys (the indices' width).
        AttentionResult r =
            attendSelection(p, z, sel, blocksForKeys(c.k, c.indexBlock) * c.indexBlock, o);
        if (o.keepScores) // each key's block score, per head
            r.zHat = keyScores;
        return r;
    }
    const at::Tensor ranking = stepScores(p, scores);
    const Selection sel = expandUnits(p, selectPositions(p, ranking, c.k, c.effectiveLocal()));
    AttentionResult r = attendSelection(p, z, sel, c.k, o);
    if (o.keepScores) // what it ranks by, per head as the approximate methods' ẑ
        r.zHat = ranking.expand({p.B, p.Hkv, p.g, p.T, p.S}).reshape({p.B, p.Hq, p.T, p.S});
    return r;
}

/// Every position's indexer key (Di), then k keys and values: a block indexer's whole blocks,
/// ⌈k / block⌉·block of them (at most S).
double indexerTransfer(const TransferArgs& a) {
    const int64_t bs = a.config ? a.config->indexBlock : 0;
    const int64_t keys = bs > 0 ? a.positions(blocksForKeys(a.k, bs) * bs) : a.k;
    return static_cast<double>(a.S) * a.param(Param::IndexDim) +
           static_cast<double>(keys) * a.kv() + a.kv();
}

StepOneView indexerStepOne(const StepOneInputs& in) {
    const at::Tensor scores = in.result->zHat; // [1, Hq, S] for the lab's one step
    const at::Tensor selected = in.result->selected;
    const bool both = scores.defined() && selected.defined();
    const bool blocks = in.config && in.config->indexBlock > 0;
    std::string caption =
        "The model's <b>indexer scores</b> of every earlier position "
        "(Σ<sub>h</sub> w<sub>h</sub>·ReLU(q<sub>h</sub>·k)); the k highest are attended";
    if (blocks) {
        const AttentionConfig& c = *in.config;
        const std::string bs = std::to_string(c.indexBlock);
        const std::string local = c.indexLocalBlocks > 1
                                      ? "the query's own and the " +
                                            std::to_string(c.indexLocalBlocks - 1) +
                                            " before it always among them"
                                      : "the query's own always among them";
        caption = "The model's <b>block scores</b>: each block of " + bs +
                  " keys scores its best key's q·k by this head's indexer head; the ⌈k / " + bs +
                  "⌉ = " + std::to_string(blocksForKeys(c.k, c.indexBlock)) +
                  " best blocks are attended (" + local + ")";
    }
    return positionScoresView(caption, blocks ? "block score" : "index score",
                              both ? scores[0][in.head] : at::Tensor(),
                              both ? selected[0][in.head] : at::Tensor());
}

} // namespace
} // namespace sparqlab::attention::detail

SPARQLAB_METHOD(indexer) {
    return {.info = {.id = Method::Indexer,
                     .name = "indexer",
                     .aliases = {"dsa"},
                     .label = "Indexer (learned)",
                     .summary =
                         "the model's own trained selection: the top-k keys by its lightning "
                         "indexer's scores (DeepSeek-V3.2, GLM-5), or the top ⌈k / block⌉ blocks "
                         "of keys by its block indexer's (MiniMax-M3)",
                     .spec = "docs/learned-sparse-and-hybrid.md",
                     .params = {Param::K, Param::Local, Param::IndexDim},
                     .transfer = detail::indexerTransfer,
                     .transferFormula = "S·Di + k·(d + d_v) + (d + d_v)",
                     .evalGrid = "k=32,64,128,256"},
            .run = detail::runIndexer,
            .inputs = {{"index_scores", "[B, S, S] or [B, Hi, S, blocks]",
                        "the scores of the model's trained indexer, one row per query position: "
                        "per key (a capture of a DeepSeek Sparse Attention model, DeepSeek-V3.2 "
                        "or GLM-5, holds them) or per indexer head and block of keys (a capture "
                        "of MiniMax-M3)",
                        /*positions=*/true}},
            .stepOne = detail::indexerStepOne};
}
