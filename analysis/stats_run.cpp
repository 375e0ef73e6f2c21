#include "stats_run.h"

#include "analysis/calibrate_run.h"
#include "analysis/compressed_keys.h"
#include "analysis/lab.h"
#include "analysis/statistics.h"
#include "attention/budget_stats.h"
#include "attention/method_spec.h"
#include "capture/capture_file.h"
#include "model/captured.h"

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>

namespace sparqlab::analysis {

namespace {

const char* kMethodNames[3] = {"top-r", "first-r", "random-proj"};
const AgreementMethod kMethods[3] = {AgreementMethod::TopR, AgreementMethod::FirstR,
                                     AgreementMethod::RandomProj};
const char* kTauNames[3] = {"adaptive", "sqrt-dh", "sqrt-r"};
const attention::TauMode kTaus[3] = {attention::TauMode::Adaptive, attention::TauMode::SqrtDh,
                                     attention::TauMode::SqrtR};

/// Streaming sums for η along each axis of V [E, L, H, S, D] (SPARQ.md §6.6), using
/// SS_between = Σ_fibres (fibre sum)² / d − N·m² and SS_total = Σ v² − N·m².
struct EtaAccumulator {
    double n = 0, sum = 0, sumSq = 0;
    double between[5] = {0, 0, 0, 0, 0}; // Σ (fibre sum)² / d per axis
    int64_t size[5] = {0, 0, 0, 0, 0};
    at::Tensor acrossExamples; // Σ_e V_e [L, H, S, D]
    at::Tensor layerSum;       // Σ_l V_e,l [H, S, D] for the current example

