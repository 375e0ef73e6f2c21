// The model's own learned selection (DeepSeek Sparse Attention's lightning indexer: DeepSeek-V3.2,
// GLM-5; docs/learned-sparse-and-hybrid.md): each step attends exactly, renormalised, to the k
// valid positions its query's indexer scores rank highest — the model's trained indexer beside
// the training-free methods, at any k. The scores come from a capture of a DSA model
// (index_scores: one row per query position). At the model's index_topk this is the model's own
// attention (HF's index-masked eager kernel).

#include "attention/method_kit.h"

#include <ATen/ATen.h>

namespace sparqlab::attention::detail {
namespace {

/// Each step's row of the indexer scores [B, S, S] (row = the query's position: its last valid
/// key), as a ranking [B, 1, 1, T, S] shared by every head.
at::Tensor stepScores(const Prepared& p, const AttentionInputs& in) {
    const at::Tensor scores = in.input("index_scores");
    if (!scores.defined())
        fail("indexer needs the model's indexer scores: a capture of a DeepSeek Sparse Attention "
             "model (DeepSeek-V3.2, GLM-5)");
    if (scores.dim() != 3 || scores.size(0) != p.B || scores.size(2) != p.S ||
        scores.size(1) != p.S)
        fail("indexer: index_scores must be [B, S, S] = [" + std::to_string(p.B) + ", " +
             std::to_string(p.S) + ", " + std::to_string(p.S) + "], got " + shapeOf(scores));
    const at::Tensor at = at::arange(p.S, at::kLong).view({1, 1, p.S});
    const at::Tensor pos = at::where(p.valid, at, at::full_like(at, -1)).amax(-1); // [B, T]
    const at::Tensor rows =
        scores.to(at::kFloat).gather(1, pos.clamp_min(0).unsqueeze(-1).expand({p.B, p.T, p.S}));
    if (!at::isfinite(rows.masked_select(p.valid)).all().item<bool>())
        fail("indexer: the capture holds no indexer scores for a step's query (capture the "
             "positions it runs, e.g. with --all-queries)");
    return rows.masked_fill(p.valid.logical_not(), -std::numeric_limits<float>::infinity())
        .view({p.B, 1, 1, p.T, p.S});
}

AttentionResult runIndexer(const Prepared& p, const AttentionInputs& in, const AttentionConfig& c,
                           const AttendOptions& o) {
    const at::Tensor z = exactLogits(p);
    const at::Tensor scores = stepScores(p, in);
    const Selection sel = expandUnits(p, selectPositions(p, scores, c.k, c.effectiveLocal()));
    AttentionResult r = attendSelection(p, z, sel, c.k, o);
    if (o.keepScores) // what it ranks by, per head as the approximate methods' ẑ
        r.zHat = scores.expand({p.B, p.Hkv, p.g, p.T, p.S}).reshape({p.B, p.Hq, p.T, p.S});
    return r;
}

/// Every position's indexer key (Di), then k keys and values.
double indexerTransfer(const TransferArgs& a) {
    return static_cast<double>(a.S) * a.param(Param::IndexDim) + static_cast<double>(a.k) * a.kv() +
           a.kv();
}

StepOneView indexerStepOne(const StepOneInputs& in) {
    const at::Tensor scores = in.result->zHat; // [1, Hq, S] for the lab's one step
    const at::Tensor selected = in.result->selected;
    const bool both = scores.defined() && selected.defined();
    return positionScoresView("The model's <b>indexer scores</b> of every earlier position "
                              "(Σ<sub>h</sub> w<sub>h</sub>·ReLU(q<sub>h</sub>·k)); the k highest "
                              "are attended",
                              "index score", both ? scores[0][in.head] : at::Tensor(),
                              both ? selected[0][in.head] : at::Tensor());
}

} // namespace
} // namespace sparqlab::attention::detail

SPARQLAB_METHOD(indexer) {
    return {.info = {.id = Method::Indexer,
                     .name = "indexer",
                     .aliases = {"dsa"},
                     .label = "Indexer (DSA)",
                     .summary =
                         "the model's own trained selection: the top-k keys by its lightning "
                         "indexer's scores (DeepSeek-V3.2, GLM-5)",
                     .spec = "docs/learned-sparse-and-hybrid.md",
                     .params = {Param::K, Param::Local, Param::IndexDim},
                     .transfer = detail::indexerTransfer,
                     .transferFormula = "S·Di + k·(d + d_v) + (d + d_v)",
                     .evalGrid = "k=32,64,128,256"},
            .run = detail::runIndexer,
            .inputs = {{"index_scores", "[B, S, S]",
                        "the scores of the model's trained indexer, one row per query position "
                        "(a capture of a DeepSeek Sparse Attention model, DeepSeek-V3.2 or GLM-5, "
                        "holds them)"}},
            .stepOne = detail::indexerStepOne};
}
