#pragma once
/// \file generation_speed.h
/// End-to-end token generation speed (the paper's Fig. 10, docs/gpu.md): a model's cache
/// prefilled with S random tokens for each of B sequences, then greedy decode steps timed with
/// each attention method, beside the limit the memory bandwidth sets (every weight and the
/// bytes the method reads from the cache, once per step).

#include "attention/attention.h"
#include "base/job.h"

#include <cstdint>
#include <string>
#include <vector>

namespace sparqlab::model {
class Model;
struct ModelConfig;
} // namespace sparqlab::model

namespace sparqlab::analysis {

/// What to time.
struct GenerationSpeedOptions {
    int64_t batch = 1;
    std::vector<int64_t> lengths{4096}; ///< S: the prefilled positions
    /// Each method's configuration; a calibrated one without its calibration (Loki, Double
    /// Sparsity) is calibrated on the first 1,024 tokens of the first sequence's prompt.
    std::vector<attention::AttentionConfig> methods{attention::AttentionConfig{}};
    int64_t warmupSteps = 4; ///< decode steps before the timed ones (not counted)
    int64_t timedSteps = 32; ///< decode steps timed
    uint64_t seed = 0;       ///< of the random prompt tokens
    /// > 0: SparQ's k at each length for this share of dense transfers (sparqKForCompression;
    /// a length where no k reaches it is an InputError).
    double sparqCompression = 0;
    double copyGbps = 0; ///< the device's copy bandwidth (10⁹ B/s), for the limit; 0: none
    /// On a GPU, decode steps as CUDA graphs where the model allows it (model::KVCache::cudaGraphs)
    bool cudaGraphs = true;
    base::Job job;
};

/// One (S, method) measurement.
struct GenerationSpeedRow {
    int64_t batch = 0, seq = 0;
    std::string method;
    int64_t r = 0, k = 0;            ///< the method's (0 where it has none)
    double compression = 1;          ///< the attention's transfer ratio to dense (SPARQ.md §5)
    double stepMs = 0;               ///< one decode step of the whole batch
    double tokensPerSecond = 0;      ///< per sequence: 1000 / stepMs
    double bytesPerStep = 0;         ///< weights + the cache bytes the method reads
    double limitTokensPerSecond = 0; ///< copy bandwidth / bytesPerStep (0: no bandwidth given)
    double prefillSeconds = 0;       ///< the dense prefill of this S (shared by the methods)
    /// How the steps ran: "graphs" (CUDA graphs replayed), "eager", or why recording failed.
    std::string steps = "eager";
    /// With graphs: the GPU time of a step's graphs replayed alone (all but the attention), and
    /// the rate at which they read the weights (bytes of the weights a token reaches / that
    /// time); 0 without.
    double graphsMs = 0, graphsGbps = 0;
    /// On a GPU: the host's time to issue one step (the median of a few steps, each begun on an
    /// idle device, timed up to the return of the last launch). Near stepMs, the host sets the
    /// pace, not the device; 0 on the CPU, where issuing is computing.
    double hostMs = 0;
};

/// SparQ's k for `compression` of dense transfers at S with rank r and head dimension d: the
/// largest k ≤ S whose transfer ratio (attention::compressionRatio, SPARQ.md §5) is at most
/// `compression`; 0 when even k = 1 reads more (r alone is too large a share).
int64_t sparqKForCompression(double compression, int64_t S, int64_t d, int64_t r);

/// Bytes one decode step moves at S with `attn` for `batch` sequences, `elementSize` bytes each:
/// `sparqlab-cli traffic`'s count (decodeTraffic: the weights a token reaches, every cache read and
/// written) less what the method saves of the attention layers' cache traffic.
double decodeStepBytes(const model::ModelConfig& c, const attention::AttentionConfig& attn,
                       int64_t S, int64_t batch, int64_t elementSize);

/// Times greedy generation with `model` (on its device) for every length and method: one dense
/// prefill per length, each method replayed from it (its state restored, the other methods'
/// extras dropped). Throws model::InputError when a length does not fit the context with the
/// steps.
std::vector<GenerationSpeedRow> measureGenerationSpeed(model::Model& model,
                                                       const GenerationSpeedOptions& o);

/// One JSON object per row (a line of `sparqlab-cli bench-generate --json`); `model` labels it
/// (the model folder's name).
std::string generationSpeedJson(const GenerationSpeedRow& row, const std::string& model,
                                const std::string& device, const std::string& dtype);

} // namespace sparqlab::analysis
