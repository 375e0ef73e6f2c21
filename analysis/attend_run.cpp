#include "attend_run.h"

#include "attention/select.h"
#include "attention/transfer.h"
#include "capture/capture_file.h"
#include "capture/h5.h"

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <optional>

namespace sparqlab::analysis {

namespace att = sparqlab::attention;

namespace {

/// Bytes of K (as float32) a chunk of queries may expand to before it is split.
constexpr int64_t kChunkElements = int64_t{1} << 24;

/// Per-layer outputs of one example, stacked later into [L, Hq, T, …].
struct LayerOut {
    at::Tensor y, yDense, indices, alpha, relError;
};

nlohmann::json perHead(const at::Tensor& t) {
    nlohmann::json rows = nlohmann::json::array();
    const at::Tensor c = t.to(at::kDouble).contiguous();
    for (int64_t l = 0; l < c.size(0); ++l) {
        nlohmann::json row = nlohmann::json::array();
        for (int64_t h = 0; h < c.size(1); ++h)
            row.push_back(c[l][h].item<double>());
        rows.push_back(std::move(row));
    }
    return rows;
}

} // namespace

AttendSummary runAttend(const AttendRunOptions& o) {
    const capture::CaptureReader reader(o.capturePath);
    const capture::CaptureInfo& info = reader.info();
    att::AttentionConfig config = o.config;
    const double defaultScale = 1.0 / std::sqrt(static_cast<double>(info.headDim));
    if (std::abs(info.attnScale - defaultScale) > 1e-7 * defaultScale)
        config.scale = info.attnScale;
    config.validateFor(info.headDim);
    int64_t maxS = 0;
    for (int64_t e = 0; e < reader.count(); ++e)
        maxS = std::max(maxS, reader.seqLen(e));
    if (config.method != att::Method::Dense && config.k > maxS)
        throw att::AttentionError(
            o.capturePath + ": k = " + std::to_string(config.k) +
            " exceeds the longest captured sequence (S = " + std::to_string(maxS) + ")");
    const bool h2o = config.method == att::Method::H2O;

    std::optional<h5::File> out;
    if (!o.outPath.empty()) {
        out.emplace(h5::File::create(o.outPath));
        const h5::Group root = out->root();
        root.setAttr("format", kAttendFormat);
        root.setAttr("format_version", kAttendFormatVersion);
        root.setAttr("capture", o.capturePath);
        root.setAttr("method", att::methodName(config.method));
        root.setAttr("r", config.r);
        root.setAttr("k", config.k);
        root.setAttr("local", config.effectiveLocal());
        root.setAttr("tau", att::tauName(config.tau, config.tauValue));
        root.setAttr("gqa", att::groupSelectName(config.gqa));
        root.setAttr("mean_value", static_cast<int64_t>(config.meanValue));
        root.createGroup("examples");
    }

    const int64_t L = info.nLayers, Hq = info.nHeads, Hkv = info.nKvHeads, D = info.headDim;
    const int64_t g = Hq / Hkv;
    at::Tensor relSum = at::zeros({L, Hq}, at::kDouble);
    at::Tensor agreeSum = at::zeros({L, Hq}, at::kDouble);
    at::Tensor alphaSum = at::zeros({L, Hq}, at::kDouble);
    double movedMethod = 0, movedDense = 0;
    AttendSummary summary;
    summary.examples = reader.count();
    const int64_t total = reader.count() * L;
    int64_t done = 0;

    for (int64_t e = 0; e < reader.count(); ++e) {
        std::vector<LayerOut> layers;
        int64_t T = 0;
        for (int64_t l = 0; l < L; ++l) {
            if (o.cancel && o.cancel->load())
                throw Cancelled();
            const capture::CaptureExample ex = reader.readLayer(e, l);
            const int64_t S = ex.k.size(1);
            T = ex.qPositions.numel();
            const at::Tensor pos = ex.qPositions;
            if (h2o && !pos.equal(at::arange(T, pos.options())))
                throw att::AttentionError(o.capturePath +
                                          ": h2o needs the queries of every position (a capture "
                                          "made with --all-queries)");
            const int64_t chunk = std::max<int64_t>(1, kChunkElements / (Hkv * S * D));
            // Attention errors (e.g. NaN in the capture) name the file, example and layer.
            auto attendAt = [&](const att::AttentionInputs& x, const att::AttentionConfig& c,
                                const att::AttendOptions& opt, int64_t layer) {
                try {
                    return att::attend(x, c, opt);
                } catch (const att::AttentionError& err) {
                    throw att::AttentionError(o.capturePath + ": example " + reader.name(e) +
                                              ", layer " + std::to_string(layer) + ": " +
                                              err.what());
                }
            };
            std::vector<at::Tensor> ys, yds, idx, alphas, rels;
            at::Tensor accRunning = at::zeros({1, Hkv, S}, at::kFloat);
            for (int64_t t0 = 0; t0 < T; t0 += chunk) {
                const int64_t c = std::min(chunk, T - t0);
                const at::Tensor p = pos.slice(0, t0, t0 + c);
                att::AttentionInputs in;
                in.q = ex.q.slice(1, t0, t0 + c).permute({1, 0, 2}); // [c, Hq, D]
                in.k = ex.k.unsqueeze(0).expand({c, Hkv, S, D});
                in.v = ex.v.unsqueeze(0).expand({c, Hkv, S, D});
                in.valid = at::arange(S, at::kLong).unsqueeze(0).le(p.unsqueeze(1));
                att::AttentionConfig denseCfg;
                denseCfg.scale = config.scale;
                att::AttendOptions keep;
                keep.keepScores = true;
                const att::AttentionResult dense = attendAt(in, denseCfg, keep, l);
                if (h2o) {
                    // Accumulated attention of the earlier queries (SPARQ.md §4.4.1).
                    const at::Tensor w = dense.probs.view({c, Hkv, g, S}).mean(2);
                    const at::Tensor incl = w.cumsum(0);
                    in.acc = accRunning + incl - w;
                    accRunning = accRunning + incl[c - 1].unsqueeze(0);
                }
                const att::AttentionResult res =
                    config.method == att::Method::Dense ? dense : attendAt(in, config, {}, l);
                // Agreement with the exact top-|I| by logits, per query head.
                const at::Tensor n = res.selected.sum(-1);
                const at::Tensor exactTop = att::select(dense.logits, in.valid.unsqueeze(1),
                                                        at::zeros_like(res.selected), n)
                                                .mask;
                const at::Tensor agree =
                    exactTop.logical_and(res.selected).sum(-1).to(at::kDouble) / n.to(at::kDouble);
                const at::Tensor rel = (res.y - dense.y).norm(2, -1) / dense.y.norm(2, -1);
                ys.push_back(res.y.permute({1, 0, 2}));
                yds.push_back(dense.y.permute({1, 0, 2}));
                idx.push_back(res.indices.permute({1, 0, 2}));
                alphas.push_back(res.alpha.transpose(0, 1));
                rels.push_back(rel.transpose(0, 1));
                relSum[l].add_(rel.to(at::kDouble).sum(0));
                agreeSum[l].add_(agree.sum(0));
                alphaSum[l].add_(res.alpha.to(at::kDouble).sum(0));
                const at::Tensor pc = p.contiguous();
                for (int64_t i = 0; i < c; ++i) {
                    const int64_t nv = pc[i].item<int64_t>() + 1;
                    movedMethod += static_cast<double>(
                        att::transferCount(config.method, nv, D, config.k, config.r));
                    movedDense += static_cast<double>(
                        att::transferCount(att::Method::Dense, nv, D, config.k, config.r));
                }
            }
            layers.push_back({at::cat(ys, 1), at::cat(yds, 1), at::cat(idx, 1), at::cat(alphas, 1),
                              at::cat(rels, 1)});
            if (o.progress)
                o.progress(++done, total);
        }
        summary.queries += T;
        if (out) {
            auto stack = [&](at::Tensor LayerOut::*field) {
                std::vector<at::Tensor> parts;
                for (const LayerOut& lo : layers)
                    parts.push_back(lo.*field);
                return at::stack(parts, 0).contiguous();
            };
            const h5::Group grp = out->root().group("examples").createGroup(reader.name(e));
            grp.write("y", stack(&LayerOut::y).to(at::kFloat));
            grp.write("y_dense", stack(&LayerOut::yDense).to(at::kFloat));
            grp.write("indices", stack(&LayerOut::indices).to(at::kLong));
            grp.write("alpha", stack(&LayerOut::alpha).to(at::kFloat));
            grp.write("rel_error", stack(&LayerOut::relError).to(at::kFloat));
        }
    }
    const double nq = static_cast<double>(std::max<int64_t>(summary.queries, 1));
    summary.relErrorPerHead = relSum / nq;
    summary.agreementPerHead = agreeSum / nq;
    summary.alphaPerHead = alphaSum / nq;
    summary.relError = summary.relErrorPerHead.mean().item<double>();
    summary.agreement = summary.agreementPerHead.mean().item<double>();
    summary.compressionRatio = movedDense > 0 ? movedMethod / movedDense : 1.0;
    if (out)
        out->commit();
    return summary;
}

std::string attendSummaryJson(const AttendSummary& s, const att::AttentionConfig& c) {
    nlohmann::json j;
    j["format"] = "sparqlab.attend.summary";
    j["format_version"] = 1;
    j["method"] = att::methodName(c.method);
    j["r"] = c.r;
    j["k"] = c.k;
    j["local"] = c.effectiveLocal();
    j["tau"] = att::tauName(c.tau, c.tauValue);
    j["gqa"] = att::groupSelectName(c.gqa);
    j["mean_value"] = c.meanValue;
    j["examples"] = s.examples;
    j["queries"] = s.queries;
    j["rel_error"] = {{"mean", s.relError}, {"per_head", perHead(s.relErrorPerHead)}};
    j["topk_agreement"] = {{"mean", s.agreement}, {"per_head", perHead(s.agreementPerHead)}};
    j["alpha"] = {{"mean", s.alphaPerHead.mean().item<double>()},
                  {"per_head", perHead(s.alphaPerHead)}};
    j["compression_ratio"] = s.compressionRatio;
    return j.dump(2);
}

} // namespace sparqlab::analysis
