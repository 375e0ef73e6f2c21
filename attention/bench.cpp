#include "bench.h"

#include "decode/engine.h"
#include "decode/kernel.h"
#include "method_kit.h"
#include "method_spec.h"
#include "transfer.h"

#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <ATen/Parallel.h>

#include "cuda/decode_cuda.h"

#if __has_include(<torch/version.h>)
#include <torch/version.h>
#endif
#if __has_include(<ATen/ops/scaled_dot_product_attention.h>) && defined(TORCH_VERSION_MAJOR) &&   \
    (TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 5))
#include <ATen/ops/scaled_dot_product_attention.h>
#define SPARQLAB_HAVE_SDPA 1
#endif

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <map>
#include <numeric>
#include <optional>
#include <unistd.h>
#include <vector>

namespace sparqlab::attention {

namespace {

using Clock = std::chrono::steady_clock;
using detail::fail;

struct Samples {
    double mean = 0, stderr_ = 0;
    double median = 0, q1 = 0, q3 = 0; ///< quartiles (linear interpolation)
};

/// sampleQuantile of samples already sorted.
double sortedQuantile(const std::vector<double>& sorted, double f) {
    if (sorted.empty())
        return 0.0;
    const double at = f * static_cast<double>(sorted.size() - 1);
    const size_t lo = static_cast<size_t>(at);
    const size_t hi = std::min(lo + 1, sorted.size() - 1);
    return sorted[lo] + (at - static_cast<double>(lo)) * (sorted[hi] - sorted[lo]);
}

Samples summarize(const std::vector<double>& us) {
    Samples s;
    const double n = static_cast<double>(us.size());
    std::vector<double> sorted = us;
    std::sort(sorted.begin(), sorted.end());
    s.median = sortedQuantile(sorted, 0.5);
    s.q1 = sortedQuantile(sorted, 0.25);
    s.q3 = sortedQuantile(sorted, 0.75);
    s.mean = std::accumulate(us.begin(), us.end(), 0.0) / n;
    if (us.size() > 1) {
        double v = 0;
        for (const double x : us)
            v += (x - s.mean) * (x - s.mean);
        s.stderr_ = std::sqrt(v / (n - 1) / n);
    }
    return s;
}

/// The n samples of `all` from `from` on. (A loop, not vector::assign over a range: GCC 12
/// warned that the range's copy might pass memmove a null pointer, -Wnonnull.)
std::vector<Samples> samplesFrom(const std::vector<Samples>& all, size_t from, size_t n) {
    std::vector<Samples> out;
    for (size_t i = from; i - from < n && i < all.size(); ++i)
        out.push_back(all[i]);
    return out;
}

/// Waits for the device to finish (a one-element copy to the host).
void sync(const at::Tensor& y) {
    if (!y.device().is_cpu())
        (void)y.reshape(-1)[0].item<float>();
}

/// Bytes of the last-level cache (0 when the system does not say).
int64_t lastLevelCacheBytes() {
#ifdef _SC_LEVEL3_CACHE_SIZE
    const long l3 = ::sysconf(_SC_LEVEL3_CACHE_SIZE);
    if (l3 > 0)
        return l3;
#endif
    std::ifstream f("/sys/devices/system/cpu/cpu0/cache/index3/size"); // e.g. "32768K"
    int64_t n = 0;
    std::string unit;
    if (f >> n) {
        f >> unit;
        return unit == "M" ? n << 20 : unit == "K" ? n << 10 : n;
    }
    return 0;
}

/// Evicts the caches before a timed CPU call: every intra-op thread reads its share of a
/// buffer twice the last-level cache (at least 64 MiB), so that the call finds none of its own
/// data in its core's L2 or the shared L3. That is what a model's decode step sees (between
/// two steps of one layer every other layer's KV cache streams through), and without it a
/// call repeated with the same q found the rows its last tasks had read still in L3. Reading
/// only, the buffer leaves no dirty lines to write back during the timed call.
class CacheEvictor {
public:
    CacheEvictor() : m_buf(static_cast<size_t>(bytes()) / sizeof(float), 1.0f) {}
    void operator()() {
        const int64_t n = static_cast<int64_t>(m_buf.size());
        const float total = at::parallel_reduce(
            0, n, int64_t{1} << 16, 0.0f,
            [&](int64_t begin, int64_t end, float acc) {
                for (int64_t i = begin; i < end; i += 16) // one float per cache line
                    acc += m_buf[static_cast<size_t>(i)];
                return acc;
            },
            std::plus<float>());
        m_sink = m_sink + total;
    }
    static int64_t bytes() {
        return std::max<int64_t>(int64_t{64} << 20, 2 * lastLevelCacheBytes());
    }

private:
    std::vector<float> m_buf;
    volatile float m_sink = 0;
};

/// Inner repeats for `call` so that one sample lasts at least minSampleSeconds.
int innerRepeats(const DecodeBenchConfig& c, const std::function<at::Tensor()>& call) {
    const auto t0 = Clock::now();
    sync(call());
    const double once = std::chrono::duration<double>(Clock::now() - t0).count();
    return std::max(1, static_cast<int>(std::ceil(c.minSampleSeconds / std::max(once, 1e-7))));
}

/// Times each of `calls` (one decode step each), `config.repeats` samples after `warmup`. On
/// the CPU (`evict` given) a sample is one call after the caches were evicted and `warm[i]`, the
/// same method on a small cache of its own (SmallCache), ran; on a GPU it repeats the call so
/// that it lasts at least minSampleSeconds. The calls take turns sample
/// by sample (one new random q per round, shared by all), so that a machine whose speed
/// drifts during the run (a shared VM's memory bandwidth does, by ±20%) slows them alike and
/// their ratio stays fair.
std::vector<Samples> timeInterleaved(const DecodeBenchConfig& c, at::Tensor& q,
                                     const std::vector<std::function<at::Tensor()>>& calls,
                                     const base::Job& job, CacheEvictor* evict,
                                     const std::vector<std::function<at::Tensor()>>& warm = {}) {
    std::vector<int> inner;
    for (const auto& call : calls)
        inner.push_back(evict ? 1 : innerRepeats(c, call));
    std::vector<std::vector<double>> us(calls.size());
    for (int s = 0; s < c.warmup + c.repeats; ++s) {
        q.normal_();
        for (size_t i = 0; i < calls.size(); ++i) {
            job.check();
            if (evict)
                (*evict)();
            if (i < warm.size())
                (void)warm[i]();
            const auto t0 = Clock::now();
            at::Tensor y;
            for (int j = 0; j < inner[i]; ++j)
                y = calls[i]();
            sync(y);
            const double t = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
            if (s >= c.warmup)
                us[i].push_back(t / inner[i]);
        }
    }
    std::vector<Samples> out;
    for (const auto& u : us)
        out.push_back(summarize(u));
    return out;
}

/// Times each of `calls` on a GPU: per sample (one new random q per round, then `refresh`), each
/// call after the L2 cache was evicted and the device went idle, between CUDA events on the
/// default stream, so that its host work (launches, allocations) counts too. The calls take
/// turns sample by sample, as on the CPU.
std::vector<Samples> timeOnGpu(const DecodeBenchConfig& c, at::Tensor& q,
                               const std::function<void()>& refresh,
                               const std::vector<std::function<void()>>& calls,
                               const base::Job& job) {
    cuda::L2Flusher flush;
    cuda::EventTimer timer;
    std::vector<std::vector<double>> us(calls.size());
    for (int s = 0; s < c.warmup + c.repeats; ++s) {
        q.normal_();
        if (refresh)
            refresh();
        for (size_t i = 0; i < calls.size(); ++i) {
            job.check();
            flush();
            cuda::synchronize();
            timer.start();
            calls[i]();
            const double t = timer.stopUs();
            if (s >= c.warmup)
                us[i].push_back(t);
        }
    }
    std::vector<Samples> out;
    for (const auto& u : us)
        out.push_back(summarize(u));
    return out;
}

/// PyTorch's scaled_dot_product_attention over the cache (the anchor of GPU rows): q [B, Hq, D]
/// cast to the cache's dtype beforehand into `qCast` [B, Hq, 1, D].
at::Tensor sdpaDecode(const at::Tensor& qCast, const DecodeCache& cache) {
#ifdef SPARQLAB_HAVE_SDPA
    const bool gqa = qCast.size(1) != cache.kvHeads();
    return at::scaled_dot_product_attention(qCast, cache.keys(), cache.values(), {}, 0.0, false,
                                            std::nullopt, gqa);
#else
    (void)cache;
    return qCast;
#endif
}

constexpr bool kHaveSdpa =
#ifdef SPARQLAB_HAVE_SDPA
    true;
#else
    false;
#endif

/// What every benchmark checks first (the (r, k) ranges are each entry's own).
void checkBenchConfig(const DecodeBenchConfig& c) {
    if (c.batch < 1 || c.heads < 1 || c.kvHeads < 1 || c.seq < 1 || c.headDim < 1)
        fail("bench: batch, heads, kv-heads, seq and head-dim must be at least 1");
    if (c.heads % c.kvHeads != 0)
        fail("bench: heads (" + std::to_string(c.heads) + ") must be a multiple of kv-heads (" +
             std::to_string(c.kvHeads) + ")");
    if (c.repeats < 1 || c.warmup < 0)
        fail("bench: repeats must be at least 1 and warm-up at least 0");
    if (c.device != "cpu" && c.device != "cuda")
        fail("bench: unknown device '" + c.device + "' (cpu or cuda)");
    if (c.device == "cuda" && !cudaAvailable())
        fail("bench: this libtorch has no CUDA device");
    if (c.device == "cuda" && !cuda::built())
        fail("bench: this build has no CUDA kernels (nvcc was not found when it was configured)");
}

/// Fails when `needed` bytes would not fit in the memory available now (CPU runs).
void checkMemory(const DecodeBenchConfig& c, int64_t needed) {
    if (c.device != "cpu")
        return;
    {
        const int64_t avail = base::availableMemoryBytes();
        if (avail > 0 && needed > avail * 9 / 10)
            fail("bench: S = " + std::to_string(c.seq) + ", batch " + std::to_string(c.batch) +
                 " needs " + std::to_string(needed >> 20) + " MiB but only " +
                 std::to_string(avail >> 20) + " MiB are available");
    }
}

/// Random K, V ~ N(0, 1) (as the paper's benchmark), appended in chunks of positions to
/// bound the float32 temporaries.
/// The memory of a cache of `c`'s heads and dtype filled by fillRandom: K, V, K's
/// dimension-major copy and the random values in float32.
int64_t randomCacheBytes(const DecodeBenchConfig& c, int64_t batch, int64_t seq) {
    return DecodeCache::bytesFor(batch, c.kvHeads, c.headDim, seq, c.dtype, true) +
           batch * c.kvHeads * seq * c.headDim * 4;
}

void fillRandom(DecodeCache& cache) {
    const auto opts = at::TensorOptions().device(cache.device());
    for (int64_t s0 = 0; s0 < cache.capacity(); s0 += 1024) {
        const int64_t n = std::min<int64_t>(1024, cache.capacity() - s0);
        cache.append(at::randn({cache.batch(), cache.kvHeads(), n, cache.headDim()}, opts),
                     at::randn({cache.batch(), cache.kvHeads(), n, cache.headDim()}, opts));
    }
}

/// On the CPU each timed call follows the eviction of the caches (CacheEvictor) and then one call
/// of the same method on a small cache of its own: in a model's decode step the previous layer
/// has just run the same code, woken the same worker threads and touched the same dispatcher
/// tables, while this layer's rows come from memory. Without it every call paid for its cold
/// code, about 150 µs on 2 cores at any S (2026-12-02, 4 heads of 64 at S = 518: dense and SparQ
/// took 235 and 229 µs without it, 83 and 53 with it, in alternating runs), which hid any gain
/// at the lab's small shapes. One batch row (its q is the timed q's first row), filled at random.
struct SmallCache {
    /// For methods of k ≤ `maxK` (0: none selects by a fixed k).
    SmallCache(const DecodeBenchConfig& c, int64_t maxK, const DecodeCache& like,
               const at::Tensor& q)
        : cache(1, like.kvHeads(), like.headDim(), seqFor(c, maxK), like.storage(), true,
                like.device()),
          q(q.narrow(0, 0, 1)) {
        fillRandom(cache);
    }
    /// Its positions: at least 64 and maxK, at most the timed cache's.
    static int64_t seqFor(const DecodeBenchConfig& c, int64_t maxK) {
        return std::min(c.seq, std::max<int64_t>(64, maxK));
    }
    /// Its memory (the methods' extras for so few positions are left out; on a GPU there is
    /// none).
    static int64_t bytes(const DecodeBenchConfig& c, int64_t maxK) {
        return c.device == "cpu" ? randomCacheBytes(c, 1, seqFor(c, maxK)) : 0;
    }
    DecodeCache cache;
    at::Tensor q; ///< a view of the timed q: a new q each round is its too
};

} // namespace

int64_t DecodeBenchConfig::bytesNeeded() const {
    return randomCacheBytes(*this, batch, seq) + (device == "cpu" ? CacheEvictor::bytes() : 0);
}

bool cudaAvailable() {
    return at::hasCUDA();
}

std::vector<DecodeBenchResult> benchDecodeMany(const DecodeBenchConfig& c,
                                               const std::vector<std::pair<int64_t, int64_t>>& rk,
                                               const base::Job& job) {
    checkBenchConfig(c);
    for (const auto& [r, k] : rk) {
        if (r < 1 || r > c.headDim)
            fail("bench: r = " + std::to_string(r) +
                 " must lie in 1..head_dim = " + std::to_string(c.headDim));
        if (k < 1 || k > c.seq)
            fail("bench: k = " + std::to_string(k) +
                 " must lie in 1..S = " + std::to_string(c.seq));
    }
    int64_t maxK = 0;
    for (const auto& rkPair : rk)
        maxK = std::max(maxK, rkPair.second);
    checkMemory(c, c.bytesNeeded() + SmallCache::bytes(c, maxK));
    const at::Device dev = c.device == "cuda" ? at::Device(at::kCUDA) : at::Device(at::kCPU);
    at::manual_seed(c.seed);
    DecodeCache cache(c.batch, c.kvHeads, c.headDim, c.seq, c.dtype, true, dev);
    fillRandom(cache);
    at::Tensor q = at::randn({c.batch, c.heads, c.headDim}, at::TensorOptions().device(dev));

    // Our dense and every SparQ setting take turns; libtorch's dense runs last, on its own:
    // OpenBLAS's worker threads spin for a while after each call and would slow whatever is
    // timed next on a machine with few cores.
    AttentionConfig dense;
    dense.method = Method::Dense;
    std::vector<AttentionConfig> cfgs{dense};
    for (const auto& [r, k] : rk) {
        AttentionConfig sparq;
        sparq.method = Method::Sparq;
        sparq.r = r;
        sparq.k = k;
        cfgs.push_back(sparq);
    }
    DecodeAttention engine;
    std::vector<std::function<at::Tensor()>> calls;
    for (const AttentionConfig& m : cfgs)
        calls.emplace_back([&engine, &q, &cache, m] { return engine.run(q, cache, m); });
    std::optional<CacheEvictor> evict; // one buffer for every timing of this configuration
    if (dev.is_cpu())
        evict.emplace();
    CacheEvictor* ev = evict ? &*evict : nullptr;
    std::vector<Samples> timed, graphs;
    Samples torch, sdpa;
    if (dev.is_cpu()) {
        SmallCache small(c, maxK, cache, q);
        std::vector<std::function<at::Tensor()>> warm;
        for (const AttentionConfig& m : cfgs)
            warm.emplace_back([&engine, &small, m] { return engine.run(small.q, small.cache, m); });
        timed = timeInterleaved(c, q, calls, job, ev, warm);
        torch = timeInterleaved(c, q, {[&] { return denseDecodeTorch(q, cache); }}, job, ev,
                                {[&] { return denseDecodeTorch(small.q, small.cache); }})
                    .front();
    } else {
        // The same steps plain and replayed from CUDA graphs, libtorch's dense and SDPA, all
        // taking turns.
        std::vector<std::unique_ptr<DecodeGraph>> recorded;
        for (const AttentionConfig& m : cfgs)
            recorded.push_back(std::make_unique<DecodeGraph>(engine, q, cache, m));
        at::Tensor qCast;
        const auto refresh = [&] {
            qCast = q.view({c.batch, c.heads, 1, c.headDim}).to(c.dtype).contiguous();
        };
        std::vector<std::function<void()>> gpuCalls;
        for (const auto& call : calls)
            gpuCalls.emplace_back([call] { (void)call(); });
        for (auto& g : recorded)
            gpuCalls.emplace_back([&g] { g->replay(); });
        // (libtorch's dense is not timed on a GPU: it converts the whole cache to float32, and
        // SDPA is the anchor there.)
        if (kHaveSdpa)
            gpuCalls.emplace_back([&] { (void)sdpaDecode(qCast, cache); });
        const std::vector<Samples> all = timeOnGpu(c, q, refresh, gpuCalls, job);
        timed = samplesFrom(all, 0, calls.size());
        graphs = samplesFrom(all, calls.size(), calls.size());
        torch.mean = torch.median = std::numeric_limits<double>::infinity();
        if (kHaveSdpa)
            sdpa = all.back();
        // Medians on the GPU (its samples hardly spread; a stray slow one moves the mean).
        for (std::vector<Samples>* v : {&timed, &graphs})
            for (Samples& x : *v)
                x.mean = x.median;
        sdpa.mean = sdpa.median;
    }
    const Samples& ours = timed.front();
    const std::vector<Samples> sparqSamples = samplesFrom(timed, 1, timed.size() - 1);
    std::vector<DecodeBenchResult> results;
    for (size_t i = 0; i < rk.size(); ++i) {
        const auto [r, k] = rk[i];
        const Samples& sp = sparqSamples[i];
        DecodeBenchResult out;
        out.denseOursUs = ours.mean;
        out.denseTorchUs = torch.mean;
        const bool oursFaster = ours.mean <= torch.mean;
        out.denseUs = oursFaster ? ours.mean : torch.mean;
        out.denseStderrUs = oursFaster ? ours.stderr_ : torch.stderr_;
        out.denseImpl = oursFaster ? "sparqlab" : "libtorch";
        out.sparqUs = sp.mean;
        out.sparqStderrUs = sp.stderr_;
        out.speedup = out.denseUs / out.sparqUs;
        const TransferCounts t = transferCounts(c.seq, c.headDim, k, r);
        out.theoreticalSpeedup = static_cast<double>(t.dense) / static_cast<double>(t.sparq);
        // Per KV head (SPARQ.md §5: the same ratio as per query head for a shared selection).
        const double units = static_cast<double>(c.batch * c.kvHeads) *
                             static_cast<double>(c10::elementSize(c.dtype));
        out.denseBytes = static_cast<double>(t.dense) * units;
        out.sparqBytes = static_cast<double>(t.sparq) * units;
        out.denseGbps = out.denseBytes / (out.denseUs * 1e3);
        out.sparqGbps = out.sparqBytes / (out.sparqUs * 1e3);
        out.repeats = c.repeats;
        if (!graphs.empty()) {
            out.denseGraphUs = graphs.front().median;
            out.sparqGraphUs = graphs[i + 1].median;
            out.sdpaUs = sdpa.median;
        }
        results.push_back(out);
    }
    return results;
}

std::vector<MethodBenchResult> benchDecodeMethods(const DecodeBenchConfig& c,
                                                  const std::vector<AttentionConfig>& methods,
                                                  const base::Job& job) {
    checkBenchConfig(c);
    for (const AttentionConfig& m : methods) {
        if (methodInfo(m.method).selects && m.k > c.seq && m.k != AttentionConfig::kNoCap)
            fail("bench: k = " + std::to_string(m.k) +
                 " must lie in 1..S = " + std::to_string(c.seq));
        m.validateFor(c.headDim, 0, c.heads, c.kvHeads);
        if (!methodInfo(m.method).fastDecode)
            fail("bench: the decode engine does not run '" + methodName(m.method) + "'");
    }
    // What the methods keep beside the cache (Quest's pages, Loki's projected keys) is held too.
    int64_t extra = 0;
    for (const AttentionConfig& m : methods)
        if (const DecodeKernel* k = methodSpec(m.method).decode; k && k->cacheExtraElements)
            extra += k->cacheExtraElements(c.batch, c.kvHeads, c.seq, c.headDim, m);
    int64_t maxK = 0;
    for (const AttentionConfig& m : methods)
        if (methodInfo(m.method).selects && m.k != AttentionConfig::kNoCap)
            maxK = std::max(maxK, m.k);
    const int64_t needed = c.bytesNeeded() + SmallCache::bytes(c, maxK) +
                           extra * static_cast<int64_t>(c10::elementSize(c.dtype));
    checkMemory(c, needed);
    const at::Device dev = c.device == "cuda" ? at::Device(at::kCUDA) : at::Device(at::kCPU);
    at::manual_seed(c.seed);
    DecodeCache cache(c.batch, c.kvHeads, c.headDim, c.seq, c.dtype, true, dev);
    fillRandom(cache);
    at::Tensor q = at::randn({c.batch, c.heads, c.headDim}, at::TensorOptions().device(dev));

    // Calibrations from the cache's own keys (and random queries), as `calibrate` would make.
    const int64_t nCal = std::min<int64_t>(c.seq, 2048);
    const at::Tensor kCal = cache.keys().select(0, 0).narrow(1, 0, nCal).to(at::kFloat).cpu();
    std::map<Method, std::shared_ptr<Calibration>> made;
    std::vector<AttentionConfig> cfgs = methods;
    for (AttentionConfig& m : cfgs) {
        const CalibratorSpec* cal = methodSpec(m.method).calibrator;
        if (cal && !m.calibration) {
            std::shared_ptr<Calibration>& c1 = made[m.method];
            if (!c1) {
                c1 = std::make_shared<Calibration>();
                c1->method = m.method;
                const at::Tensor qCal =
                    cal->needsQueries ? at::randn({c.heads, nCal, c.headDim}) : at::Tensor();
                const std::vector<at::Tensor> t = cal->layer(qCal, kCal, {});
                for (size_t i = 0; i < t.size(); ++i)
                    c1->tensors[cal->datasets[i].name] = t[i].unsqueeze(0);
                c1->source = "the benchmark's keys";
            }
            m.calibration = c1;
        }
        m.layer = 0;
        prepareDecodeCache(cache, m);
    }
    // One cache holds one set of extras (one Quest page size, one Loki basis) per run.
    for (const AttentionConfig& m : cfgs)
        if (const DecodeKernel* k = methodSpec(m.method).decode; k && k->cacheMissing) {
            const std::string missing = k->cacheMissing(cache, m);
            if (!missing.empty())
                fail("bench: " + missing + "; " + methodName(m.method) +
                     " runs with one such setting per run");
        }

    // The configurations timed: our dense, then every other entry (dense entries take its slot).
    const AttentionConfig dense;
    std::vector<AttentionConfig> slotCfg{dense};
    std::vector<size_t> slot; // each entry's samples
    for (const AttentionConfig& m : cfgs) {
        slot.push_back(m.method == Method::Dense ? 0 : slotCfg.size());
        if (m.method != Method::Dense)
            slotCfg.push_back(m);
    }
    DecodeAttention engine;
    std::vector<std::function<at::Tensor()>> calls;
    for (const AttentionConfig& m : slotCfg)
        calls.emplace_back([&engine, &q, &cache, m] { return engine.run(q, cache, m); });
    std::optional<CacheEvictor> evict;
    if (dev.is_cpu())
        evict.emplace();
    std::vector<Samples> timed;
    std::vector<double> graphUs(calls.size(), 0.0); // per call slot
    std::vector<char> kernels(calls.size(), 0);
    double sdpaUs = 0;
    if (dev.is_cpu()) {
        SmallCache small(c, maxK, cache, q);
        std::vector<std::function<at::Tensor()>> warm;
        for (const AttentionConfig& m : slotCfg) {
            prepareDecodeCache(small.cache, m);
            warm.emplace_back([&engine, &small, m] { return engine.run(small.q, small.cache, m); });
        }
        timed = timeInterleaved(c, q, calls, job, evict ? &*evict : nullptr, warm);
    } else {
        // Each slot plain and, where the CUDA kernels run it, replayed from a CUDA graph; then
        // SDPA at the same shape.
        std::vector<std::unique_ptr<DecodeGraph>> recorded(calls.size());
        std::vector<std::function<void()>> gpuCalls;
        for (const auto& call : calls)
            gpuCalls.emplace_back([call] { (void)call(); });
        std::vector<size_t> graphSlot(calls.size(), 0);
        for (size_t i = 0; i < calls.size(); ++i)
            if (DecodeAttention::gpuUnsupported(cache, slotCfg[i], c.heads).empty()) {
                kernels[i] = 1;
                recorded[i] = std::make_unique<DecodeGraph>(engine, q, cache, slotCfg[i]);
                graphSlot[i] = gpuCalls.size();
                DecodeGraph* g = recorded[i].get();
                gpuCalls.emplace_back([g] { g->replay(); });
            }
        at::Tensor qCast;
        const auto refresh = [&] {
            qCast = q.view({c.batch, c.heads, 1, c.headDim}).to(c.dtype).contiguous();
        };
        if (kHaveSdpa)
            gpuCalls.emplace_back([&] { (void)sdpaDecode(qCast, cache); });
        std::vector<Samples> all = timeOnGpu(c, q, refresh, gpuCalls, job);
        for (Samples& x : all)
            x.mean = x.median;
        timed = samplesFrom(all, 0, calls.size());
        for (size_t i = 0; i < calls.size(); ++i)
            if (kernels[i])
                graphUs[i] = all[graphSlot[i]].median;
        if (kHaveSdpa)
            sdpaUs = all.back().median;
    }

    // What each method attends (top-p: the budget it reached, on batch row 0 of the last q).
    const double units =
        static_cast<double>(c.batch * c.kvHeads) * static_cast<double>(c10::elementSize(c.dtype));
    const TransferArgs denseArgs = transferArgs(dense, c.seq, c.headDim);
    const double denseElems = transferElements(Method::Dense, denseArgs);
    std::vector<MethodBenchResult> out;
    for (size_t i = 0; i < cfgs.size(); ++i) {
        const AttentionConfig& m = cfgs[i];
        MethodBenchResult r;
        r.config = m;
        r.us = timed[slot[i]].mean;
        r.stderrUs = timed[slot[i]].stderr_;
        r.medianUs = timed[slot[i]].median;
        r.iqrUs = timed[slot[i]].q3 - timed[slot[i]].q1;
        r.q1Us = timed[slot[i]].q1;
        r.q3Us = timed[slot[i]].q3;
        double count = -1, measured = -1;
        if (methodInfo(m.method).budgetVaries) {
            AttentionInputs in;
            in.q = q.narrow(0, 0, 1).to(at::kFloat).cpu();
            in.k = cache.keys().narrow(0, 0, 1).to(at::kFloat).cpu();
            in.v = cache.values().narrow(0, 0, 1).to(at::kFloat).cpu();
            const AttentionResult ar = attend(in, m);
            count = ar.count.to(at::kDouble).mean().item<double>();
            if (const at::Tensor t = transferOutput(methodSpec(m.method), ar); t.defined())
                measured = t.to(at::kDouble).mean().item<double>();
        }
        TransferArgs ta = transferArgs(m, c.seq, c.headDim, count);
        ta.measured = measured;
        r.count = count >= 0 ? count : static_cast<double>(std::min(m.k, c.seq));
        const double elems = transferElements(m.method, ta);
        r.bytes = elems * units;
        r.gbps = r.bytes / (r.us * 1e3);
        r.theoreticalSpeedup = denseElems / elems;
        r.denseUs = timed[0].mean;
        r.denseStderrUs = timed[0].stderr_;
        r.denseMedianUs = timed[0].median;
        r.denseIqrUs = timed[0].q3 - timed[0].q1;
        r.denseQ1Us = timed[0].q1;
        r.denseQ3Us = timed[0].q3;
        r.denseGbps = denseElems * units / (r.denseUs * 1e3);
        r.speedup = r.denseUs / r.us;
        r.repeats = c.repeats;
        r.graphUs = graphUs[slot[i]];
        r.denseGraphUs = graphUs[0];
        r.sdpaUs = sdpaUs;
        r.kernels = kernels[slot[i]] != 0;
        out.push_back(r);
    }
    return out;
}

SpeedupInterval speedupInterval(double denseMedian, double denseQ1, double denseQ3, double median,
                                double q1, double q3) {
    SpeedupInterval i;
    i.median = denseMedian / std::max(median, 1e-9);
    i.lower = denseQ1 / std::max(q3, 1e-9);
    i.upper = denseQ3 / std::max(q1, 1e-9);
    return i;
}

SpeedupInterval speedupInterval(const MethodBenchResult& r) {
    return speedupInterval(r.denseMedianUs, r.denseQ1Us, r.denseQ3Us, r.medianUs, r.q1Us, r.q3Us);
}

DecodeBenchConfig modelShapeBench(int64_t heads, int64_t kvHeads, int64_t headDim, int64_t seq,
                                  const std::string& device, int repeats) {
    DecodeBenchConfig b;
    b.batch = 1;
    b.heads = heads;
    b.kvHeads = kvHeads;
    b.headDim = headDim;
    b.seq = seq;
    b.device = device;
    b.repeats = repeats;
    b.warmup = 1;
    b.minSampleSeconds = 0.005;
    return b;
}

DecodeBenchResult benchDecode(const DecodeBenchConfig& c, const base::Job& job) {
    return benchDecodeMany(c, {{c.r, c.k}}, job).front();
}

Bandwidth measureBandwidth(const std::string& device, int64_t bytesPerBuffer, int repeats) {
    if (device == "cpu")
        return measureBandwidth(bytesPerBuffer, repeats);
    Bandwidth bw;
    try {
        bw.copyGbps = cuda::copyBandwidthGbps(static_cast<size_t>(bytesPerBuffer), repeats);
    } catch (const std::runtime_error& e) {
        fail(std::string("bench: ") + e.what());
    }
    bw.readGbps = bw.copyGbps;
    return bw;
}

Bandwidth measureBandwidth(int64_t bytesPerBuffer, int repeats) {
    const int64_t n = bytesPerBuffer / static_cast<int64_t>(sizeof(float));
    std::vector<float> a(static_cast<size_t>(n), 1.0f), b(static_cast<size_t>(n), 0.0f);
    const int64_t grain = int64_t{1} << 20;
    Bandwidth bw;
    double best = 1e30;
    for (int rep = 0; rep < repeats; ++rep) {
        const auto t0 = Clock::now();
        at::parallel_for(0, n, grain, [&](int64_t begin, int64_t end) {
            std::memcpy(b.data() + begin, a.data() + begin,
                        static_cast<size_t>(end - begin) * sizeof(float));
        });
        best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
    }
    bw.copyGbps = 2.0 * static_cast<double>(bytesPerBuffer) / best / 1e9;
    best = 1e30;
    volatile float sink = 0;
    for (int rep = 0; rep < repeats; ++rep) {
        const auto t0 = Clock::now();
        const float total = at::parallel_reduce(
            0, n, grain, 0.0f,
            [&](int64_t begin, int64_t end, float init) {
                float acc[16] = {};
                int64_t i = begin;
                for (; i + 16 <= end; i += 16)
                    for (int j = 0; j < 16; ++j)
                        acc[j] += a[static_cast<size_t>(i + j)];
                for (; i < end; ++i)
                    init += a[static_cast<size_t>(i)];
                for (const float x : acc)
                    init += x;
                return init;
            },
            std::plus<float>());
        sink = sink + total;
        best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
    }
    bw.readGbps = static_cast<double>(bytesPerBuffer) / best / 1e9;
    return bw;
}

double sampleQuantile(std::vector<double> samples, double f) {
    std::sort(samples.begin(), samples.end());
    return sortedQuantile(samples, f);
}

} // namespace sparqlab::attention
