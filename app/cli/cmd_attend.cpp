// sparqlab-cli attend (CONTRACTS.md §2, result file §3b).

#include "attention/method_spec.h"
#include "base/atomic_file.h"
#include "commands.h"

#include "analysis/attend_run.h"
#include "analysis/calibrate_run.h"
#include "analysis/stats_run.h"
#include "capture/capture_file.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include <cmath>
#include <cstdio>

namespace sparqlab::cli {

int runAttend(const std::vector<std::string>& argv) {
    std::set<std::string> valued = kAttnValued;
    valued.insert({"capture", "out", "inputs"});
    std::set<std::string> flags = kAttnFlags;
    flags.insert({"json", "probs"});
    const Args args(argv, valued, flags);
    if (!args.positional().empty())
        throw UsageError("unexpected argument '" + args.positional().front() + "'");
    analysis::AttendRunOptions o;
    o.capturePath = args.required("capture");
    o.outPath = args.required("out");
    o.inputsPath = args.get("inputs").value_or("");
    if (!args.has("method"))
        throw UsageError("missing required option --method");
    o.config = attentionConfig(args);
    const std::string rNote =
        args.has("r") || !attention::takes(o.config.method, attention::Param::R)
            ? std::string()
            : fitDefaultR(args, o.config, capture::CaptureReader(o.capturePath).info().headDim);
    o.probs = args.has("probs");
    ProgressBar bar("attend");
    o.job = bar.job();
    const analysis::AttendSummary s = analysis::runAttend(o);
    std::fputs(rNote.c_str(), stderr);
    if (s.entryLayers > 0)
        std::fprintf(stderr,
                     "note: %s holds DeepSeek-V4's compressed entries: on its %lld layers with "
                     "them the method chooses among the entries and the window's positions (the "
                     "result's indices below its entries count are entries), and its reads count "
                     "a key as its value\n",
                     o.capturePath.c_str(), static_cast<long long>(s.entryLayers));
    for (const std::string& f : s.fitted) // (defaults sized for longer contexts, fitted)
        std::fprintf(stderr, "note: %s: %s\n", attention::methodName(o.config.method).c_str(),
                     f.c_str());
    // What the compression ratio does not say (SPARQ.md §5).
    const attention::AttentionConfig& used = s.config;
    if (s.stepsCovered > 0)
        std::fprintf(
            stderr,
            "note: k = %lld reaches the length at %lld of %lld decode steps (captured queries "
            "× layers): there the method "
            "attends every position, as dense does, and its transfer formula (not "
            "clamped, SPARQ.md §5) counts more than dense's\n",
            static_cast<long long>(used.k), static_cast<long long>(s.stepsCovered),
            static_cast<long long>(s.steps));
    const bool perHead = (attention::takes(used.method, attention::Param::Gqa) &&
                          used.gqa == attention::GroupSelect::PerHead) ||
                         (attention::takes(used.method, attention::Param::Components) &&
                          used.components == attention::ComponentSelect::PerHead);
    if (perHead && s.groupSize > 1)
        std::fprintf(stderr,
                     "note: each of a KV group's %lld heads selects on its own, but the "
                     "compression ratio counts one selection per group (per-head selection is "
                     "not modelled, SPARQ.md §5): the rows read can be up to %lld times the "
                     "sparse terms\n",
                     static_cast<long long>(s.groupSize), static_cast<long long>(s.groupSize));
    if (args.has("json")) {
        std::printf("%s\n", analysis::attendSummaryJson(s, s.config).c_str());
    } else {
        std::printf("%s: %lld examples, %lld queries per head; mean relative error %.4g, "
                    "top-k agreement %.4f, compression ratio %.4f; wrote %s\n",
                    attention::methodName(o.config.method).c_str(),
                    static_cast<long long>(s.examples), static_cast<long long>(s.queries),
                    s.relError, s.agreement, s.compressionRatio, o.outPath.c_str());
    }
    return 0;
}

int runCalibrate(const std::vector<std::string>& argv) {
    const Args args(argv, {"capture", "method", "out", "mode"}, {"uncentered"});
    if (!args.positional().empty())
        throw UsageError("unexpected argument '" + args.positional().front() + "'");
    analysis::CalibrateOptions o;
    o.capturePath = args.required("capture");
    const std::string out = args.required("out");
    try {
        o.method = attention::parseMethod(args.required("method"));
        if (const auto m = args.get("mode"))
            o.mode = attention::parseChannelMode(*m);
    } catch (const attention::AttentionError& e) {
        throw UsageError(e.what());
    }
    if (!attention::methodInfo(o.method).calibrated)
        throw UsageError("--method: " + attention::methodName(o.method) + " has no calibration (" +
                         attention::calibratedMethodNames() + ")");
    if (args.has("mode") && !attention::methodSpec(o.method).calibrator->takesMode) {
        std::string takers;
        for (const attention::MethodSpec* s : attention::methodSpecs())
            if (s->calibrator && s->calibrator->takesMode)
                takers += (takers.empty() ? "" : ", ") + std::string(s->info.name);
        throw UsageError("--mode applies to " + takers + " only");
    }
    o.center = !args.has("uncentered");
    ProgressBar bar("calibrate");
    o.job = bar.job();
    capture::CalibrationInfo info;
    const auto cal = analysis::calibrateCapture(o, &info);
    capture::writeCalibration(out, *cal, info);
    std::printf("%s calibration of %lld layers from %s; wrote %s\n",
                attention::methodName(o.method).c_str(), static_cast<long long>(info.nLayers),
                o.capturePath.c_str(), out.c_str());
    return 0;
}

int runStats(const std::vector<std::string>& argv) {
    std::set<std::string> valued = kAttnValued;
    valued.erase("method");
    valued.insert(
        {"capture", "json", "coverage-k", "alpha-r", "alpha-k", "seed", "methods", "recall-k"});
    const Args args(argv, valued, kAttnFlags);
    if (!args.positional().empty())
        throw UsageError("unexpected argument '" + args.positional().front() + "'");
    if (args.has("k")) // (kept valued for this message; the usage leaves it out)
        throw UsageError("stats measures recall at each k of --recall-k K,K,…, not --k");
    const std::string capturePath = args.required("capture");
    const std::string out = args.required("json");
    analysis::StatsOptions o =
        analysis::statsDefaultsFor(capture::CaptureReader(capturePath).info());
    o.capturePath = capturePath;
    o.coverageK = args.integer("coverage-k").value_or(o.coverageK);
    o.alphaR = args.integer("alpha-r").value_or(o.alphaR);
    o.alphaK = args.integer("alpha-k").value_or(o.alphaK);
    o.projectionSeed = static_cast<uint64_t>(args.integer("seed").value_or(0));
    // Recall@k of each method at each k (METHODS.md §9.2), the ATTN options for the rest.
    const std::vector<int64_t> ks =
        args.integerList("recall-k", 1).value_or(std::vector<int64_t>{16, 32, 64, 128});
    o.recall = analysis::defaultRecallConfigs(ks, attentionConfigs(args));
    std::vector<attention::Method> listed;
    for (const attention::MethodInfo& m : attention::methods())
        listed.push_back(m.id);
    if (const auto m = args.get("methods")) { // only these, in this order
        listed.clear();
        std::vector<attention::AttentionConfig> chosen;
        std::stringstream ss(*m);
        std::string item;
        while (std::getline(ss, item, ',')) {
            attention::Method method;
            try {
                method = attention::parseMethod(item);
            } catch (const attention::AttentionError& e) {
                throw UsageError(std::string("--methods: ") + e.what());
            }
            for (const attention::AttentionConfig& c : o.recall)
                if (c.method == method)
                    chosen.push_back(c);
            listed.push_back(method);
        }
        o.recall = chosen;
        if (listed.empty())
            throw UsageError("--methods needs at least one method");
    }
    noteIgnoredOptions(args, listed); // every method's without --methods
    ProgressBar bar("stats");
    o.job = bar.job();
    const analysis::StatsResult r = analysis::runStats(o);
    std::FILE* said = writeJsonResult(out, analysis::statsJson(r, o));
    std::fprintf(
        said,
        "%lld examples: coverage(k=%lld) %.4f, kurtosis %.3f, |z|>3 mass ratio %.2f; wrote %s\n",
        static_cast<long long>(r.examples), static_cast<long long>(o.coverageK),
        r.coverage.mean().item<double>(), r.kurtosis.nanmean().item<double>(),
        r.zmassRatio.nanmean().item<double>(), out == "-" ? "stdout" : out.c_str());
    return 0;
}

} // namespace sparqlab::cli
