// sparqlab-cli bench-generate: end-to-end token generation speed, dense against SparQ (the paper's
// Fig. 10, docs/gpu.md), on the CPU or the GPU, beside the limit the memory bandwidth sets.

#include "commands.h"
#include "model_args.h"

#include "analysis/generation_speed.h"
#include "attention/bench.h"
#include "attention/method_table.h"
#include "model/model.h"
#include "model/safetensors.h"

#include <cstdio>
#include <filesystem>

namespace sparqlab::cli {

int runBenchGenerate(const std::vector<std::string>& argv) {
    std::set<std::string> valued{"model",   "device",      "compute", "seq",    "batch",
                                 "methods", "compression", "steps",   "warmup", "seed"};
    valued.insert(kAttnValued.begin(), kAttnValued.end());
    std::set<std::string> flags{"json", "no-graphs"};
    flags.insert(kAttnFlags.begin(), kAttnFlags.end());
    const Args a(argv, valued, flags);
    if (!a.positional().empty())
        throw UsageError("unexpected argument '" + a.positional().front() + "'");
    if (a.has("method"))
        throw UsageError("bench-generate takes --methods LIST, not --method");
    analysis::GenerationSpeedOptions o;
    o.lengths = a.integerList("seq", 1).value_or(std::vector<int64_t>{4096});
    o.batch = a.integer("batch").value_or(1);
    o.timedSteps = a.integer("steps").value_or(32);
    o.warmupSteps = a.integer("warmup").value_or(4);
    o.seed = static_cast<uint64_t>(a.integer("seed").value_or(0));
    o.cudaGraphs = !a.has("no-graphs");
    if (o.batch < 1 || o.timedSteps < 1 || o.warmupSteps < 0)
        throw UsageError("--batch and --steps take N >= 1, --warmup N >= 0");
    const double compression = a.number("compression").value_or(0);
    if (a.has("compression") && !(compression > 0 && compression < 1))
        throw UsageError("--compression takes a ratio in (0, 1), such as 0.125");
    if (a.has("compression") && a.has("k")) // (SparQ's --k was replaced without a word)
        std::fprintf(stderr, "note: --compression sets SparQ's k at each length; --k applies to "
                             "the other methods\n");
    const std::vector<attention::AttentionConfig> methods =
        methodList(a, a.get("methods").value_or("dense,sparq"));
    for (const attention::AttentionConfig& c : methods)
        if (!attention::methodInfo(c.method).fastDecode)
            throw UsageError("--methods: " + attention::methodName(c.method) +
                             " has no fast decode step (sparqlab-cli methods)");
    if (methods.empty())
        throw UsageError("--methods needs at least one method");
    int64_t longest = 0;
    for (int64_t S : o.lengths)
        longest = std::max(longest, S);
    const int64_t positions = longest + o.warmupSteps + o.timedSteps; // per sequence
    model::ModelOpenOptions mo;
    mo.loadTokenizer = false;
    mo.cacheTokens = o.batch * positions; // on a GPU: with the weights, before they are read
    const auto model = openModel(a, mo);
    const bool cuda = model->device().is_cuda();
    const std::string device = cuda ? "cuda" : "cpu";
    model->checkCacheFits(positions, "bench-generate", o.batch);
    // The bandwidth the limit is drawn from, measured in this run on this device.
    o.copyGbps = attention::measureBandwidth(device, int64_t{512} << 20).copyGbps;
    o.methods = methods;
    o.sparqCompression = compression;
    ProgressBar bar("bench-generate");
    o.job = bar.job();
    const std::vector<analysis::GenerationSpeedRow> rows =
        analysis::measureGenerationSpeed(*model, o);
    const std::string dtypeName = model::torchDtypeName(model->computeDtype());
    const char* dtype = dtypeName.c_str();
    // The rows' label: the model's name as given (a hub id's NAME, a folder's name, "demo").
    std::filesystem::path given = std::filesystem::path(model->spec()).lexically_normal();
    if (given.filename().empty())
        given = given.parent_path();
    const std::string label = given.filename().string();
    if (a.has("json")) {
        for (const auto& r : rows)
            std::printf("%s\n", analysis::generationSpeedJson(r, label, device, dtype).c_str());
        return 0;
    }
    std::printf("%s, %s weights on %s, batch %lld, copy bandwidth %.0f GB/s\n",
                model->spec().c_str(), dtype, device.c_str(), static_cast<long long>(o.batch),
                o.copyGbps);
    // "-" where a row has no such value: dense's r and k, the GPU's graph and host times on a
    // CPU (they read as 0.00, as if measured).
    const auto cell = [](double x, const char* format) {
        if (!(x > 0))
            return std::string("-");
        char b[32];
        std::snprintf(b, sizeof b, format, x);
        return std::string(b);
    };
    std::printf("%8s  %-8s %5s %6s %8s %10s %12s %12s %8s %10s %8s  %s\n", "S", "method", "r", "k",
                "ratio", "ms/step", "tokens/s", "limit t/s", "of limit", "graphs ms", "host ms",
                "steps");
    for (const auto& r : rows)
        std::printf("%8lld  %-8s %5s %6s %8.3f %10.2f %12.1f %12.1f %8.2f %10s %8s  %s\n",
                    static_cast<long long>(r.seq), r.method.c_str(),
                    cell(static_cast<double>(r.r), "%.0f").c_str(),
                    cell(static_cast<double>(r.k), "%.0f").c_str(), r.compression, r.stepMs,
                    r.tokensPerSecond, r.limitTokensPerSecond,
                    r.limitTokensPerSecond > 0 ? r.tokensPerSecond / r.limitTokensPerSecond : 0.0,
                    cell(r.graphsMs, "%.2f").c_str(), cell(r.hostMs, "%.2f").c_str(),
                    r.steps.c_str());
    return 0;
}

} // namespace sparqlab::cli
