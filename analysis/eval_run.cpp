#include "eval_run.h"
#include "attention/bench.h"
#include "attention/decode/engine.h"
#include "attention/method_spec.h"

#include "analysis/eval_task_spec.h"

#include "analysis/attend_run.h"
#include "analysis/calibrate_run.h"
#include "analysis/decode_traffic.h"
#include "attention/method_table.h"
#include "model/model.h"
#include "text/tokenizer.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <sstream>

namespace sparqlab::analysis {

namespace att = sparqlab::attention;
namespace fs = std::filesystem;
using nlohmann::ordered_json; // eval's result lines keep their fields in order

namespace {

/// "k=192,256 local=k/4" → {("k", ["192", "256"]), ("local", ["k/4"])}.
std::vector<std::pair<std::string, std::vector<std::string>>> parseGrid(const std::string& spec) {
    std::vector<std::pair<std::string, std::vector<std::string>>> out;
    std::istringstream in(spec);
    for (std::string item; in >> item;) {
        const size_t eq = item.find('=');
        std::vector<std::string> values;
        std::istringstream vs(item.substr(eq + 1));
        for (std::string v; std::getline(vs, v, ',');)
            values.push_back(v);
        out.emplace_back(item.substr(0, eq), values);
    }
    return out;
}

att::Param paramByOption(const std::string& option) {
    for (const att::ParamInfo& p : att::parameters())
        if (option == p.option)
            return p.id;
    throw att::AttentionError("unknown parameter '" + option + "' in the method table's grid");
}

/// The local window rule: "k/4" (of each point's k) or a number.
void applyLocal(att::AttentionConfig& c, const std::string& rule) {
    if (rule.empty())
        return;
    if (rule == "k/4") {
        c.local = c.k >= att::AttentionConfig::kNoCap ? 0 : c.k / 4;
        return;
    }
    att::setParamValue(c, att::Param::Local, rule);
}

std::string baseName(const std::string& path) {
    const std::string name = fs::path(path).filename().string();
    return name.empty() ? path : name;
}

/// The resume key of a line: everything but the results.
std::string lineKey(const ordered_json& j) {
    auto str = [&](const char* k) {
        return j.contains(k) && j[k].is_string() ? j[k].get<std::string>() : std::string();
    };
    return str("task") + '\x1f' + str("data") + '\x1f' + str("example") + '\x1f' + str("method") +
           '\x1f' + (j.contains("params") ? j["params"].dump() : "");
}

/// Reads an earlier file's lines for resume; a torn last line (a killed write) is dropped. A
/// line of another model than `model` (where both are named) is an error: its results are not
/// this model's, and (task, data, example, method, params) would take them for done.
std::set<std::string> readDone(const std::string& path, const std::string& model,
                               std::string* keep) {
    std::set<std::string> done;
    std::ifstream in(path, std::ios::binary);
    if (!in)
        return done;
    std::ostringstream ss;
    ss << in.rdbuf();
    const std::string text = ss.str();
    size_t start = 0;
    int64_t line = 0;
    while (start < text.size()) {
        const size_t nl = text.find('\n', start);
        ++line;
        if (nl == std::string::npos)
            break; // torn: not written to the end
        const std::string s = text.substr(start, nl - start);
        if (!s.empty()) {
            ordered_json j;
            try {
                j = ordered_json::parse(s);
            } catch (const ordered_json::exception& e) {
                throw std::runtime_error(path + " line " + std::to_string(line) +
                                         ": not an eval line (" + e.what() +
                                         "); resume needs the file eval wrote");
            }
            if (!model.empty() && j.contains("model") && j["model"].is_string() &&
                j["model"].get<std::string>() != model)
                throw std::runtime_error(path + " line " + std::to_string(line) +
                                         ": results of model '" + j["model"].get<std::string>() +
                                         "'; resume continues a study of the same model, not '" +
                                         model + "'");
            done.insert(lineKey(j));
        }
        keep->append(text, start, nl + 1 - start);
        start = nl + 1;
    }
    return done;
}

} // namespace

std::string evalModelName(const model::Model& model) {
    return model.spec() == "demo" ? "demo" : fs::path(model.folder()).filename().string();
}

std::string evalParamsJson(const att::AttentionConfig& c) {
    return paramsJson(c, /*sparqV1=*/false, /*fileNames=*/true);
}

double stepCompression(const model::ModelConfig& mc, const att::AttentionConfig& c, int64_t S) {
    return decodeTraffic(mc, S, c, 2.0, 1).methodRatio; // (dense's: 1)
}

std::vector<EvalPoint> evalGrid(const std::vector<att::Method>& methods,
                                const std::map<att::Param, std::vector<std::string>>& overrides,
                                const std::string& local, int64_t headDim, int64_t contextTokens,
                                const att::AttentionConfig& base) {
    const double scale = std::min(1.0, static_cast<double>(contextTokens) / 2048.0);
    std::vector<EvalPoint> out;
    std::set<std::string> seen;
    for (att::Method m : methods) {
        const att::MethodInfo& info = att::methodInfo(m);
        // Each varied parameter's values: the override, else the table's (scaled).
        std::vector<std::pair<att::Param, std::vector<std::string>>> axes;
        std::string localRule = local;
        for (const auto& [option, values] : parseGrid(info.evalGrid)) {
            if (option == "local") {
                if (localRule.empty())
                    localRule = values.front();
                continue;
            }
            const att::Param p = paramByOption(option);
            std::vector<std::string> vs = values;
            if (att::paramInfo(p).positions) // a number of positions: scaled to the context
                for (std::string& v : vs)
                    v = std::to_string(std::max<int64_t>(
                        1, std::llround(static_cast<double>(std::stoll(v)) * scale)));
            if (p == att::Param::R)
                for (std::string& v : vs)
                    v = std::to_string(std::min<int64_t>(std::stoll(v), headDim));
            axes.emplace_back(p, vs);
        }
        for (const auto& [p, values] : overrides) {
            if (!att::takes(m, p))
                continue;
            auto it = std::find_if(axes.begin(), axes.end(),
                                   [p = p](const auto& a) { return a.first == p; });
            if (it != axes.end())
                it->second = values;
            else
                axes.emplace_back(p, values);
        }
        // Their product.
        std::vector<att::AttentionConfig> configs{base};
        configs.front().method = m;
        att::applyDefaults(configs.front()); // the method's own, before the grid's
        if (att::takes(m, att::Param::P) && !overrides.count(att::Param::K))
            configs.front().k = att::AttentionConfig::kNoCap; // top-p: no cap by default
        for (const auto& [p, values] : axes) {
            std::vector<att::AttentionConfig> next;
            for (const att::AttentionConfig& c : configs)
                for (const std::string& v : values) {
                    att::AttentionConfig d = c;
                    att::setParamValue(d, p, v);
                    next.push_back(d);
                }
            configs = std::move(next);
        }
        for (att::AttentionConfig& c : configs) {
            if (att::takes(m, att::Param::Local))
                applyLocal(c, localRule);
            EvalPoint point{c, evalParamsJson(c)};
            if (seen.insert(std::string(info.name) + point.params).second)
                out.push_back(std::move(point));
        }
    }
    return out;
}

std::vector<int64_t> evalPromptIds(const text::Tokenizer& tok, const EvalOptions& o,
                                   const std::string& prompt, const std::string& answerPrefix) {
    if (!o.chat)
        return tok.encode(prompt + answerPrefix, true);
    std::vector<int64_t> ids =
        text::chatIds(tok, o.chat->render(text::userConversation(prompt, o.system), true));
    if (!answerPrefix.empty()) {
        const std::vector<int64_t> p = tok.encode(answerPrefix, false);
        ids.insert(ids.end(), p.begin(), p.end());
    }
    return ids;
}

std::vector<EvalExample> evalExamples(model::Model& model, const EvalOptions& o, int64_t* dropped) {
    EvalDataOptions data = o.data;
    data.contextTokens = model.config().maxPositions;
    if (o.chat && !evalTaskSpec(o.task).teacherForced) { // the template's tokens around a prompt
        data.wrapperTokens =
            static_cast<int64_t>(evalPromptIds(model.tokenizer(), o, "", "").size());
        data.contextTokens -= data.wrapperTokens;
    }
    data.seed = o.seed;
    const text::Tokenizer& tok = model.tokenizer();
    data.countTokens = [&tok](const std::string& s) {
        return static_cast<int64_t>(tok.encode(s, /*addSpecial=*/false).size());
    };
    std::vector<EvalExample> all = loadEvalExamples(o.task, o.dataPath, data);
    if (all.empty()) // (not a run of nothing that says it succeeded)
        throw std::runtime_error(
            o.dataPath + ": no " + evalTaskName(o.task) + " example fits " +
            std::to_string(data.contextTokens) + " tokens of context" +
            (o.task == EvalTask::Repetition
                 ? " (a repetition example needs a text of one context: see --context-chars)"
                 : ""));
    if (!evalTaskSpec(o.task).keepOrder) {
        std::mt19937_64 rng(o.seed);
        std::shuffle(all.begin(), all.end(), rng);
    }
    if (o.limit >= 0 && static_cast<int64_t>(all.size()) > o.limit)
        all.resize(static_cast<size_t>(o.limit));
    std::vector<EvalExample> mine;
    for (size_t i = 0; i < all.size(); ++i)
        if (static_cast<int64_t>(i) % o.shardCount == o.shardIndex)
            mine.push_back(std::move(all[i]));
    if (dropped)
        *dropped = 0; // the readers drop what does not fit; their count is not kept
    return mine;
}

EvalSummary runEval(model::Model& model, const EvalOptions& o) {
    if (o.shardCount < 1 || o.shardIndex < 0 || o.shardIndex >= o.shardCount)
        throw att::AttentionError("the shard must be i/n with 0 <= i < n");
    if (o.points.empty())
        throw att::AttentionError("no methods to evaluate");
    const model::ModelConfig& mc = model.config();
    for (const EvalPoint& p : o.points)
        p.config.validateFor(mc.headDim, mc.nLayers, mc.nHeads, mc.nKvHeads);
    const std::vector<EvalExample> examples = evalExamples(model, o);
    const text::Tokenizer& tok = model.tokenizer();

    EvalSummary summary;
    summary.examples = static_cast<int64_t>(examples.size());
    summary.outPath = o.outPath;
    const std::string partial = o.outPath + ".partial";
    std::string earlier;
    std::set<std::string> done;
    if (o.resume) {
        std::error_code ec;
        done = readDone(fs::exists(partial, ec) ? partial : o.outPath, o.modelName, &earlier);
    }
    {
        std::ofstream out(partial, std::ios::binary | std::ios::trunc);
        if (!out || !out.write(earlier.data(), static_cast<std::streamsize>(earlier.size())))
            throw std::runtime_error(partial + ": cannot write");
    }
    std::ofstream out(partial, std::ios::binary | std::ios::app);
    if (!out)
        throw std::runtime_error(partial + ": cannot write");

    // Measured decode speed-ups, once per length for every point the engine runs.
    std::map<int64_t, std::map<const EvalPoint*, att::MethodBenchResult>> speeds;
    auto addSpeed = [&](nlohmann::ordered_json& j, const EvalPoint& point, int64_t length) {
        if (!speeds.count(length)) {
            auto& at = speeds[length];
            std::vector<att::AttentionConfig> configs;
            std::vector<const EvalPoint*> timed;
            for (const EvalPoint& p : o.points) {
                // Methods with a decode kernel; the bench calibrates Loki and Double Sparsity on
                // its own keys.
                att::AttentionConfig c = p.config;
                c.calibration = nullptr;
                if (c.method == att::Method::Dense || !att::methodSpec(c.method).decode)
                    continue;
                if (c.k != att::AttentionConfig::kNoCap)
                    c.k = std::min(c.k, length);
                configs.push_back(c);
                timed.push_back(&p);
            }
            if (!configs.empty()) {
                const std::vector<att::MethodBenchResult> r =
                    att::benchDecodeMethods(att::modelShapeBench(mc.nHeads, mc.nKvHeads, mc.headDim,
                                                                 length, o.speedDevice, 9),
                                            configs);
                for (size_t i = 0; i < r.size(); ++i)
                    at[timed[i]] = r[i];
            }
        }
        j["speed_device"] = o.speedDevice;
        att::SpeedupInterval si{1, 1, 1}; // dense against itself
        if (point.config.method != att::Method::Dense) {
            const auto& at = speeds[length];
            const auto it = at.find(&point);
            if (it == at.end())
                return; // not a decode-engine method: no measured speed
            si = att::speedupInterval(it->second);
        }
        j["speedup"] = si.median;
        j["speedup_low"] = si.lower;
        j["speedup_high"] = si.upper;
    };
    const std::string taskName = evalTaskName(o.task);
    const std::string dataName = baseName(o.dataPath);
    int64_t snapWindow = 1;
    for (const EvalPoint& p : o.points)
        snapWindow = std::max(snapWindow, p.config.snapWindow);

    for (size_t ei = 0; ei < examples.size(); ++ei) {
        const EvalExample& ex = examples[ei];
        o.job.check();
        // Lines of this example still to compute.
        std::vector<std::pair<const EvalPoint*, ordered_json>> todo;
        for (const EvalPoint& p : o.points) {
            ordered_json j;
            j["task"] = taskName;
            j["data"] = dataName;
            j["example"] = ex.id;
            j["method"] = att::methodName(p.config.method);
            j["params"] = ordered_json::parse(p.params);
            if (done.count(lineKey(j))) {
                ++summary.skipped;
                continue;
            }
            todo.emplace_back(&p, std::move(j));
        }
        if (!todo.empty()) {
            const EvalTaskSpec& task = evalTaskSpec(o.task);
            const bool bpc = task.teacherForced;
            const std::vector<int64_t> ids =
                bpc ? tok.encode(ex.text, true) : evalPromptIds(tok, o, ex.prompt, ex.answerPrefix);
            const int64_t S = static_cast<int64_t>(ids.size());
            std::unique_ptr<model::PromptPrefill> prefill;
            if (!bpc && o.densePrefill)
                prefill = model.prefillDense(ids, ex.maxNewTokens, snapWindow);
            std::map<att::Method, std::shared_ptr<att::Calibration>> calibrations;
            for (auto& [point, j] : todo) {
                o.job.check();
                att::AttentionConfig cfg = point->config;
                const att::MethodInfo& info = att::methodInfo(cfg.method);
                if (info.calibrated && !cfg.calibration) { // on the example itself
                    auto& cal = calibrations[cfg.method];
                    if (!cal) {
                        const int64_t n = std::min<int64_t>(S, mc.maxPositions);
                        const std::vector<int64_t> head(ids.begin(), ids.begin() + n);
                        cal = calibrateOnTokens(model, head, cfg.method);
                        if (o.note)
                            o.note(std::string(info.name) + " calibrated on example " + ex.id +
                                   " itself (" + std::to_string(n) + " tokens)");
                    }
                    cfg.calibration = cal;
                }
                double value = 0, compression = 1;
                std::string output;
                if (bpc) {
                    const model::BpcResult r = model.bitsPerCharacter(ex.text, cfg);
                    value = r.bpc();
                    // Σ transfers / Σ dense transfers over a window's positions.
                    double moved = 0, dense = 0;
                    for (int64_t s = 1; s <= std::min<int64_t>(S, r.window); ++s) {
                        const DecodeTraffic t = decodeTraffic(mc, s, cfg, 2.0, 1);
                        dense += t.attentionCache;
                        moved += t.attentionCache * t.methodRatio;
                    }
                    compression = dense > 0 ? moved / dense : 1.0;
                } else {
                    const model::Generation g =
                        prefill ? prefill->continueWith(cfg, ex.maxNewTokens, model.eosIds(), true)
                                : model.generate(ids, ex.maxNewTokens, cfg, true);
                    output = tok.decode(g.newIds, /*skipSpecial=*/true);
                    value = task.score(output, ex);
                    compression = stepCompression(mc, cfg, S);
                }
                j["metric"] = evalMetric(o.task);
                j["value"] = value;
                j["seq_len"] = S;
                j["compression"] = compression;
                j["model"] = o.modelName;
                j["created_by"] = o.createdBy;
                if (task.lineFields)
                    j.update(task.lineFields(ex));
                if (o.measureSpeed)
                    addSpeed(j, *point, ex.haystackTokens > 0 ? ex.haystackTokens : S);
                if (!bpc)
                    j["output"] = output;
                out << j.dump() << '\n';
                out.flush();
                if (!out)
                    throw std::runtime_error(partial + ": cannot write");
                ++summary.lines;
            }
        }
        o.job.step(static_cast<int64_t>(ei + 1), summary.examples, "example " + ex.id);
    }
    out.close();
    std::error_code ec;
    fs::rename(partial, o.outPath, ec);
    if (ec)
        throw std::runtime_error(o.outPath + ": cannot write (" + ec.message() + ")");
    return summary;
}

} // namespace sparqlab::analysis
