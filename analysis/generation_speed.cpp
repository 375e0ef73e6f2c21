#include "generation_speed.h"

#include "analysis/calibrate_run.h"
#include "analysis/decode_traffic.h"
#include "attention/bench.h"
#include "attention/method_table.h"
#include "attention/transfer.h"
#include "model/input_error.h"
#include "model/model.h"

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>
#include <torch/types.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <sstream>

namespace sparqlab::analysis {

namespace att = sparqlab::attention;

int64_t sparqKForCompression(double compression, int64_t S, int64_t d, int64_t r) {
    auto within = [&](int64_t k) {
        return att::compressionRatio(att::Method::Sparq, S, d, k, r) <= compression;
    };
    if (S < 1 || !within(1))
        return 0;
    int64_t lo = 1, hi = S; // within(lo); the ratio grows with k
    while (lo < hi) {
        const int64_t mid = lo + (hi - lo + 1) / 2;
        if (within(mid))
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

namespace {

/// The bytes of a step: the traffic less what the method saves of it.
double stepBytes(const DecodeTraffic& t) {
    return t.totalBytes() * (1 - t.savedOfStep());
}

/// The runtime's linear-layer states are float32 (LinearState) whatever the weights' dtype.
constexpr double kStateBytes = 4;

} // namespace

double decodeStepBytes(const model::ModelConfig& c, const att::AttentionConfig& attn, int64_t S,
                       int64_t batch, int64_t elementSize) {
    return stepBytes(
        decodeTraffic(c, S, attn, static_cast<double>(elementSize), batch, kStateBytes));
}

namespace {

double secondsSince(std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

/// Greedy steps from `logits` [B, 1, V]: each step's argmax ids [B, 1] stay on the device.
at::Tensor greedySteps(model::CausalLMImpl& net, model::KVCache& cache, at::Tensor logits,
                       int64_t n, const att::AttentionConfig& attn) {
    for (int64_t i = 0; i < n; ++i) {
        const at::Tensor next = logits.select(1, logits.size(1) - 1).argmax(-1, true); // [B, 1]
        logits = net.forward(next, &cache, attn);
    }
    return logits;
}

} // namespace

std::vector<GenerationSpeedRow> measureGenerationSpeed(model::Model& model,
                                                       const GenerationSpeedOptions& o) {
    torch::NoGradGuard noGrad;
    model::CausalLMImpl& net = *model.net();
    const model::ModelConfig& c = net.config();
    // A few steps more on a GPU, each issued on an idle device: the host's own time (hostMs).
    const int64_t hostSteps = net.device().is_cpu() ? 0 : 5;
    const int64_t decodeSteps = o.warmupSteps + o.timedSteps + hostSteps;
    const int64_t element = static_cast<int64_t>(at::elementSize(net.dtype()));
    std::vector<GenerationSpeedRow> rows;
    int64_t done = 0;
    const int64_t total = static_cast<int64_t>(o.lengths.size() * o.methods.size());
    // A method's configuration at length S: SparQ's k for the compression asked for, checked.
    auto configAt = [&](att::AttentionConfig attn, int64_t S) {
        if (o.sparqCompression > 0 && attn.method == att::Method::Sparq) {
            attn.k = sparqKForCompression(o.sparqCompression, S, c.headDim, attn.r);
            std::ostringstream ratio; // 0.125, not 0.125000
            ratio << o.sparqCompression;
            if (attn.k == 0)
                throw model::InputError("SparQ with r = " + std::to_string(attn.r) +
                                        " of d = " + std::to_string(c.headDim) +
                                        " reads more than " + ratio.str() +
                                        " of dense's transfers at S = " + std::to_string(S) +
                                        " whatever k: give a smaller --r");
        }
        attn.validateFor(c.headDim, c.nLayers, c.nHeads, c.nKvHeads);
        return attn;
    };
    for (const int64_t S : o.lengths) { // everything checked before anything is measured
        if (S < 1 || S + decodeSteps > c.maxPositions)
            throw model::InputError("a length of " + std::to_string(S) + " with " +
                                    std::to_string(decodeSteps) +
                                    " decode steps does not fit the model's context of " +
                                    std::to_string(c.maxPositions) + " positions");
        for (const att::AttentionConfig& attn : o.methods)
            configAt(attn, S);
    }
    for (const int64_t S : o.lengths) {
        // The prompt: S random tokens per sequence, prefilled densely in chunks of 1024 positions
        // over the batch (the causal scores of a chunk stay [B, H, 1024 / B, S]).
        auto gen = at::detail::createCPUGenerator(o.seed + static_cast<uint64_t>(S));
        const at::Tensor prompt = at::randint(c.vocabSize, {o.batch, S}, gen, at::kLong);
        model::KVCache cache;
        cache.capacity = S + decodeSteps; // S − 1 prefilled, the last token, the steps
        cache.dimensionMajor = true;      // SparQ's step 1 reads K dimension-major
        cache.cudaGraphs = o.cudaGraphs;
        const auto t0 = std::chrono::steady_clock::now();
        at::Tensor logits;
        const int64_t chunk = std::max<int64_t>(1, 1024 / o.batch);
        for (int64_t s0 = 0; s0 < S - 1; s0 += chunk)
            logits = net.forward(prompt.slice(1, s0, std::min(S - 1, s0 + chunk)), &cache, {}, {},
                                 /*lastLogitsOnly=*/true);
        if (logits.defined())
            logits.sum().item<double>(); // waits for the device
        const double prefillSeconds = secondsSince(t0);
        std::vector<att::CausalState> prefilled; // each method starts from the same state
        for (const att::CausalState& st : cache.state)
            prefilled.push_back(st.clone());
        const auto linearPrefilled = cache.copyLinear(); // a hybrid's recurrent states
        std::map<att::Method, std::shared_ptr<att::Calibration>> calibrations;
        for (const att::AttentionConfig& method : o.methods) {
            o.job.check();
            att::AttentionConfig attn = configAt(method, S);
            if (att::methodInfo(attn.method).calibrated && !attn.calibration) {
                auto& cal = calibrations[attn.method];
                if (!cal) { // on the first sequence's first tokens, as generate does on its prompt
                    const at::Tensor head = prompt[0].slice(0, 0, std::min<int64_t>(S, 1024));
                    cal = calibrateOnTokens(
                        model,
                        std::vector<int64_t>(head.data_ptr<int64_t>(),
                                             head.data_ptr<int64_t>() + head.numel()),
                        attn.method);
                }
                attn.calibration = cal;
            }
            attn = model::onDevice(attn, net.device());
            for (const auto& f : cache.fast) // no other method's pages or projection kept up
                if (f)
                    f->dropExtras();
            cache.truncate(S - 1, &linearPrefilled);
            cache.state.clear();
            for (const att::CausalState& st : prefilled)
                cache.state.push_back(st.clone());
            // The prompt's last token with the method, the warm-up, then the timed steps.
            logits = net.forward(prompt.slice(1, S - 1, S), &cache, attn);
            logits = greedySteps(net, cache, logits, o.warmupSteps, attn);
            logits.sum().item<double>();
            const int64_t replayed = cache.graphs ? cache.graphs->replays() : 0;
            const auto t1 = std::chrono::steady_clock::now();
            logits = greedySteps(net, cache, logits, o.timedSteps, attn);
            logits.sum().item<double>();
            const double seconds = secondsSince(t1);
            GenerationSpeedRow row;
            if (cache.graphs && !cache.graphs->failure().empty())
                row.steps = cache.graphs->failure();
            else if (cache.graphs && cache.graphs->replays() - replayed == o.timedSteps)
                row.steps = "graphs";
            const DecodeTraffic traffic =
                decodeTraffic(c, S, attn, static_cast<double>(element), o.batch, kStateBytes);
            if (row.steps == "graphs") { // where the step's time goes: the graphs, the rest
                double us = 0;
                for (const double t : cache.graphs->segmentMicroseconds(10))
                    us += t;
                row.graphsMs = us / 1000;
                row.graphsGbps = us > 0 ? traffic.weights * element / (us * 1e3) : 0;
            }
            if (hostSteps > 0) {
                std::vector<double> issue;
                for (int64_t i = 0; i < hostSteps; ++i) {
                    const auto t = std::chrono::steady_clock::now();
                    logits = greedySteps(net, cache, logits, 1, attn);
                    issue.push_back(1000 * secondsSince(t));
                    logits.sum().item<double>(); // the next step begins on an idle device
                }
                row.hostMs = att::sampleQuantile(std::move(issue), 0.5);
            }
            row.batch = o.batch;
            row.seq = S;
            row.method = att::methodName(attn.method);
            const att::MethodInfo& info = att::methodInfo(attn.method);
            auto uses = [&info](att::Param p) {
                return std::find(info.params.begin(), info.params.end(), p) != info.params.end();
            };
            row.r = uses(att::Param::R) ? attn.r : 0;
            row.k = uses(att::Param::K) ? attn.k : 0;
            row.compression = traffic.methodRatio;
            row.stepMs = 1000 * seconds / static_cast<double>(std::max<int64_t>(1, o.timedSteps));
            row.tokensPerSecond = row.stepMs > 0 ? 1000 / row.stepMs : 0;
            row.bytesPerStep = stepBytes(traffic);
            row.limitTokensPerSecond = o.copyGbps > 0 ? o.copyGbps * 1e9 / row.bytesPerStep : 0;
            row.prefillSeconds = prefillSeconds;
            rows.push_back(row);
            o.job.step(++done, total, std::string(row.method) + " at S = " + std::to_string(S));
        }
    }
    return rows;
}

std::string generationSpeedJson(const GenerationSpeedRow& r, const std::string& model,
                                const std::string& device, const std::string& dtype) {
    nlohmann::ordered_json j{{"model", model},
                             {"device", device},
                             {"dtype", dtype},
                             {"batch", r.batch},
                             {"seq", r.seq},
                             {"method", r.method},
                             {"r", r.r},
                             {"k", r.k},
                             {"compression", r.compression},
                             {"step_ms", r.stepMs},
                             {"tokens_per_s", r.tokensPerSecond},
                             {"bytes_per_step", r.bytesPerStep},
                             {"limit_tokens_per_s", r.limitTokensPerSecond},
                             {"fraction_of_limit", r.limitTokensPerSecond > 0
                                                       ? r.tokensPerSecond / r.limitTokensPerSecond
                                                       : 0.0},
                             {"prefill_s", r.prefillSeconds},
                             {"steps", r.steps}};
    if (r.graphsMs > 0) {
        j["graphs_ms"] = r.graphsMs;
        j["graphs_gbps"] = r.graphsGbps;
    }
    if (r.hostMs > 0)
        j["host_ms"] = r.hostMs;
    return j.dump();
}

} // namespace sparqlab::analysis
