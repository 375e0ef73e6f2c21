// sparqlab-cli eval: the paper's task-level study (CONTRACTS.md §8) on one model.

#include "commands.h"

#include "model/resources.h"
#include "model_args.h"

#include "analysis/eval_run.h"
#include "analysis/eval_task_spec.h"
#include "attention/method_table.h"
#include "capture/calibration_file.h"
#include "model/model.h"
#include "sparqlab/version.h"
#include "text/chat_template.h"

#include <chrono>
#include <cstdio>
#include <sstream>

namespace sparqlab::cli {

namespace att = sparqlab::attention;

namespace {

std::vector<std::string> splitList(const std::string& s) {
    std::vector<std::string> out;
    std::stringstream ss(s);
    for (std::string item; std::getline(ss, item, ',');)
        if (!item.empty())
            out.push_back(item);
    return out;
}

std::vector<double> numberList(const Args& a, const std::string& name) {
    std::vector<double> out;
    for (const std::string& v : splitList(a.get(name).value_or(""))) {
        const std::optional<double> x = att::parseFiniteNumber(v);
        if (!x || !(*x >= 0 && *x <= 1))
            throw UsageError("--" + name + " takes numbers in [0, 1], got '" + v + "'");
        out.push_back(*x);
    }
    return out;
}

} // namespace

int runEval(const std::vector<std::string>& argv) {
    std::set<std::string> valued{"model",           "task",      "data",          "out",
                                 "methods",         "limit",     "seed",          "shard",
                                 "prefill",         "compute",   "context-chars", "prompt-chars",
                                 "reference-chars", "confusion", "shots",         "depths",
                                 "lengths",         "method",    "system",        "length",
                                 "samples",         "words",     "speed-device",  "device"};
    valued.insert(kAttnValued.begin(), kAttnValued.end());
    std::set<std::string> flags{"resume", "chat", "measure-speed"};
    flags.insert(kAttnFlags.begin(), kAttnFlags.end());
    const Args a(argv, valued, flags);
    if (!a.positional().empty())
        throw UsageError("unexpected argument '" + a.positional().front() + "'");
    if (a.has("method"))
        throw UsageError("eval takes --methods (a list), not --method");

    analysis::EvalOptions o;
    try {
        o.task = analysis::parseEvalTask(a.required("task"));
    } catch (const std::invalid_argument& e) {
        throw UsageError(std::string("--task: ") + e.what());
    }
    // A task with data the project ships runs on it when --data is not given.
    const char* shipped = analysis::evalTaskSpec(o.task).shippedData;
    o.dataPath =
        a.has("data") || !shipped || !*shipped ? a.required("data") : model::resourcePath(shipped);
    o.outPath = a.required("out");
    o.limit = a.integer("limit").value_or(-1);
    if (a.has("limit") && o.limit < 1) // (0 ran nothing and said it had written a file)
        throw UsageError("--limit must be at least 1 example, got " + *a.get("limit"));
    o.seed = static_cast<uint64_t>(a.integer("seed").value_or(0));
    o.resume = a.has("resume");
    if (const auto shard = a.get("shard")) {
        const size_t slash = shard->find('/');
        const std::optional<int64_t> i = att::parseWholeNumber(shard->substr(0, slash)),
                                     n = slash == std::string::npos
                                             ? std::nullopt
                                             : att::parseWholeNumber(shard->substr(slash + 1));
        if (!i || !n)
            throw UsageError("--shard takes i/n, got '" + *shard + "'");
        o.shardIndex = *i;
        o.shardCount = *n;
        if (o.shardCount < 1 || o.shardIndex < 0 || o.shardIndex >= o.shardCount)
            throw UsageError("--shard i/n needs 0 <= i < n, got '" + *shard + "'");
    }
    const std::string prefill = a.get("prefill").value_or("dense");
    if (prefill != "dense" && prefill != "method")
        throw UsageError("--prefill takes dense or method, got '" + prefill + "'");
    o.densePrefill = prefill == "dense";
    // Task options.
    o.data.contextChars = a.integer("context-chars").value_or(0);
    o.data.promptChars = a.integer("prompt-chars").value_or(o.data.promptChars);
    o.data.referenceChars = a.integer("reference-chars").value_or(o.data.referenceChars);
    o.data.confusionContexts = a.integer("confusion").value_or(o.data.confusionContexts);
    o.data.shots = a.integer("shots").value_or(o.data.shots);
    if (a.has("depths"))
        o.data.depths = numberList(a, "depths");
    if (a.has("lengths") && a.has("length"))
        throw UsageError("give --length or --lengths, not both");
    if (const auto lengths = a.integerList(a.has("length") ? "length" : "lengths", 1))
        o.data.haystackTokens = *lengths;
    o.data.samples = a.integer("samples").value_or(o.data.samples);
    if (o.data.samples < 1)
        throw UsageError("--samples must be at least 1, got " + std::to_string(o.data.samples));
    o.data.wordsPath = a.get("words").value_or(o.data.wordsPath);
    o.measureSpeed = a.has("measure-speed");
    o.speedDevice = a.get("speed-device").value_or("cpu");
    if (o.speedDevice != "cpu" && o.speedDevice != "cuda")
        throw UsageError("--speed-device takes cpu or cuda, got '" + o.speedDevice + "'");
    if (a.has("speed-device") && !o.measureSpeed) // (it was ignored)
        throw UsageError("--speed-device goes with --measure-speed");
    if (o.data.contextChars < 0 || o.data.promptChars < 1 || o.data.referenceChars < 2 ||
        o.data.confusionContexts < 0 || o.data.shots < 0)
        throw UsageError("--context-chars, --confusion and --shots must be at least 0, "
                         "--prompt-chars at least 1 and --reference-chars at least 2");

    // The grid: methods, each ATTN option a list, --local a number or k/4.
    std::vector<att::Method> methods;
    for (const std::string& m : splitList(a.get("methods").value_or(analysis::kPaperMethods))) {
        try {
            methods.push_back(att::parseMethod(m));
        } catch (const att::AttentionError& e) {
            throw UsageError(std::string("--methods: ") + e.what());
        }
    }
    noteIgnoredOptions(a, methods);
    std::map<att::Param, std::vector<std::string>> overrides;
    att::AttentionConfig base;
    for (const att::ParamInfo& p : att::parameters()) {
        if (!a.has(p.option) || p.id == att::Param::Local)
            continue;
        const std::string option = std::string("--") + p.option;
        if (p.kind == att::ParamKind::File) {
            base.calibration = capture::readCalibration(*a.get(p.option));
            continue;
        }
        if (p.kind == att::ParamKind::Flag) { // each method that takes it, after its defaults
            overrides[p.id] = {"1"};
            continue;
        }
        const std::vector<std::string> values = splitList(*a.get(p.option));
        if (values.empty())
            throw UsageError(option + " needs at least one value");
        for (const std::string& v : values) { // each checked now, with its option's name
            att::AttentionConfig probe;
            try {
                att::setParamValue(probe, p.id, v);
            } catch (const att::AttentionError& e) {
                throw UsageError(option + (p.kind == att::ParamKind::Choice ? ": " : " ") +
                                 e.what());
            }
        }
        overrides[p.id] = values;
    }
    const std::string local = a.get("local").value_or("");
    if (!local.empty() && local != "k/4") {
        att::AttentionConfig probe;
        try {
            att::setParamValue(probe, att::Param::Local, local);
        } catch (const att::AttentionError& e) {
            throw UsageError(std::string("--local takes k/4 or a number: ") + e.what());
        }
    }

    const auto model = openModel(a);
    const model::ModelConfig& mc = model->config();
    o.points = analysis::evalGrid(methods, overrides, local, mc.headDim, mc.maxPositions, base);
    o.modelName = analysis::evalModelName(*model);
    o.createdBy = std::string("sparqlab-cli ") + SPARQLAB_VERSION;
    if (a.has("chat") || a.has("system")) { // each prompt a user turn of the model's template
        o.chat =
            std::make_shared<const text::ChatTemplate>(text::requireChatTemplate(model->folder()));
        o.system = a.get("system").value_or("");
    }
    ProgressBar bar(std::string("eval ") + analysis::evalTaskName(o.task));
    o.job = bar.job();
    o.note = [](const std::string& m) { std::fprintf(stderr, "eval: %s\n", m.c_str()); };
    const auto start = std::chrono::steady_clock::now();
    const analysis::EvalSummary s = analysis::runEval(*model, o);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::fprintf(stderr,
                 "eval: %lld lines for %lld examples × %zu method settings (%lld already there) "
                 "in %s; %.1f s, %.2f s per example\n",
                 static_cast<long long>(s.lines), static_cast<long long>(s.examples),
                 o.points.size(), static_cast<long long>(s.skipped), s.outPath.c_str(), seconds,
                 s.examples > 0 ? seconds / static_cast<double>(s.examples) : 0.0);
    return 0;
}

int runTasks(const std::vector<std::string>& argv) {
    const Args a(argv, {}, {"markdown"});
    if (!a.positional().empty())
        throw UsageError("unexpected argument '" + a.positional().front() + "'");
    if (a.has("markdown")) {
        std::printf("%s", analysis::evalTasksMarkdown().c_str());
        return 0;
    }
    for (const analysis::EvalTaskSpec* t : analysis::evalTaskSpecs())
        std::printf("%-12s %s\n%12s metric %s; data: %s\n", t->name, t->summary, "", t->metric,
                    t->data);
    return 0;
}

} // namespace sparqlab::cli
