// sparqlab-cli overlap and traffic (docs/learned-sparse-and-hybrid.md): which keys the methods
// choose beside the model's own indexer (DSA, MiniMax-M3), and what a decode step of a hybrid
// model reads by layer kind.

#include "commands.h"
#include "model_args.h"

#include "analysis/decode_traffic.h"
#include "analysis/selection_overlap.h"
#include "attention/method_table.h"
#include "base/atomic_file.h"
#include "model/model.h"

#include <algorithm>
#include <cstdio>
#include <string>

namespace sparqlab::cli {

int runOverlap(const std::vector<std::string>& argv) {
    std::set<std::string> valued = kAttnValued;
    valued.erase("method");
    valued.erase("k");
    valued.insert({"capture", "json", "methods", "ks", "queries"});
    const Args args(argv, valued, kAttnFlags);
    if (!args.positional().empty())
        throw UsageError("unexpected argument '" + args.positional().front() + "'");
    analysis::OverlapOptions o;
    o.capturePath = args.required("capture");
    const std::string out = args.required("json");
    o.methods = methodList(args, args.get("methods").value_or("sparq,quest,oracle"));
    o.ks = args.integerList("ks", 1).value_or(o.ks);
    o.queries = args.integer("queries").value_or(o.queries);
    if (o.queries < 1)
        throw UsageError("--queries must be at least 1");
    ProgressBar bar("overlap");
    o.job = bar.job();
    const analysis::OverlapResult r = analysis::runOverlap(o);
    std::FILE* said = writeJsonResult(out, analysis::overlapJson(r, o));
    std::fprintf(said, "%zu rows (layer, method, k) over %lld examples%s; wrote %s\n",
                 r.rows.size(), static_cast<long long>(r.examples),
                 r.hasIndexer ? ", beside the model's indexer" : "",
                 out == "-" ? "stdout" : out.c_str());
    return 0;
}

int runTraffic(const std::vector<std::string>& argv) {
    std::set<std::string> valued = kAttnValued;
    valued.insert({"model", "length", "bytes", "state-bytes", "batch"});
    std::set<std::string> flags = kAttnFlags;
    flags.insert("json");
    const Args args(argv, valued, flags);
    if (!args.positional().empty())
        throw UsageError("unexpected argument '" + args.positional().front() + "'");
    const int64_t S = args.integer("length").value_or(0);
    if (S < 1)
        throw UsageError("--length must be given, at least 1");
    const double bytes = args.number("bytes").value_or(2.0);
    const int64_t batch = args.integer("batch").value_or(1);
    if (batch < 1)
        throw UsageError("--batch must be at least 1");
    if (!(bytes > 0))
        throw UsageError("--bytes must be positive (bytes per element)");
    const double stateBytes = args.number("state-bytes").value_or(bytes);
    if (!(stateBytes > 0))
        throw UsageError("--state-bytes must be positive (bytes per element of the state)");
    model::ModelOpenOptions mo;
    mo.loadWeights = false;
    mo.loadTokenizer = false;
    const auto model = openModel(args, mo);
    const attention::AttentionConfig method = attentionConfig(args);
    const analysis::DecodeTraffic t =
        analysis::decodeTraffic(model->config(), S, method, bytes, batch, stateBytes);
    if (args.has("json")) {
        std::printf("%s\n", analysis::decodeTrafficJson(t, model->config(), method).c_str());
        return 0;
    }
    const double mib = bytes / (1024.0 * 1024.0), stateMib = stateBytes / (1024.0 * 1024.0);
    char perElement[64];
    if (stateBytes == bytes)
        std::snprintf(perElement, sizeof perElement, "%g bytes per element", bytes);
    else
        std::snprintf(perElement, sizeof perElement, "%g bytes per element, the state %g", bytes,
                      stateBytes);
    // A model that picks its own keys (an indexer, DeepSeek-V4's entries) is the reference of the
    // method's ratio (CONTRACTS §11), not dense attention over every position.
    const model::ModelConfig& mc = model->config();
    const bool ownSelection = mc.indexer.active() || mc.compressed.active();
    std::string notes; // what the cache row holds beyond S positions a layer
    char buf[128];
    if (t.indexerKeys > 0) {
        std::snprintf(buf, sizeof buf, "%.1f MiB of it indexer keys", t.indexerKeys * mib);
        notes = buf;
    }
    if (t.boundedLayers > 0) {
        std::snprintf(buf, sizeof buf, "%s%lld of the layers read a window or a chunk",
                      notes.empty() ? "" : "; ", static_cast<long long>(t.boundedLayers));
        notes += buf;
    }
    // The kind of layer that keeps the state, by its label (Mamba-2, Gated DeltaNet, ...); the
    // rows' labels padded to one width; no state row for a model without such layers.
    const std::string kind = model->captureInfo().linearKind();
    const std::string rows[] = {"attention layers (" + std::to_string(t.attentionLayers) + "):",
                                (kind.empty() ? std::string("state") : kind) + " layers (" +
                                    std::to_string(t.linearLayers) + "):",
                                "weights reached:"};
    int width = 0;
    for (const std::string& r : rows)
        width = std::max(width, static_cast<int>(r.size()));
    std::printf("one decode step of %lld sequence%s at %lld tokens (%s):\n"
                "  %-*s %.1f MiB of KV cache%s%s%s\n",
                static_cast<long long>(batch), batch == 1 ? "" : "s", static_cast<long long>(S),
                perElement, width, rows[0].c_str(), t.attentionCache * mib,
                notes.empty() ? "" : " (", notes.c_str(), notes.empty() ? "" : ")");
    if (t.linearLayers > 0)
        std::printf("  %-*s %.1f MiB of state\n", width, rows[1].c_str(), t.linearState * stateMib);
    std::printf("  %-*s %.1f MiB\n"
                "  attention share: %.1f%% of the cache traffic, %.1f%% of the step\n",
                width, rows[2].c_str(), t.weights * mib, 100 * t.attentionShareOfCache(),
                100 * t.attentionShareOfStep());
    if (ownSelection && method.method == attention::Method::Dense) {
        // "dense" here is the model as it runs: its own selection, the reference of the ratio.
        std::printf("  the model's own selection, as it runs (--method weighs another method in "
                    "its place against these reads)\n");
        return 0;
    }
    std::printf("  %s: %.3f of %s attention's reads; saves %.1f%% of the cache traffic, "
                "%.1f%% of the step\n",
                attention::methodName(method.method).c_str(), t.methodRatio,
                ownSelection ? "the model's own" : "dense", 100 * t.savedOfCache(),
                100 * t.savedOfStep());
    return 0;
}

} // namespace sparqlab::cli
