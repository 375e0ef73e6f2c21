#pragma once
/// \file bench.h
/// Timing of dense against SparQ decode attention (the fast path of decode/engine.h) and the
/// machine's memory bandwidth, for `sparqlab-cli bench` (CONTRACTS.md §5) and the GUI's
/// timing panel. Benchmarks, not tests: the numbers depend on the machine.

#include "attention.h"
#include "base/job.h"
#include "base/system_memory.h"

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace sparqlab::attention {

/// One benchmark configuration (the paper's Appendix F shapes by default).
struct DecodeBenchConfig {
    int64_t batch = 1;
    int64_t heads = 32;
    int64_t kvHeads = 32;
    int64_t seq = 4096;
    int64_t headDim = 128;
    int64_t r = 32;
    int64_t k = 128;
    at::ScalarType dtype = at::kFloat; ///< storage of K and V: kFloat, kHalf or kBFloat16
    std::string device = "cpu";        ///< "cpu" or "cuda"
    int repeats = 10;                  ///< timed samples
    int warmup = 2;                    ///< untimed samples first
    double minSampleSeconds = 0.02;    ///< GPU: each sample repeats the call this long (the CPU
                                       ///< times one call after evicting the caches and running
                                       ///< the method once on a small cache of its own)
    uint64_t seed = 0;

    /// Bytes of memory the configuration needs: the KV cache with both K layouts, its float32
    /// random fill and, on the CPU, the buffer that evicts the caches between timed calls (the
    /// small cache that brings the code back after it is counted where its k is known).
    int64_t bytesNeeded() const;
};

/// One sequence of a model's shape at `seq` positions, timed as the lab and `eval
/// --measure-speed` time it: `repeats` samples after one warm-up, each at least 5 ms on a GPU.
DecodeBenchConfig modelShapeBench(int64_t heads, int64_t kvHeads, int64_t headDim, int64_t seq,
                                  const std::string& device, int repeats);

/// Timings of one configuration, in microseconds per decode step of the whole batch.
struct DecodeBenchResult {
    double denseUs = 0, denseStderrUs = 0;    ///< the faster of the two dense kernels
    double denseOursUs = 0, denseTorchUs = 0; ///< our fused kernel; libtorch's operations
    std::string denseImpl;                    ///< "sparqlab" or "libtorch", the faster
    double sparqUs = 0, sparqStderrUs = 0;
    double speedup = 0;                    ///< dense_us / sparq_us
    double theoreticalSpeedup = 0;         ///< (2·S·d + 2·d) / (S·r + 2·k·d + 4·d)
    double denseBytes = 0, sparqBytes = 0; ///< per the transfer model, whole batch
    double denseGbps = 0, sparqGbps = 0;
    int repeats = 0;
    /// CUDA rows (times are medians of single calls, each after the L2 cache was evicted and the
    /// device had gone idle, between CUDA events): the same steps replayed from a CUDA graph
    /// (0: not run by the CUDA kernels), and PyTorch's scaled_dot_product_attention at the same
    /// shape and dtype (0: this libtorch has none), the anchor of CUDA.md §8.
    double denseGraphUs = 0, sparqGraphUs = 0, sdpaUs = 0;
};

/// Runs one configuration. Throws AttentionError on a bad configuration (r > head_dim,
/// k > S, heads not a multiple of KV heads, no CUDA, not enough memory). `job` is checked
/// between samples (cancelled: base::Cancelled).
DecodeBenchResult benchDecode(const DecodeBenchConfig& config, const base::Job& job = {});

/// The same for several (r, k) on one cache: dense is timed once, SparQ per pair; the
/// config's own r and k are ignored.
std::vector<DecodeBenchResult> benchDecodeMany(const DecodeBenchConfig& config,
                                               const std::vector<std::pair<int64_t, int64_t>>& rk,
                                               const base::Job& job = {});

/// One method timed against dense on the same cache (`bench --methods`).
struct MethodBenchResult {
    AttentionConfig config;        ///< the method and its parameters as timed
    double us = 0, stderrUs = 0;   ///< per decode step of the whole batch
    double count = 0;              ///< positions attended per head (top-p: the mean budget)
    double bytes = 0, gbps = 0;    ///< per the method's transfer formula, whole batch
    double theoreticalSpeedup = 0; ///< dense's transfer / the method's (METHODS.md §10)
    double speedup = 0;            ///< dense_us / us, measured in the same run
    double denseUs = 0, denseStderrUs = 0, denseGbps = 0; ///< our dense kernel, same run
    /// Medians and interquartile ranges of the samples (what the lab shows: robust to the
    /// stray slow sample of a busy machine).
    double medianUs = 0, iqrUs = 0, denseMedianUs = 0, denseIqrUs = 0;
    double q1Us = 0, q3Us = 0, denseQ1Us = 0, denseQ3Us = 0; ///< the quartiles themselves
    int repeats = 0;
    /// CUDA rows: the step replayed from a CUDA graph (median; 0 where the CUDA kernels do not
    /// run it), our dense the same way, and PyTorch's scaled_dot_product_attention (0: none).
    double graphUs = 0, denseGraphUs = 0, sdpaUs = 0;
    /// CUDA rows: whether the CUDA kernels ran it (else libtorch's operations).
    bool kernels = false;
};

/// The f-quantile (0 ≤ f ≤ 1) of timed samples, interpolated linearly between the order statistics
/// (f = 0.5: the median); 0 for no samples. Every timing summary of the project takes it.
double sampleQuantile(std::vector<double> samples, double f);

/// A measured speed-up over dense with its interval: the median ratio, and the ratio's lower and
/// upper ends from the quartiles (dense's first over the method's third, dense's third over the
/// method's first) — what the spread of a busy machine allows. The lab's timing and
/// `eval --measure-speed` report it.
struct SpeedupInterval {
    double median = 0, lower = 0, upper = 0;
};
SpeedupInterval speedupInterval(double denseMedian, double denseQ1, double denseQ3, double median,
                                double q1, double q3);
SpeedupInterval speedupInterval(const MethodBenchResult& r);

/// Times every configuration of `methods` (each with its own method, r, k, page size, p;
/// all run by the decode engine: decodeSupports) on one random cache of `config`'s shape,
/// taking turns with our dense kernel sample by sample. Loki's basis is calibrated on the
/// cache's keys (METHODS.md §4.1) and Double Sparsity's channels on them and random queries
/// (§5.1); top-p methods report the mean count they attended (from attend() on batch row 0).
std::vector<MethodBenchResult> benchDecodeMethods(const DecodeBenchConfig& config,
                                                  const std::vector<AttentionConfig>& methods,
                                                  const base::Job& job = {});

/// Memory bandwidth of this machine, GB/s (10⁹ bytes), measured on buffers much larger than
/// the caches with every intra-op thread: a STREAM-like copy (bytes read + written) and a
/// read-only sum.
struct Bandwidth {
    double copyGbps = 0;
    double readGbps = 0;
};
Bandwidth measureBandwidth(int64_t bytesPerBuffer = int64_t{512} << 20, int repeats = 5);
/// The same for `device` ("cpu", or "cuda": a device-to-device copy of bytesPerBuffer; the read
/// figure is then the copy's too).
Bandwidth measureBandwidth(const std::string& device, int64_t bytesPerBuffer, int repeats = 5);

/// True when libtorch was built with CUDA and a device is present.
bool cudaAvailable();

} // namespace sparqlab::attention
