#pragma once
/// \file cuda/decode_cuda.h
/// The CUDA decode kernels (cuda/kernels.cu) behind a plain C++ interface: no CUDA and no
/// libtorch header, so that the decode engine, the method units and the benchmark include it in
/// every build. A build without nvcc links cuda/stub.cpp instead, whose entry points say so.
///
/// A decode step is composed of pieces (docs/design/CUDA.md):
/// - dense: flash-decoding over the sequence, split over blocks when the rows alone do not fill
///   the GPU, the group's query heads reading K and V once, partial softmax states merged;
/// - a selecting method: step 1 writes a score per position (or page) and head — from r rows of
///   a dimension-major copy of K (SparQ, sparq-top-p, Loki, Double Sparsity), from the page
///   bounds (Quest) or exactly (oracle-top-p) — with each chunk's softmax state; step 2, one
///   block per (row, selection unit), ranks them by the GQA rule, takes the exact top-k (or the
///   top-p budget, or Quest's pages), attends over the chosen rows of K and V with the exact
///   softmax and adds SparQ's mean-value term (Eq. 10).
/// Every launch is asynchronous on the given stream: no host synchronisation, no allocation, so a
/// step can be captured in a CUDA graph.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

namespace sparqlab::attention::cuda {

enum class Storage { F32, F16, BF16 };

/// Where a step reads from (device pointers of the decode cache, decode/engine.h).
struct CacheView {
    const void* k = nullptr;  ///< [B, H, stride, D]
    const void* v = nullptr;  ///< [B, H, stride, D]
    const void* kt = nullptr; ///< [B, H, D, stride] dimension-major K (or null)
    const void* kp = nullptr; ///< [B, H, D, stride] Loki's keys in its basis (or null)
    const void *pmin = nullptr, *pmax = nullptr; ///< [B, H, pagesCap, D] Quest's page bounds
    const double* vsum = nullptr;                ///< [B, H, D] Σ V over the positions held
    const float* basis = nullptr;                ///< [H, D, D] Loki's basis (float32)
    int64_t B = 0, H = 0, D = 0;
    int64_t stride = 0; ///< positions allocated per row (a multiple of 8)
    int64_t S = 0;      ///< positions held
    int64_t pagesCap = 0, pageSize = 0;
    Storage storage = Storage::F32;
};

/// Step 1: what a selecting method scores.
enum class Score {
    None,      ///< dense
    LowRank,   ///< Σ_i c[h, i]·row_i over rows of a dimension-major K (Rows says which)
    PageBound, ///< Quest's upper bound from each page's min and max key
    Exact,     ///< q·K_j·scale (oracle-top-p)
};
/// LowRank's rows and their coefficients.
enum class Rows {
    None,
    SparqComponents, ///< the r largest of Σ_h |q_h| (ties to the lower index), c = q·(1/τ)
    Basis,           ///< the first r rows of Loki's projected keys, c = (q·P)_i·scale
    Channels,        ///< each head's r calibrated channels of K, c = q_ch·scale
};
/// Step 2: what is chosen among the scored items.
enum class Select {
    TopK,  ///< the k − l best positions, then the local window
    TopP,  ///< the fewest best positions holding mass p (at most k), the window first
    Pages, ///< Quest: the best pages and the forced last ones, all their positions
};
/// The GQA rule (SPARQ.md §2.6), as attention.h's GroupSelect.
enum class Gqa { SumLogits, SumProbs, PerHead };

/// One decode step's request. Pointers are device pointers.
struct Request {
    Score score = Score::None;
    Rows rows = Rows::None;
    Select select = Select::TopK;
    Gqa gqa = Gqa::SumProbs;
    const float* q = nullptr; ///< [B, Hq, D] float32
    float* y = nullptr;       ///< [B, Hq, D] float32 output
    float* alpha = nullptr;   ///< [B, Hq] α (1 without a mean-value term); may be null
    int64_t Hq = 0;
    float scale = 0;          ///< the logit scale
    bool defaultScale = true; ///< scale = 1/sqrt(D) (SparQ folds another one into step 1)
    int64_t r = 0;            ///< r_eff (LowRank)
    int64_t k = 0;            ///< k_eff = min(k, S) (Quest: min(k, S + P))
    int64_t local = 0;        ///< the local window in effect (before clamping to k)
    int tau = 0;              ///< TauMode as an int: 0 adaptive, 1 √D, 2 √r, 3 one, 4 fixed
    double tauValue = 1;
    bool meanValue = false;            ///< SparQ's Eq. 10
    double p = 0.9;                    ///< top-p mass
    const int64_t* channels = nullptr; ///< Double Sparsity: [Hq, r] (device)
    /// Tests: the positions each selection unit attended, [B·H·units, selStride] int32, −1
    /// padded, and their number [B·H·units] (units: the group, or each head with PerHead).
    int32_t* selOut = nullptr;
    int32_t* selCount = nullptr;
    int64_t selStride = 0;
};

/// Why the kernels do not run `req` on `cache` (shape limits: D a multiple of 8 up to 256, at
/// most 64 query heads per KV head, the budgets that fit on chip), or empty when they do.
std::string unsupported(const CacheView& cache, const Request& req);
/// Device memory the step needs besides its inputs and outputs.
size_t workspaceBytes(const CacheView& cache, const Request& req);
/// The positions a selection unit may attend at most (the selOut stride it needs).
int64_t maxSelection(const CacheView& cache, const Request& req);
/// Enqueues the step on `stream` (a cudaStream_t; null: the legacy default stream). Throws
/// std::runtime_error on a CUDA error of the launch.
void launch(const CacheView& cache, const Request& req, void* workspace, size_t workspaceSize,
            void* stream);

/// The four entry points of a step as one value (DecodeAttention::runOnKernels): this build's
/// (kernels()), or another implementation of the same interface, such as the kernels' host
/// emulation (tests/cuda/simt).
struct Kernels {
    std::string (*unsupported)(const CacheView&, const Request&);
    size_t (*workspaceBytes)(const CacheView&, const Request&);
    int64_t (*maxSelection)(const CacheView&, const Request&);
    void (*launch)(const CacheView&, const Request&, void* workspace, size_t workspaceSize,
                   void* stream);
};
/// This build's kernels (the functions above; the stub's where nvcc was not found).
inline Kernels kernels() {
    return {&unsupported, &workspaceBytes, &maxSelection, &launch};
}

/// Whether this build has the kernels (nvcc found) and a CUDA device is present.
bool built();
bool deviceAvailable();
/// "NVIDIA H100 80GB HBM3, 132 SMs, 50 MiB L2, CUDA 13.0" (or why there is none).
std::string deviceSummary();

/// A device-side timer on a stream (CUDA events).
class EventTimer {
public:
    explicit EventTimer(void* stream = nullptr);
    ~EventTimer();
    EventTimer(const EventTimer&) = delete;
    EventTimer& operator=(const EventTimer&) = delete;
    void start();
    /// Records the end and waits for it; microseconds since start().
    double stopUs();

private:
    void* m_stream;
    void* m_start = nullptr;
    void* m_stop = nullptr;
};

/// Evicts the L2 cache before a timed call: reads a buffer twice its size on the stream, so that
/// the cache holds clean lines (a write would leave dirty ones for the timed call to write back).
class L2Flusher {
public:
    L2Flusher();
    ~L2Flusher();
    L2Flusher(const L2Flusher&) = delete;
    L2Flusher& operator=(const L2Flusher&) = delete;
    void operator()(void* stream = nullptr);

private:
    void* m_buf = nullptr;
    size_t m_bytes = 0;
};

/// A sequence of launches recorded once and replayed (a CUDA graph). `body` enqueues the work on
/// the stream it is given; replay() launches the graph on `stream`.
class Graph {
public:
    explicit Graph(const std::function<void(void* stream)>& body);
    ~Graph();
    Graph(const Graph&) = delete;
    Graph& operator=(const Graph&) = delete;
    void replay(void* stream = nullptr);

private:
    void* m_graph = nullptr;
    void* m_exec = nullptr;
    void* m_stream = nullptr;
};

/// Device-to-device copy bandwidth, GB/s (10⁹ bytes read + written per second), the best of
/// `repeats` copies of `bytes`: the roofline of a CUDA row of the benchmark.
double copyBandwidthGbps(size_t bytes = size_t{1} << 30, int repeats = 10);

/// Waits for every launch so far (tests).
void synchronize();

/// The current CUDA device's free and total memory in bytes (cudaMemGetInfo); zeros where
/// there is no device or no kernels in this build.
struct MemoryInfo {
    int64_t freeBytes = 0, totalBytes = 0;
};
MemoryInfo memoryInfo();

} // namespace sparqlab::attention::cuda
