#include "attend_run.h"

#include "analysis/calibrate_run.h"
#include "analysis/compressed_keys.h"

#include "attention/budget_stats.h"
#include "attention/causal.h"
#include "attention/method_spec.h"
#include "attention/select.h"
#include "capture/capture_file.h"
#include "capture/h5.h"

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <filesystem>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <optional>

namespace sparqlab::analysis {

namespace att = sparqlab::attention;

namespace {

/// Elements of [T, S] scores a chunk of queries may take before it is split.
constexpr int64_t kChunkElements = int64_t{1} << 24;

/// Per-step outputs of one (example, layer), [Hq, T, …], stacked later into [L, Hq, T, …].
struct LayerOut {
    at::Tensor y, yDense, indices, alpha, relError, count, mass, probs;
    std::map<std::string, at::Tensor> extra; ///< the method's own outputs [Hq, T, …]
};

/// Tensors joined along `dim`, a shorter last axis padded (−1 for integers, NaN otherwise).
at::Tensor joinPadded(std::vector<at::Tensor> parts, int64_t dim, bool stack) {
    int64_t width = 0;
    for (const at::Tensor& t : parts)
        width = std::max<int64_t>(width, t.dim() > 2 ? t.size(-1) : 0);
    for (at::Tensor& t : parts)
        if (t.dim() > 2 && t.size(-1) < width)
            t = at::constant_pad_nd(t, {0, width - t.size(-1)},
                                    at::isFloatingType(t.scalar_type()) ? NAN : -1.0);
    return stack ? at::stack(parts, dim) : at::cat(parts, dim);
}

/// −1-padded index lists to a common width.
at::Tensor padIndices(const at::Tensor& idx, int64_t width) {
    if (idx.size(-1) >= width)
        return idx;
    return at::constant_pad_nd(idx, {0, width - idx.size(-1)}, -1);
}

/// The exact top-|I| of each step and head (by the model's logits) against the set I:
/// |I ∩ T| / |I| (METHODS.md §9.2). selected, logits [1, Hq, T, S]; valid [1, T, S].
at::Tensor recallOf(const at::Tensor& selected, const at::Tensor& logits, const at::Tensor& valid) {
    const at::Tensor n = selected.sum(-1);
    const at::Tensor top =
        att::select(logits, valid.unsqueeze(1), at::zeros_like(selected), n).mask;
    return top.logical_and(selected).sum(-1).to(at::kDouble) / n.clamp_min(1).to(at::kDouble);
}

} // namespace

std::map<std::string, at::Tensor> readMethodInputs(const std::string& path, att::Method m) {
    const att::MethodSpec& spec = att::methodSpec(m);
    const h5::File f = h5::File::openRead(path);
    const h5::Group root = f.root();
    std::string names;
    for (const att::MethodInput& i : spec.inputs)
        names += (names.empty() ? "" : ", ") + std::string(i.name);
    if (!root.has("inputs"))
        throw att::AttentionError(path + ": no 'inputs' group (an --inputs file holds " +
                                  "inputs/<name> datasets; " + spec.info.name + " reads " +
                                  (names.empty() ? std::string("none") : names) + ")");
    std::map<std::string, at::Tensor> out;
    const h5::Group g = root.group("inputs");
    for (const std::string& name : g.children()) {
        const bool known = std::any_of(spec.inputs.begin(), spec.inputs.end(),
                                       [&](const att::MethodInput& i) { return name == i.name; });
        if (!known)
            throw att::AttentionError(path + ": 'inputs/" + name + "' is not an input of " +
                                      spec.info.name + " (it reads " +
                                      (names.empty() ? std::string("none") : names) + ")");
        out[name] = g.read(name);
    }
    return out;
}

namespace {

std::vector<int64_t> positions(const at::Tensor& t) {
    const at::Tensor c = t.to(at::kLong).contiguous();
    return std::vector<int64_t>(c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel());
}

} // namespace

AttendSummary runAttend(const AttendRunOptions& o) {
    const capture::CaptureReader reader(o.capturePath);
    const model::CaptureInfo& info = reader.info();
    att::AttentionConfig config = o.config;
    const att::MethodInfo& method = att::methodInfo(config.method);
    config.validateFor(info.headDim, info.nLayers, info.nHeads, info.nKvHeads);
    // The model's indexer keys' dimension (a DSA capture), unless given: what the result file
    // records and the transfer counts.
    if (info.indexHeadDim > 0 && !config.given(att::Param::IndexDim))
        config.values[att::Param::IndexDim] = static_cast<double>(info.indexHeadDim);
    int64_t shortest = 0;
    for (int64_t e = 0; e < reader.count(); ++e)
        shortest = e == 0 ? reader.seqLen(e) : std::min(shortest, reader.seqLen(e));
    const std::vector<std::string> fitted = att::fitDefaults(
        config, shortest, {info.headDim, info.nLayers, info.nHeads, info.nKvHeads});
    if (method.calibrated && !config.calibration)
        throw att::AttentionError(calibrationOption(config.method) + ": " + method.name +
                                  " needs a calibration file (sparqlab-cli calibrate)");
    for (int64_t l = 0; o.probs && info.compressed() && l < info.nLayers; ++l)
        if (info.compressRate(l) > 0)
            throw att::AttentionError(o.capturePath +
                                      ": --probs writes attention over positions, and this "
                                      "capture's DeepSeek-V4 layers attend compressed entries "
                                      "beside them (sparqlab-cli overlap reads both)");
    const att::MethodSpec& spec = att::methodSpec(config.method);
    const bool lastOnly = method.stateful && spec.causal->lastStepOnly;
    const std::map<std::string, at::Tensor> inputs =
        o.inputsPath.empty() ? std::map<std::string, at::Tensor>{}
                             : readMethodInputs(o.inputsPath, config.method);

    std::optional<h5::File> out;
    if (!o.outPath.empty()) {
        out.emplace(h5::File::create(o.outPath));
        const h5::Group root = out->root();
        root.setAttr("format", kAttendFormat);
        root.setAttr("format_version", kAttendFormatVersion);
        root.setAttr("capture", o.capturePath);
        root.setAttr("method", method.name);
        // Every parameter of the table under its option's name (CONTRACTS.md §6), as in
        // effect, the method's own and SparQ's of version 1 alike; `params_used` names the
        // method's own (h2o's r and tau are version 1's, not parameters it used).
        std::string usedNames;
        for (const att::ParamInfo& p : att::parameters()) {
            const bool own = att::takes(config.method, p.id);
            const bool v1 = p.id == att::Param::R || p.id == att::Param::K ||
                            p.id == att::Param::Local || p.id == att::Param::Tau ||
                            p.id == att::Param::Gqa || p.id == att::Param::MeanValue;
            if (!own && !v1)
                continue;
            if (own)
                usedNames += (usedNames.empty() ? "" : ",") + std::string(p.attribute);
            const std::string v = att::paramValueInEffect(config, p.id);
            if ((p.kind == att::ParamKind::Integer || p.kind == att::ParamKind::Flag) &&
                v != "none")
                root.setAttr(p.attribute, static_cast<int64_t>(std::stoll(v)));
            else if (p.kind == att::ParamKind::Number)
                root.setAttr(p.attribute, std::stod(v));
            else
                root.setAttr(p.attribute, v);
        }
        root.setAttr("params_used", usedNames);
        // What the method drew for itself (MagicPIG's hyperplanes), to repeat the run.
        // The method's inputs: the ones given, or what it drew for itself (MagicPIG's
        // hyperplanes) — `--inputs res.h5` repeats the run.
        const std::map<std::string, at::Tensor> used =
            inputs.empty() && spec.ownInputs ? spec.ownInputs(config, info.headDim) : inputs;
        if (!used.empty()) {
            const h5::Group g = root.createGroup("inputs");
            for (const auto& [name, t] : used)
                g.write(name, t.contiguous());
        }
        root.createGroup("examples");
    }

    const int64_t L = info.nLayers, Hq = info.nHeads;
    at::Tensor relSum = at::zeros({L, Hq}, at::kDouble);
    at::Tensor recallSum = at::zeros({L, Hq}, at::kDouble);
    at::Tensor alphaSum = at::zeros({L, Hq}, at::kDouble);
    at::Tensor countSum = at::zeros({L, Hq}, at::kDouble);
    at::Tensor massSum = at::zeros({L, Hq}, at::kDouble);
    double movedMethod = 0, movedDense = 0, positionsSum = 0;
    AttendSummary summary;
    summary.examples = reader.count();
    summary.config = config;
    summary.fitted = fitted;
    summary.groupSize = info.nKvHeads > 0 ? info.nHeads / info.nKvHeads : 1;
    const int64_t total = reader.count() * L;
    int64_t done = 0;

    // DeepSeek-V4's layers with compressed entries (capture format 6): methods run over the
    // entries and the positions each query sees.
    auto entryLayer = [&](int64_t l) { return info.compressed() && info.compressRate(l) > 0; };
    for (int64_t e = 0; e < reader.count(); ++e) {
        std::vector<LayerOut> layers;
        std::vector<int64_t> entries(static_cast<size_t>(L), 0); // C_l: keys before positions
        int64_t Tout = 0;
        for (int64_t l = 0; l < L; ++l) {
            o.job.check();
            const model::CaptureExample ex = reader.readLayer(e, l);
            const int64_t S = ex.k.size(1);
            const int64_t T = ex.qPositions.numel();
            const std::string where =
                o.capturePath + ": example " + reader.name(e) +
                (o.inputsPath.empty() ? std::string() : " (inputs " + o.inputsPath + ")");
            // Attention errors (e.g. NaN in the capture) name the file, example and layer.
            auto named = [&](auto&& fn) {
                try {
                    return fn();
                } catch (const att::AttentionError& err) {
                    throw att::AttentionError(where + ", layer " + std::to_string(l) + ": " +
                                              err.what());
                }
            };
            // The steps: every captured query (SnapKV: the last one, its window before it).
            att::CausalInputs in;
            in.q = ex.q.unsqueeze(0); // [1, Hq, T, D]
            in.positions = positions(ex.qPositions);
            in.k = ex.k.unsqueeze(0);
            in.v = ex.v.unsqueeze(0);
            in.firstStep = lastOnly ? T - 1 : 0;
            in.extra = inputs;
            // The model's indexer scores (DSA, MiniMax-M3), for the method that reads them (the
            // model's own selection).
            if (ex.indexScores.defined() && !in.extra.count("index_scores") &&
                std::any_of(spec.inputs.begin(), spec.inputs.end(), [](const att::MethodInput& i) {
                    return std::string(i.name) == "index_scores";
                }))
                in.extra["index_scores"] = ex.indexScoresByPosition(0);
            const std::vector<int64_t>& pos = in.positions;
            std::vector<at::Tensor> ys, yds, idx, alphas, rels, counts, masses, recalls, probs;
            std::map<std::string, std::vector<at::Tensor>> extras;
            int64_t width = 1;
            att::CausalOptions co;
            co.withDense = true;
            co.denseMods = info.layerConfig(l);
            co.chunkElements = kChunkElements;
            // Steps t0 … t0 + c − 1 of the method (`res`) and of dense attention, [1, Hq, c, …],
            // over keys each sees as `valid` [1, c, keys] marks, the method's reads counted as
            // `lc` runs with the arguments `argsAt(i, count)` of step t0 + i.
            auto collect = [&](int64_t t0, int64_t c, const att::AttentionResult& res,
                               const att::AttentionResult* dense, const at::Tensor& valid,
                               const att::AttentionConfig& lc,
                               const std::function<att::TransferArgs(int64_t, double)>& argsAt) {
                const at::Tensor selected = res.selected; // [1, Hq, c, keys]
                const at::Tensor count = selected.sum(-1);
                at::Tensor mass = (dense->probs * selected).sum(-1);
                if (co.denseMods.sinks.defined()) // the sink, always kept (its share of dense)
                    mass = mass + (1 - dense->probs.sum(-1)).clamp_min(0);
                if (o.probs)
                    probs.push_back(dense->probs[0].to(at::kFloat));
                const at::Tensor recall = recallOf(selected, dense->logits, valid);
                const at::Tensor rel = (res.y - dense->y).norm(2, -1) / dense->y.norm(2, -1);
                width = std::max(width, res.indices.size(-1));
                ys.push_back(res.y[0]);
                yds.push_back(dense->y[0]);
                idx.push_back(res.indices[0]);
                alphas.push_back(res.alpha[0]);
                rels.push_back(rel[0]);
                counts.push_back(count[0]);
                masses.push_back(mass[0]);
                recalls.push_back(recall[0]);
                relSum[l].add_(rel[0].to(at::kDouble).sum(-1));
                recallSum[l].add_(recall[0].sum(-1));
                alphaSum[l].add_(res.alpha[0].to(at::kDouble).sum(-1));
                countSum[l].add_(count[0].to(at::kDouble).sum(-1));
                massSum[l].add_(mass[0].to(at::kDouble).sum(-1));
                // Transfers (SPARQ.md §5, METHODS.md §10) at each step's length; the top-p
                // methods at their mean count.
                const at::Tensor meanCount = count[0].to(at::kDouble).mean(0);
                for (const att::MethodOutput& mo : spec.outputs)
                    if (const at::Tensor t = res.output(mo.name); t.defined())
                        extras[mo.name].push_back(t[0]);
                const at::Tensor measured = att::transferOutput(spec, res); // MagicPIG's reads
                for (int64_t i = 0; i < c; ++i) {
                    att::TransferArgs a = argsAt(i, meanCount[i].item<double>());
                    if (measured.defined())
                        a.measured = measured[0].select(1, i).to(at::kDouble).mean().item<double>();
                    positionsSum += static_cast<double>(a.S); // (the keys it sees)
                    const double method = att::transferElements(lc.method, a),
                                 dense = att::transferElements(att::Method::Dense, a);
                    movedMethod += method;
                    movedDense += dense;
                    // Steps where k covers the length and yet the formula counts more than
                    // dense's (attend's note).
                    ++summary.steps;
                    summary.stepsCovered += att::budgetCoversLength(lc, a.S) && method > dense;
                }
            };
            co.onChunk = [&](int64_t t0, int64_t c, const att::AttentionResult& res,
                             const att::AttentionResult* dense) {
                const at::Tensor valid =
                    at::arange(S, at::kLong)
                        .view({1, 1, S})
                        .le(at::tensor(std::vector<int64_t>(pos.begin() + in.firstStep + t0,
                                                            pos.begin() + in.firstStep + t0 + c),
                                       at::kLong)
                                .view({1, c, 1}));
                // As the layer runs (the indexer on a layer without one: dense; its blocks).
                const att::AttentionConfig lc = info.layerConfig(l, config);
                collect(t0, c, res, dense, valid, lc, [&](int64_t i, double count) {
                    const int64_t positionsSeen =
                        pos[static_cast<size_t>(in.firstStep + t0 + i)] + 1;
                    return info.transferArgs(lc, positionsSeen, count);
                });
            };
            if (entryLayer(l)) {
                // DeepSeek-V4: the layer's entries, then every position, each query over the
                // keys it sees (compressed_keys.h), the method in the indexer's place; a key is
                // its value, and the formulas count it so (CaptureInfo::transferArgs).
                const CompressedKeys ck = compressedKeys(info, ex, l, T);
                const att::AttentionConfig mc =
                    named([&] { return compressedConfig(info, l, config); });
                const att::AttentionConfig dc = compressedConfig(info, l, {});
                const int64_t step = ck.chunk(kChunkElements);
                att::AttendOptions denseOptions;
                denseOptions.keepScores = true;
                for (int64_t t0 = 0; t0 < T; t0 += step) {
                    const int64_t c = std::min(step, T - t0);
                    att::AttentionInputs ai = ck.steps(t0, c);
                    ai.extra = inputs;
                    const att::AttentionResult dense =
                        named([&] { return att::attendSteps(ai, dc, denseOptions); });
                    const att::AttentionResult res =
                        named([&] { return att::attendSteps(ai, mc); });
                    const at::Tensor seen = ai.valid[0].sum(-1); // [c] keys each query sees
                    collect(t0, c, res, &dense, ai.valid, mc, [&](int64_t i, double count) {
                        return info.transferArgs(mc, seen[i].item<int64_t>(), count);
                    });
                }
                entries[static_cast<size_t>(l)] = ck.entries;
                summary.entryLayers += e == 0;
            } else {
                named([&] { return att::runCausal(in, info.layerConfig(l, config), nullptr, co); });
            }
            const int64_t n = T - in.firstStep;
            for (at::Tensor& t : idx)
                t = padIndices(t, width);
            layers.push_back({at::cat(ys, 1),
                              at::cat(yds, 1),
                              at::cat(idx, 1),
                              at::cat(alphas, 1),
                              at::cat(rels, 1),
                              at::cat(counts, 1),
                              at::cat(masses, 1),
                              o.probs ? at::cat(probs, 1) : at::Tensor(),
                              {}});
            for (auto& [name, parts] : extras)
                layers.back().extra[name] = joinPadded(parts, 1, /*stack=*/false);
            Tout = n;
            o.job.step(++done, total, "example " + reader.name(e) + ", layer " + std::to_string(l));
        }
        summary.queries += Tout;
        if (out) {
            int64_t width = 1;
            for (const LayerOut& lo : layers)
                width = std::max(width, lo.indices.size(-1));
            auto stack = [&](at::Tensor LayerOut::*field) {
                std::vector<at::Tensor> parts;
                for (const LayerOut& lo : layers)
                    parts.push_back(field == &LayerOut::indices ? padIndices(lo.*field, width)
                                                                : lo.*field);
                return at::stack(parts, 0).contiguous();
            };
            const h5::Group grp = out->root().group("examples").createGroup(reader.name(e));
            grp.write("y", stack(&LayerOut::y).to(at::kFloat));
            grp.write("y_dense", stack(&LayerOut::yDense).to(at::kFloat));
            grp.write("indices", stack(&LayerOut::indices).to(at::kLong));
            grp.write("alpha", stack(&LayerOut::alpha).to(at::kFloat));
            grp.write("rel_error", stack(&LayerOut::relError).to(at::kFloat));
            grp.write("count", stack(&LayerOut::count).to(at::kLong));
            grp.write("mass", stack(&LayerOut::mass).to(at::kFloat));
            if (o.probs)
                grp.write("probs", stack(&LayerOut::probs));
            if (info.compressed()) // indices below entries[l] are layer l's entries
                grp.write("entries", at::tensor(entries, at::kLong));
            // The method's own outputs (its unit's MethodSpec::outputs), [L, Hq, T, …].
            for (const att::MethodOutput& mo : spec.outputs) {
                std::vector<at::Tensor> parts;
                for (const LayerOut& lo : layers)
                    if (const auto it = lo.extra.find(mo.name); it != lo.extra.end())
                        parts.push_back(it->second);
                if (parts.size() == layers.size() && !parts.empty())
                    grp.write(mo.name, joinPadded(parts, 0, /*stack=*/true).contiguous());
            }
        }
    }
    const double nq = static_cast<double>(std::max<int64_t>(summary.queries, 1));
    summary.relErrorPerHead = relSum / nq;
    summary.agreementPerHead = recallSum / nq;
    summary.alphaPerHead = alphaSum / nq;
    summary.countPerHead = countSum / nq;
    summary.massPerHead = massSum / nq;
    summary.relError = summary.relErrorPerHead.mean().item<double>();
    summary.agreement = summary.agreementPerHead.mean().item<double>();
    // Over the steps counted (on DeepSeek-V4's compressed layers, over the keys seen).
    const double counted = static_cast<double>(std::max<int64_t>(summary.steps, 1));
    summary.transferPerStep = movedMethod / counted;
    summary.denseTransferPerStep = movedDense / counted;
    summary.compressionRatio = movedDense > 0      ? movedMethod / movedDense
                               : summary.steps > 0 ? 1.0
                                                   : std::nan("");
    summary.meanPositions = positionsSum / counted;
    if (info.kvLoraRank > 0) {
        summary.latentPerPosition = info.kvLoraRank + info.qkRopeHeadDim;
        summary.perHeadCachePerPosition = info.nKvHeads * (info.headDim + info.valueDim());
    }
    if (out)
        out->commit();
    return summary;
}

std::string paramsJson(const att::AttentionConfig& c, bool sparqV1, bool fileNames) {
    nlohmann::ordered_json j = nlohmann::ordered_json::object();
    for (const att::ParamInfo& p : att::parameters()) {
        const bool v1 = p.id == att::Param::R || p.id == att::Param::K ||
                        p.id == att::Param::Local || p.id == att::Param::Tau ||
                        p.id == att::Param::Gqa;
        if (!att::takes(c.method, p.id) && !(sparqV1 && v1))
            continue;
        const std::string v = att::paramValueInEffect(c, p.id);
        if (p.kind == att::ParamKind::Integer && v != "none")
            j[p.attribute] = std::stoll(v);
        else if (p.kind == att::ParamKind::Number)
            j[p.attribute] = std::stod(v);
        else if (p.kind == att::ParamKind::Flag)
            j[p.attribute] = v == "1";
        else if (p.kind == att::ParamKind::File && fileNames)
            j[p.attribute] = v.empty() ? std::string("the prompt")
                                       : std::filesystem::path(v).filename().string();
        else
            j[p.attribute] = v;
    }
    return j.dump();
}

std::string attendSummaryJson(const AttendSummary& s, const att::AttentionConfig& c) {
    nlohmann::json j;
    j["format"] = "sparqlab.attend.summary";
    j["format_version"] = 1;
    j["method"] = att::methodName(c.method);
    // Every parameter the method takes, and SparQ's of version 1.
    j.update(nlohmann::json::parse(paramsJson(c, /*sparqV1=*/true, /*fileNames=*/false)));
    if (!j.contains("mean_value"))
        j["mean_value"] = c.meanValue;
    j["examples"] = s.examples;
    j["queries"] = s.queries;
    j["rel_error"] = {{"mean", s.relError}, {"per_head", perHeadJson(s.relErrorPerHead)}};
    j["recall"] = {{"mean", s.agreement}, {"per_head", perHeadJson(s.agreementPerHead)}};
    j["topk_agreement"] = {{"mean", s.agreement}, {"per_head", perHeadJson(s.agreementPerHead)}};
    j["alpha"] = {{"mean", s.alphaPerHead.mean().item<double>()},
                  {"per_head", perHeadJson(s.alphaPerHead)}};
    j["count"] = {{"mean", s.countPerHead.mean().item<double>()},
                  {"per_head", perHeadJson(s.countPerHead)}};
    j["mass"] = {{"mean", s.massPerHead.mean().item<double>()},
                 {"per_head", perHeadJson(s.massPerHead)}};
    j["transfer"] = {{"formula", att::methodInfo(c.method).transferFormula},
                     {"elements_per_head_step", s.transferPerStep},
                     {"dense_elements_per_head_step", s.denseTransferPerStep}};
    j["compression_ratio"] = std::isfinite(s.compressionRatio) ? nlohmann::json(s.compressionRatio)
                                                               : nlohmann::json(nullptr);
    if (s.entryLayers > 0) // DeepSeek-V4: layers whose keys are entries and positions
        j["entry_layers"] = s.entryLayers;
    if (s.latentPerPosition > 0) // MLA: the cache as stored against the per-head counts
        j["mla"] = {{"latent_elements_per_position", s.latentPerPosition},
                    {"per_head_cache_elements_per_position", s.perHeadCachePerPosition},
                    {"dense_latent_elements_per_layer_step", s.latentPerPosition * s.meanPositions},
                    {"dense_per_head_elements_per_layer_step",
                     s.perHeadCachePerPosition * s.meanPositions}};
    return j.dump(2);
}

nlohmann::json perHeadJson(const at::Tensor& t) {
    nlohmann::json rows = nlohmann::json::array();
    const at::Tensor c = t.to(at::kDouble).contiguous();
    for (int64_t l = 0; l < c.size(0); ++l) {
        nlohmann::json row = nlohmann::json::array();
        for (int64_t h = 0; h < c.size(1); ++h) {
            const double x = c[l][h].item<double>();
            row.push_back(std::isfinite(x) ? nlohmann::json(x) : nlohmann::json(nullptr));
        }
        rows.push_back(std::move(row));
    }
    return rows;
}

} // namespace sparqlab::analysis
