#include "selection_overlap.h"

#include "analysis/compressed_keys.h"
#include "analysis/lab.h"
#include "attention/causal.h"
#include "attention/method_table.h"
#include "attention/select.h"
#include "capture/capture_file.h"

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <map>

namespace sparqlab::analysis {

namespace att = sparqlab::attention;

namespace {

/// One method's steps on one layer: its chosen sets [Hq, n, S], outputs [Hq, n, Dv], the dense
/// reference's probabilities and outputs (the last n captured queries).
struct Steps {
    at::Tensor selected, y, probs, yDense;
};

Steps runSteps(const model::CaptureExample& ex, const model::CaptureInfo& info, int64_t layer,
               const att::AttentionConfig& config, int64_t n) {
    const int64_t T = ex.qPositions.numel();
    att::CausalInputs in;
    in.q = ex.q.unsqueeze(0);
    in.k = ex.k.unsqueeze(0);
    in.v = ex.v.unsqueeze(0);
    for (int64_t t = 0; t < T; ++t)
        in.positions.push_back(ex.qPositions[t].item<int64_t>());
    in.firstStep = T - n;
    if (ex.indexScores.defined())
        in.extra["index_scores"] = ex.indexScoresByPosition(0);
    att::CausalOptions co;
    co.withDense = true;
    co.denseMods = info.layerConfig(layer);
    std::vector<at::Tensor> sel, y, p, yd;
    co.onChunk = [&](int64_t, int64_t, const att::AttentionResult& r,
                     const att::AttentionResult* dense) {
        sel.push_back(r.selected[0]);
        y.push_back(r.y[0]);
        p.push_back(dense->probs[0]);
        yd.push_back(dense->y[0]);
    };
    att::runCausal(in, info.layerConfig(layer, config), nullptr, co);
    return {at::cat(sel, 1), at::cat(y, 1), at::cat(p, 1), at::cat(yd, 1)};
}

/// runSteps on a DeepSeek-V4 capture's layer (compressed_keys.h): `config`'s method over the
/// keys `valid` marks (the entries and positions each query sees, or the model's own set), with
/// `dense` (the layer's dense steps, undefined: these are they) beside it.
Steps compressedSteps(const CompressedKeys& ck, const at::Tensor& valid,
                      const model::CaptureInfo& info, int64_t layer,
                      const att::AttentionConfig& config, const Steps& dense = {}) {
    att::AttentionInputs in = ck.steps(0, ck.q.size(2));
    in.valid = valid; // (the keys seen, or the model's own choice)
    att::AttendOptions ao;
    ao.keepScores = !dense.y.defined();
    const att::AttentionResult r = att::attendSteps(in, compressedConfig(info, layer, config), ao);
    if (!dense.y.defined())
        return {r.selected[0], r.y[0], r.probs[0], r.y[0]};
    return {r.selected[0], r.y[0], dense.probs, dense.yDense};
}

/// ‖a − b‖ / ‖b‖ per head and step, averaged.
double relError(const at::Tensor& a, const at::Tensor& b) {
    const at::Tensor d = (a.to(at::kDouble) - b.to(at::kDouble)).norm(2, -1);
    return (d / b.to(at::kDouble).norm(2, -1).clamp_min(1e-30)).mean().item<double>();
}

} // namespace

OverlapResult runOverlap(const OverlapOptions& o) {
    const capture::CaptureReader reader(o.capturePath);
    const model::CaptureInfo& info = reader.info();
    OverlapResult res;
    res.examples = reader.count();
    res.hasIndexer = info.indexHeadDim > 0 ||
                     std::any_of(info.layerEntryIndexed.begin(), info.layerEntryIndexed.end(),
                                 [](int64_t v) { return v != 0; });
    res.indexTopK = info.compressed() ? info.entryTopK : info.indexTopKeys();
    if (o.methods.empty())
        throw att::AttentionError("overlap: no methods to compare");
    if (o.queries < 1)
        throw att::AttentionError("overlap: --queries must be at least 1");
    const int64_t L = info.nLayers;
    // Sums per (layer, method, k), averaged over examples at the end.
    std::map<std::tuple<int64_t, size_t, int64_t>, OverlapRow> sums;
    std::map<std::pair<size_t, int64_t>, at::Tensor> previous; // the previous layer's sets
    const int64_t total = reader.count() * L;
    int64_t done = 0;
    for (int64_t e = 0; e < reader.count(); ++e) {
        previous.clear();
        for (int64_t l = 0; l < L; ++l) {
            o.job.check();
            const model::CaptureExample ex = reader.readLayer(e, l);
            const int64_t T = ex.qPositions.numel();
            const int64_t n = std::min(o.queries, T);
            // DeepSeek-V4: the layer's entries and window's positions, the model's choice among
            // them (every entry it sees but on a CSA layer, whose indexer picks).
            const bool compressed = info.compressed();
            const CompressedKeys ck =
                compressed ? compressedKeys(info, ex, l, n) : CompressedKeys{};
            // The keys there are: positions, or the most a query sees of entries and positions.
            const int64_t S = compressed
                                  ? std::max<int64_t>(1, ck.visible.sum(-1).max().item<int64_t>())
                                  : ex.k.size(1);
            const std::string where = o.capturePath + ": example " + reader.name(e) + ", layer " +
                                      std::to_string(l) + ": ";
            // The indexer's own set at the model's index_topk: the model's attention.
            Steps model;
            const bool dsa = ex.indexScores.defined();
            const bool picks = compressed && info.entryIndexed(l); // a CSA layer
            // Dense attention over every key a query sees, once for every method.
            const Steps dense = compressed ? compressedSteps(ck, ck.visible, info, l, {}) : Steps{};
            if (picks)
                model = compressedSteps(ck, ck.model, info, l, {}, dense);
            if (dsa) {
                att::AttentionConfig c = att::defaultConfig(att::Method::Indexer);
                c.k = std::max<int64_t>(1, info.indexTopKeys());
                model = runSteps(ex, info, l, c, n);
            }
            for (const int64_t k0 : o.ks) {
                const int64_t k = std::min(k0, S);
                // The indexer's own set at this k, once for every method compared with it.
                Steps indexerAtK;
                if (dsa) {
                    att::AttentionConfig ic = att::defaultConfig(att::Method::Indexer);
                    ic.k = k;
                    try {
                        indexerAtK = runSteps(ex, info, l, ic, n);
                    } catch (const att::AttentionError& err) {
                        throw att::AttentionError(where + err.what());
                    }
                }
                for (size_t m = 0; m < o.methods.size(); ++m) {
                    att::AttentionConfig c = o.methods[m];
                    c.k = k;
                    Steps s;
                    try {
                        s = compressed ? compressedSteps(ck, ck.visible, info, l, c, dense)
                            : dsa && c.method == att::Method::Indexer && !c.local
                                ? indexerAtK // the same run
                                : runSteps(ex, info, l, c, n);
                    } catch (const att::AttentionError& err) {
                        throw att::AttentionError(where + err.what());
                    }
                    OverlapRow& row = sums[{l, m, k0}];
                    row.layer = l;
                    row.modelLayer = info.modelLayer(l);
                    row.method = att::methodInfo(c.method).name;
                    row.k = k;
                    const at::Tensor count = s.selected.sum(-1).to(at::kDouble).clamp_min(1);
                    row.hasIndexer = dsa || picks;
                    if (compressed) {
                        row.compressRate = info.compressRate(l);
                        row.entriesSeen =
                            ck.visible[0][n - 1].narrow(0, 0, ck.entries).sum().item<int64_t>();
                    }
                    if (picks) // the model's own set: the indexer's entries and the window
                        row.indexerOverlap +=
                            (s.selected.logical_and(ck.model).sum(-1).to(at::kDouble) /
                             ck.model.sum(-1).to(at::kDouble).clamp_min(1))
                                .mean()
                                .item<double>();
                    if (dsa) // the indexer's set at the same k is the same for every head
                        row.indexerOverlap +=
                            (s.selected.logical_and(indexerAtK.selected).sum(-1).to(at::kDouble) /
                             indexerAtK.selected.sum(-1).to(at::kDouble).clamp_min(1))
                                .mean()
                                .item<double>();
                    // The exact top-|A| per head and step by attention.
                    const at::Tensor valid = s.probs.gt(0);
                    const at::Tensor top =
                        att::select(s.probs.log(), valid, at::zeros_like(s.selected),
                                    s.selected.sum(-1))
                            .mask;
                    row.topkRecall += (top.logical_and(s.selected).sum(-1).to(at::kDouble) / count)
                                          .mean()
                                          .item<double>();
                    row.mass +=
                        (s.probs.to(at::kDouble) * s.selected).sum(-1).mean().item<double>();
                    row.relErrorDense += relError(s.y, s.yDense);
                    if (dsa || picks)
                        row.relErrorModel += relError(s.y, model.y);
                    // Transfers at the last step's length (DeepSeek-V4: the keys it sees, each
                    // its value).
                    const int64_t seen = compressed ? ck.visible[0][n - 1].sum().item<int64_t>()
                                                    : ex.qPositions[T - 1].item<int64_t>() + 1;
                    const att::AttentionConfig lc =
                        compressed ? compressedConfig(info, l, c) : info.layerConfig(l, c);
                    const double mean = count.mean().item<double>();
                    const att::TransferArgs a = info.transferArgs(lc, seen, mean);
                    row.transfer += att::transferElements(lc.method, a); // as the layer runs
                    row.transferDense += att::transferElements(att::Method::Dense, a);
                    const at::Tensor set = layerKeySet(s.selected, k);
                    const auto key = std::make_pair(m, k0);
                    // (DeepSeek-V4's layers have entries of their own: their sets differ in kind.)
                    row.hasPrevious = previous.count(key) > 0 && !compressed;
                    if (row.hasPrevious)
                        row.previousLayerOverlap +=
                            (set.logical_and(previous[key]).sum(-1).to(at::kDouble) /
                             set.sum(-1).to(at::kDouble).clamp_min(1))
                                .mean()
                                .item<double>();
                    previous[key] = set;
                }
            }
            if (e == 0 && l == 0)
                res.queries = n; // per example (the last N, or all it holds)
            o.job.step(++done, total, "layer " + std::to_string(l));
        }
    }
    // Means over the examples.
    const double E = static_cast<double>(reader.count());
    for (auto& [key, row] : sums) {
        for (double* v :
             {&row.indexerOverlap, &row.topkRecall, &row.mass, &row.relErrorDense,
              &row.relErrorModel, &row.transfer, &row.transferDense, &row.previousLayerOverlap})
            *v /= E;
        res.rows.push_back(row);
    }
    return res;
}

at::Tensor layerKeySet(const at::Tensor& selected, int64_t k) {
    const at::Tensor votes = selected.sum(0).to(at::kDouble); // [n, S]
    const int64_t S = votes.size(-1);
    // Earlier positions win ties: a tiny tie-break below one vote.
    const at::Tensor tie = at::arange(S, at::kDouble).neg() / static_cast<double>(S + 1);
    const at::Tensor top = std::get<1>(at::topk(votes + tie, std::min(k, S), -1));
    at::Tensor set = at::zeros_like(votes, at::kBool).scatter_(1, top, true);
    return set.logical_and(votes.gt(0));
}

LayerReuse layerReuse(const LabCapture& c, const att::AttentionConfig& method) {
    LayerReuse out;
    const int64_t L = c.layers(), S = c.positions();
    out.positions = S;
    out.k = std::min(method.k, S);
    out.otherLayers = c.info.uncapturedKinds();
    std::vector<att::AttentionConfig> configs;
    att::AttentionConfig exact = att::defaultConfig(att::Method::Oracle);
    exact.k = out.k;
    exact.gqa = att::GroupSelect::PerHead; // each head's own exact top-k
    configs.push_back(exact);
    out.series.push_back({"exact top-k", {}, {}});
    if (method.method != att::Method::Oracle && method.method != att::Method::Indexer) {
        configs.push_back(method);
        out.series.push_back({att::methodInfo(method.method).label, {}, {}});
    }
    if (!c.indexScores.empty()) {
        att::AttentionConfig ix = att::defaultConfig(att::Method::Indexer);
        ix.k = out.k;
        configs.push_back(ix);
        out.series.push_back({att::methodInfo(att::Method::Indexer).label, {}, {}});
    }
    std::vector<at::Tensor> previous(configs.size());
    for (int64_t l = 0; l < L; ++l) {
        out.modelLayers.push_back(c.info.modelLayer(l));
        for (size_t m = 0; m < configs.size(); ++m) {
            LayerReuse::Series& s = out.series[m];
            if (c.compressedLayer(l)) {
                // DeepSeek-V4: its keys are entries and positions, no set to compare with
                // another layer's; the mass over them where the method runs there.
                double mass = std::nan("");
                if (att::positionFreeProblem(configs[m].method).empty()) {
                    const auto [r, dense] = layerStep(c, l, configs[m]);
                    mass = (dense.probs[0].to(at::kDouble) * r.selected[0])
                               .sum(-1)
                               .mean()
                               .item<double>();
                }
                s.mass.push_back(mass);
                s.overlap.push_back(std::nan(""));
                previous[m] = at::Tensor();
                if (m == 0)
                    out.entryLayers.push_back(l);
                continue;
            }
            const auto [r, dense] = layerStep(c, l, configs[m]);
            const at::Tensor sel = r.selected[0].unsqueeze(1); // [Hq, 1, S]
            const at::Tensor set = layerKeySet(sel, out.k);    // [1, S]
            s.mass.push_back(
                (dense.probs[0].to(at::kDouble) * r.selected[0]).sum(-1).mean().item<double>());
            s.overlap.push_back(previous[m].defined()
                                    ? set.logical_and(previous[m]).sum().item<double>() /
                                          std::max(1.0, set.sum().item<double>())
                                    : std::nan(""));
            previous[m] = set;
        }
    }
    return out;
}

std::string overlapJson(const OverlapResult& r, const OverlapOptions& o) {
    nlohmann::json j;
    j["format"] = "sparqlab.overlap";
    j["format_version"] = 1;
    j["capture"] = o.capturePath;
    j["examples"] = r.examples;
    j["queries_per_example"] = r.queries;
    j["indexer"] = r.hasIndexer;
    if (r.hasIndexer)
        j["index_topk"] = r.indexTopK;
    nlohmann::json rows = nlohmann::json::array();
    for (const OverlapRow& x : r.rows) {
        nlohmann::json row{{"layer", x.layer},
                           {"model_layer", x.modelLayer},
                           {"method", x.method},
                           {"k", x.k},
                           {"topk_recall", x.topkRecall},
                           {"mass", x.mass},
                           {"rel_error_dense", x.relErrorDense},
                           {"transfer_per_step", x.transfer},
                           {"dense_transfer_per_step", x.transferDense},
                           {"compression", x.transferDense > 0 ? x.transfer / x.transferDense : 0}};
        if (x.hasIndexer) {
            row["indexer_overlap"] = x.indexerOverlap;
            row["rel_error_model"] = x.relErrorModel;
        }
        if (x.hasPrevious)
            row["previous_layer_overlap"] = x.previousLayerOverlap;
        if (x.compressRate >= 0) {
            row["compress_rate"] = x.compressRate;
            row["entries_seen"] = x.entriesSeen;
        }
        rows.push_back(row);
    }
    j["rows"] = rows;
    return j.dump(1);
}

} // namespace sparqlab::analysis