    void addLayer(const at::Tensor& v) { // v [H, S, D] of one (example, layer)
        n += static_cast<double>(v.numel());
        sum += v.sum().item<double>();
        sumSq += v.pow(2).sum().item<double>();
        between[2] += v.sum(0).pow(2).sum().item<double>() / static_cast<double>(v.size(0));
        between[3] += v.sum(1).pow(2).sum().item<double>() / static_cast<double>(v.size(1));
        between[4] += v.sum(2).pow(2).sum().item<double>() / static_cast<double>(v.size(2));
        layerSum = layerSum.defined() ? layerSum + v : v.clone();
    }
    void endExample(const std::vector<at::Tensor>& layers, int64_t L) {
        between[1] += layerSum.pow(2).sum().item<double>() / static_cast<double>(L);
        layerSum = at::Tensor();
        const at::Tensor all = at::stack(layers); // [L, H, S, D]
        acrossExamples = acrossExamples.defined() ? acrossExamples + all : all;
    }
    void finish(int64_t E, double* eta, double* excess) {
        between[0] = acrossExamples.pow(2).sum().item<double>() / static_cast<double>(E);
        const double mean = sum / n;
        const double total = sumSq - n * mean * mean;
        for (int a = 0; a < 5; ++a) {
            // An axis of one index (one example): each fibre is one entry, SS_between = SS_total
            // and η = 1 exactly (SPARQ.md §6.6), not the two sums' roundings, which depend on the
            // thread count.
            const double e = !(total > 0) ? std::nan("")
                             : size[a] == 1
                                 ? 1.0
                                 : std::sqrt(std::max(0.0, between[a] - n * mean * mean) / total);
            eta[a] = e;
            excess[a] = e - 1.0 / std::sqrt(static_cast<double>(size[a]));
        }
    }
};

double finiteMean(const at::Tensor& t) {
    const at::Tensor f = t.masked_select(at::isfinite(t));
    return f.numel() ? f.mean().item<double>() : std::nan("");
}

} // namespace

std::vector<attention::AttentionConfig>
defaultRecallConfigs(const std::vector<int64_t>& ks,
                     const std::function<attention::AttentionConfig(attention::Method)>& configOf) {
    std::vector<attention::AttentionConfig> out;
    if (ks.empty())
        return out;
    for (const attention::MethodInfo& m : attention::methods()) {
        if (!m.selects)
            continue;
        // A method whose budget is not k (MagicPIG's hashes, ShadowKV's chunk budget): once.
        const bool takesK =
            std::find(m.params.begin(), m.params.end(), attention::Param::K) != m.params.end();
        for (int64_t k : takesK ? ks : std::vector<int64_t>{ks.front()}) {
            attention::AttentionConfig c =
                configOf ? configOf(m.id) : attention::defaultConfig(m.id);
            c.k = k;
            out.push_back(c);
        }
    }
    return out;
}

StatsOptions statsDefaultsFor(const model::CaptureInfo& info) {
    StatsOptions o;
    const int64_t D = info.headDim;
    std::vector<int64_t> rs;
    for (int64_t r : o.agreementR)
        if (r <= D)
            rs.push_back(r);
    o.agreementR = rs.empty() ? std::vector<int64_t>{D} : rs;
    o.alphaR = std::min(o.alphaR, D);
    return o;
}

StatsResult runStats(const StatsOptions& o) {
    const capture::CaptureReader reader(o.capturePath);
    const model::CaptureInfo& info = reader.info();
    const int64_t E = reader.count(), L = info.nLayers, Hq = info.nHeads, Hkv = info.nKvHeads,
                  D = info.headDim;
    for (int64_t r : o.agreementR)
        if (r < 1 || r > D)
            throw attention::AttentionError(o.capturePath + ": agreement r = " + std::to_string(r) +
                                            " outside 1..head_dim " + std::to_string(D));
    if (o.alphaR < 1 || o.alphaR > D)
        throw attention::AttentionError(o.capturePath + ": α's r = " + std::to_string(o.alphaR) +
                                        " (--alpha-r) outside 1..head_dim " + std::to_string(D));
    if (o.coverageK < 1 || o.alphaK < 1)
        throw attention::AttentionError(
            o.capturePath + ": " +
            (o.coverageK < 1 ? "coverage k (--coverage-k) = " + std::to_string(o.coverageK)
                             : "α's k (--alpha-k) = " + std::to_string(o.alphaK)) +
            " must be at least 1");

    // η uses the trailing positions every example has (CONTRACTS.md §4).
    int64_t tail = INT64_MAX;
    for (int64_t e = 0; e < E; ++e)
        tail = std::min(tail, reader.seqLen(e));
    std::vector<at::Tensor> proj;
    for (int64_t r : o.agreementR)
        proj.push_back(randomProjection(Hkv, D, r, o.projectionSeed + static_cast<uint64_t>(r)));

    StatsResult res;
    res.examples = E;
    res.layers = L;
    res.heads = Hq;
    res.etaPositions = tail;
    if (!info.layerKinds.empty()) { // a hybrid: what its decode step reads, by layer kind
        double length = 0;
        for (int64_t e = 0; e < E; ++e)
            length += static_cast<double>(reader.seqLen(e));
        res.meanLength = length / static_cast<double>(E);
        res.linearLayers = info.linearLayerCount();
        const double perPosition = static_cast<double>(info.cacheElementsPerPosition());
        res.attentionElements = static_cast<double>(L) * perPosition * (res.meanLength + 1);
        res.linearStateElements =
            2.0 * static_cast<double>(res.linearLayers * info.linearStateElements);
    }
    at::Tensor coverageSum = at::zeros({L, Hq}, at::kDouble);
    const size_t nAgree = 3 * o.agreementR.size() * o.agreementK.size();
    std::vector<at::Tensor> agreeSum;
    for (size_t i = 0; i < nAgree; ++i) // one tensor each (a fill would share one storage)
        agreeSum.push_back(at::zeros({L, Hq}, at::kDouble));
    double alphaSq[3] = {0, 0, 0};
    std::vector<at::Tensor> qs; // [L, Hq, D] per example: the last captured query
    res.coverageAll = at::zeros({E, L, Hq}, at::kDouble);
    res.alphaTrueAll = at::zeros({E, L, Hq}, at::kDouble);
    for (int t = 0; t < 3; ++t)
        res.alphaApproxAll.push_back(at::zeros({E, L, Hq}, at::kDouble));
    EtaAccumulator eta;
    const int64_t P = static_cast<int64_t>(o.kMassP.size());
    res.kMass = at::zeros({P, L, Hq}, at::kDouble);
    // Recall entries; Loki and Double Sparsity calibrate on the capture itself when no file is
    // given (Double Sparsity needs every position's query); what cannot run says why.
    std::vector<attention::AttentionConfig> recallCfg = o.recall;
    for (attention::AttentionConfig& c : recallCfg) {
        // Defaults sized for long contexts fitted to the shortest example, as `attend` and the
        // lab fit them (ShadowKV's chunk budget).
        attention::fitDefaults(c, tail, {D, L, Hq, Hkv});
        RecallEntry entry;
        entry.config = c;
        entry.perHead = at::zeros({L, Hq}, at::kDouble);
        if (attention::methodInfo(c.method).calibrated && !c.calibration) {
            try {
                CalibrateOptions co;
                co.capturePath = o.capturePath;
                co.method = c.method;
                auto cal = calibrateCapture(co);
                cal->source = "the capture itself";
                c.calibration = cal;
            } catch (const std::exception& e) {
                entry.skipped = e.what();
            }
        }
        res.recall.push_back(entry);
    }
    const int64_t total = E * L;
    int64_t done = 0;
    for (int64_t e = 0; e < E; ++e) {
        std::vector<at::Tensor> qLayers, vTail;
        for (int64_t l = 0; l < L; ++l) {
            o.job.check();
            const model::CaptureExample ex = reader.readLayer(e, l);
            const int64_t T = ex.qPositions.numel();
            const int64_t p = ex.qPositions[T - 1].item<int64_t>(); // the decode step
            at::Tensor q = ex.q.select(1, T - 1).unsqueeze(0);      // [1, Hq, D]
            at::Tensor k = ex.k.narrow(1, 0, p + 1).unsqueeze(0);
            at::Tensor valid = at::ones({1, p + 1}, at::kBool);
            // The layer's own attention (METHODS.md §9.1 and §9.2).
            attention::AttentionConfig mods = info.layerConfig(l);
            // DeepSeek-V4: the layer's entries, then the positions, the ones the query sees
            // valid (compressed_keys.h), each key its own value.
            const bool entries = info.compressed() && info.compressRate(l) > 0;
            if (entries) {
                const CompressedKeys ck = compressedKeys(info, ex, l, 1);
                k = ck.keys;
                valid = ck.visible.select(1, 0);
                mods = compressedConfig(info, l, {});
                res.entryLayers += e == 0;
            }
            qLayers.push_back(ex.q.select(1, T - 1));
            const at::Tensor cov = coverage(q, k, valid, o.coverageK, mods)[0];
            coverageSum[l].add_(cov);
            res.coverageAll[e][l].copy_(cov);
            size_t i = 0;
            for (int m = 0; m < 3; ++m)
                for (size_t ri = 0; ri < o.agreementR.size(); ++ri)
                    for (int64_t kk : o.agreementK)
                        agreeSum[i++][l].add_(topkAgreement(q, k, valid, o.agreementR[ri], kk,
                                                            kMethods[m], proj[ri], nullptr,
                                                            mods)[0]);
            for (int t = 0; t < 3; ++t) {
                const auto [trueA, approxA] =
                    alphaAgreement(q, k, valid, o.alphaR, o.alphaK, kTaus[t], mods);
                alphaSq[t] += (approxA - trueA).pow(2).sum().item<double>();
                res.alphaTrueAll[e][l].copy_(trueA[0]);
                res.alphaApproxAll[static_cast<size_t>(t)][e][l].copy_(approxA[0]);
            }
            res.kMass.select(1, l).add_(
                attention::kMass(q, k, valid, o.kMassP, mods).count.select(1, 0).to(at::kDouble));
            // The queries of consecutive positions up to p: the history the methods may read.
            int64_t run = 1;
            while (run < T && ex.qPositions[T - 1 - run].item<int64_t>() == p - run)
                ++run;
            const at::Tensor history = ex.q.narrow(1, T - run, run);
            std::map<std::string, at::Tensor> inputs; // the model's indexer scores
            if (ex.indexScores.defined())
                inputs["index_scores"] =
                    model::firstPositions(ex.indexScoresByPosition(0), p + 1, info.indexBlockSize);
            for (size_t m = 0; m < recallCfg.size(); ++m) {
                RecallEntry& entry = res.recall[m];
                if (!entry.skipped.empty())
                    continue;
                if (entries && !attention::positionFreeProblem(recallCfg[m].method).empty()) {
                    // A method that needs positions runs on the other layers only.
                    entry.perHead[l].fill_(std::nan(""));
                    entry.notOnEntries = attention::positionFreeProblem(recallCfg[m].method);
                    continue;
                }
                try {
                    // (On DeepSeek-V4's entries: the method in the indexer's place, a key its
                    // value, as attend does.)
                    attention::AttentionInputs over; // (DeepSeek-V4: each key its value)
                    over.q = q;
                    over.k = over.v = k;
                    over.valid = valid;
                    const at::Tensor indices =
                        entries ? attention::attend(over, compressedConfig(info, l, recallCfg[m]))
                                      .indices
                                : decodeStep(history, k[0], ex.v.narrow(1, 0, p + 1),
                                             info.layerConfig(l, recallCfg[m]), mods, false,
                                             nullptr, true, nullptr, inputs)
                                      .first.indices;
                    entry.perHead[l].add_(
                        attention::recallAtK(q, k, valid, indices, mods).recall[0].to(at::kDouble));
                    const double count =
                        indices.ge(0).sum(-1).to(at::kDouble).mean().item<double>();
                    const attention::TransferArgs a = info.transferArgs(
                        recallCfg[m], entries ? valid.sum().item<int64_t>() : p + 1, count);
                    entry.compression += attention::transferRatio(recallCfg[m].method, a);
                    entry.count += count;
                    ++entry.runs;
                } catch (const attention::AttentionError& err) {
                    entry.skipped = err.what();
                }
            }
            const at::Tensor v = ex.v.narrow(1, ex.v.size(1) - tail, tail).to(at::kDouble);
            eta.addLayer(v);
            vTail.push_back(v);
            o.job.step(++done, total);
        }
        eta.endExample(vTail, L);
        qs.push_back(at::stack(qLayers));
    }
    const double nE = static_cast<double>(E);
    res.coverage = coverageSum / nE;
    size_t i = 0;
    for (int m = 0; m < 3; ++m)
        for (int64_t r : o.agreementR)
            for (int64_t kk : o.agreementK)
                res.agreement.push_back({kMethodNames[m], r, kk, agreeSum[i++] / nE});
    for (int t = 0; t < 3; ++t)
        res.alpha.push_back(
            {kTauNames[t], o.alphaR, o.alphaK, std::sqrt(alphaSq[t] / (nE * L * Hq))});
    res.kMass /= nE;
    for (RecallEntry& r : res.recall) {
        if (!r.skipped.empty()) {
            r.perHead = at::Tensor();
            continue;
        }
        r.perHead /= nE;
        r.compression = r.runs > 0 ? r.compression / static_cast<double>(r.runs) : std::nan("");
        r.count = r.runs > 0 ? r.count / static_cast<double>(r.runs) : std::nan("");
    }
    const at::Tensor Q = at::stack(qs); // [E, L, Hq, D]
    res.queries = Q;
    res.kurtosis = kurtosis(Q);
    res.zmassRatio = zmassRatio(Q);
    res.zmassRatioNotebook = zmassRatioNotebook(Q);
    const int64_t sizes[5] = {E, L, Hkv, tail, D};
    std::copy(sizes, sizes + 5, eta.size);
    eta.finish(E, res.eta, res.etaExcess);
    return res;
}

std::string statsJson(const StatsResult& r, const StatsOptions& o) {
    nlohmann::json j;
    j["format"] = kStatsFormat;
    j["format_version"] = kStatsFormatVersion;
    j["capture"] = o.capturePath;
    j["examples"] = r.examples;
    j["coverage"] = {{"k", o.coverageK},
                     {"mean", finiteMean(r.coverage)},
                     {"per_head", perHeadJson(r.coverage)}};
    j["kurtosis"] = {{"mean", finiteMean(r.kurtosis)}, {"per_head", perHeadJson(r.kurtosis)}};
    j["zmass_ratio"] = {{"mean", finiteMean(r.zmassRatio)},
                        {"per_head", perHeadJson(r.zmassRatio)}};
    j["zmass_ratio_notebook"] = {{"mean", finiteMean(r.zmassRatioNotebook)},
                                 {"per_head", perHeadJson(r.zmassRatioNotebook)}};
    nlohmann::json agree = nlohmann::json::array();
    for (const AgreementEntry& a : r.agreement)
        agree.push_back({{"method", a.method},
                         {"r", a.r},
                         {"k", a.k},
                         {"mean", finiteMean(a.perHead)},
                         {"per_head", perHeadJson(a.perHead)}});
    j["topk_agreement"] = agree;
    if (r.linearLayers > 0) {
        const double cache = r.attentionElements + r.linearStateElements;
        j["decode_traffic"] = {{"length", r.meanLength},
                               {"attention_layers", r.layers},
                               {"linear_layers", r.linearLayers},
                               {"attention_cache_elements", r.attentionElements},
                               {"linear_state_elements", r.linearStateElements},
                               {"attention_share_of_cache", r.attentionElements / cache}};
    }
    if (r.entryLayers > 0) // DeepSeek-V4: scored against the entries and the positions seen
        j["entry_layers"] = r.entryLayers;
    j["random_proj_seed"] = o.projectionSeed;
    nlohmann::json alpha = nlohmann::json::array();
    for (const AlphaEntry& a : r.alpha)
        alpha.push_back({{"tau", a.tau}, {"r", a.r}, {"k", a.k}, {"rmse", a.rmse}});
    j["alpha_agreement"] = alpha;
    const char* axes[5] = {"example", "layer", "head", "sequence", "dim"};
    for (int a = 0; a < 5; ++a) {
        j["eta_excess"][axes[a]] = r.etaExcess[a];
        j["eta"][axes[a]] = r.eta[a];
    }
    j["eta_positions"] = r.etaPositions;
    // Additions of version 2 (CONTRACTS.md §6): METHODS.md §9.
    nlohmann::json kmMean = nlohmann::json::array(), kmHeads = nlohmann::json::array();
    for (int64_t i = 0; i < r.kMass.size(0); ++i) {
        kmMean.push_back(finiteMean(r.kMass[i]));
        kmHeads.push_back(perHeadJson(r.kMass[i]));
    }
    j["k_mass"] = {{"p", o.kMassP}, {"mean", kmMean}, {"per_head", kmHeads}};
    nlohmann::json rec = nlohmann::json::array();
    for (const RecallEntry& e : r.recall) {
        nlohmann::json params = nlohmann::json::object();
        for (attention::Param p : attention::methodInfo(e.config.method).params) {
            const attention::ParamInfo& pi = attention::paramInfo(p);
            const std::string v = attention::paramValue(e.config, p);
            if (pi.kind == attention::ParamKind::Integer && v != "none")
                params[pi.attribute] = std::stoll(v);
            else if (pi.kind == attention::ParamKind::Number)
                params[pi.attribute] = std::stod(v);
            else if (pi.kind == attention::ParamKind::Flag)
                params[pi.attribute] = v == "1";
            else
                params[pi.attribute] = v;
        }
        nlohmann::json item{{"method", attention::methodName(e.config.method)}, {"params", params}};
        if (!e.skipped.empty()) {
            item["skipped"] = e.skipped;
        } else {
            item["mean"] = finiteMean(e.perHead);
            item["per_head"] = perHeadJson(e.perHead);
            item["compression"] = std::isfinite(e.compression) ? nlohmann::json(e.compression)
                                                               : nlohmann::json(nullptr);
            item["count"] =
                std::isfinite(e.count) ? nlohmann::json(e.count) : nlohmann::json(nullptr);
            if (!e.notOnEntries.empty()) // DeepSeek-V4: null on the layers with entries
                item["not_on_entry_layers"] = e.notOnEntries;
        }
        rec.push_back(item);
    }
    j["recall"] = rec;
    return j.dump(2);
}

} // namespace sparqlab::analysis
