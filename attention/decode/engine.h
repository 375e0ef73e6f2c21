#pragma once
/// \file decode/engine.h
/// The fast decode path: one query per sequence over a KV cache held in memory, for dense
/// attention, SparQ Attention (SPARQ.md §3), Quest, Loki, Double Sparsity and the two top-p
/// budgets (METHODS.md §3–6), as the benchmark, the model's decode step and the GUI's timing
/// panel run them. It computes what attend() computes for these methods (tested against it)
/// but is built for bandwidth, as paper §5 suggests:
///
/// - K is kept twice, position-major [S, D] for the k gathered rows and dimension-major [D, S]
///   for step 1, so SparQ's S·r reads are r contiguous rows;
/// - the top-k is a selection, not a sort: a threshold from strided block maxima, the
///   candidates above it, and a quickselect free of data-dependent branches among those; with
///   one query head per KV head the threshold and softmax's normaliser are gathered while
///   step 1 writes ẑ, so no pass over ẑ is left;
/// - the k selected rows of K and V are asked for all at once (into L2), then gathered into the
///   dot products;
/// - tasks (batch × KV heads) go to the threads one at a time, and the per-thread workspaces
///   live in the engine, so the hot loops allocate nothing;
/// - Quest's per-page min and max keys and Loki's keys in its basis (dimension-major) live
///   beside the cache and follow appends; Double Sparsity's channels are rows of the
///   dimension-major copy (its "label cache"); step 1 of Loki, Double Sparsity and
///   sparq-top-p reads r contiguous rows as SparQ's does;
/// - storage may be float32, float16 or bfloat16; arithmetic is float32.
///
/// On CUDA tensors the same interface runs on libtorch operations.

#include "attention/attention.h"

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace sparqlab::attention {

struct DecodeCall; // decode/kernel.h
namespace cuda {
class Graph; // cuda/decode_cuda.h
struct CacheView;
struct Request;
struct Kernels;
enum class Storage;
/// The kernels' name of a storage dtype: float32, float16 or bfloat16 (others: float32's; the
/// callers take only those three).
Storage storageOf(at::ScalarType t);
} // namespace cuda

/// Which basis a cache is projected on: the calibration tensor and the layer (a cheap identity,
/// so that a decode step need not compare D² numbers).
using ProjectionTag = std::pair<const void*, int64_t>;
/// The tag of `config`'s Loki basis.
ProjectionTag projectionTagOf(const AttentionConfig& config);

/// A KV cache laid out for decoding, with room for `capacity` positions.
class DecodeCache {
public:
    /// Empty cache. `storage` is kFloat, kHalf or kBFloat16; `dimensionMajor` keeps the
    /// second, transposed copy of K that SparQ's step 1 reads (dense does not need it).
    DecodeCache(int64_t batch, int64_t kvHeads, int64_t headDim, int64_t capacity,
                at::ScalarType storage = at::kFloat, bool dimensionMajor = true,
                at::Device device = at::kCPU);

    /// Appends T positions: k, v [B, Hkv, T, D] (any floating dtype). Throws AttentionError
    /// when the capacity would be exceeded, the shapes differ or a value is not finite.
    void append(const at::Tensor& k, const at::Tensor& v);
    /// Forgets every position from `length` on (so a benchmark can replay from one prefill).
    void truncate(int64_t length);

    /// Quest's page bounds (METHODS.md §3.2): the min and the max of K over each page of
    /// `pageSize` positions, kept as positions are appended (pages of the storage dtype:
    /// 2·⌈S/P⌉·D elements a step reads). A second call with another size rebuilds them.
    void enablePages(int64_t pageSize);
    int64_t pageSize() const { return m_pageSize; }
    const at::Tensor& pageMin() const { return m_pmin; } ///< [B, Hkv, ⌈cap/P⌉, D]
    const at::Tensor& pageMax() const { return m_pmax; }
    /// Loki (METHODS.md §4.2): the keys also in the columns of `basis` [Hkv, D, D] (one layer's
    /// calibration), dimension-major [B, Hkv, D, cap], so that step 1 reads r contiguous rows.
    /// Kept as positions are appended; another basis re-projects.
    void setProjection(const at::Tensor& basis, ProjectionTag tag = {});
    ProjectionTag projectionTag() const { return m_tag; }
    /// The basis the keys are projected on (undefined: none).
    const at::Tensor& projectionBasis() const { return m_basis; }
    const at::Tensor& projectedStorage() const { return m_kp; }

    /// What a method's kernel keeps beside K and V for the positions held when it was made
    /// (PQCache's codebook and codes, MagicPIG's hash tables, ShadowKV's landmarks and
    /// low-rank factors, RocketKV's chunk table), by name, under the settings it was made for
    /// (`key`, the kernel's own string: several methods or settings keep theirs side by side).
    /// Made by the kernel's prepareCache; stale once positions are appended or truncated, when
    /// the next prepareCache makes it again.
    void setMethodState(std::string key, std::map<std::string, at::Tensor> state);
    /// That state, when made with `key` for the positions held now; null otherwise.
    const std::map<std::string, at::Tensor>* methodState(const std::string& key) const;
    /// What a kernel reads that the cache cannot make from its keys, by name (RocketKV's
    /// "rocketkv_kept": its first stage's kept set, [B, Hkv, length] bool, from the window's
    /// queries); kept until dropExtras.
    void setInput(const std::string& name, at::Tensor t);
    at::Tensor input(const std::string& name) const; ///< undefined when absent

    /// Forgets Quest's pages, Loki's projection and the methods' state and inputs.
    void dropExtras();

    int64_t length() const { return m_len; }
    int64_t capacity() const { return m_cap; }
    int64_t batch() const { return m_B; }
    int64_t kvHeads() const { return m_H; }
    int64_t headDim() const { return m_D; }
    at::ScalarType storage() const { return m_k.scalar_type(); }
    bool dimensionMajor() const { return m_kt.defined(); }
    at::Device device() const { return m_k.device(); }

    at::Tensor keys() const;      ///< [B, Hkv, length, D] view of the storage
    at::Tensor values() const;    ///< [B, Hkv, length, D] view
    at::Tensor keysT() const;     ///< [B, Hkv, D, length] view (undefined without the copy)
    at::Tensor meanValue() const; ///< [B, Hkv, D] float32 mean of V over the positions held

    /// Bytes of storage reserved (K, its copy and V at full capacity).
    int64_t bytes() const;
    /// Bytes a cache of this shape would reserve, for memory checks before building one.
    static int64_t bytesFor(int64_t batch, int64_t kvHeads, int64_t headDim, int64_t capacity,
                            at::ScalarType storage, bool dimensionMajor);

    /// Positions allocated per row of the storage: the capacity on the CPU, rounded up to a
    /// multiple of 8 on a GPU.
    int64_t stride() const { return m_k.size(2); }
    // Raw storage for the kernels: [B, Hkv, stride, D], [B, Hkv, D, stride], [B, Hkv, stride, D].
    const at::Tensor& kStorage() const { return m_k; }
    const at::Tensor& ktStorage() const { return m_kt; }
    const at::Tensor& vStorage() const { return m_v; }
    const at::Tensor& vSum() const { return m_vsum; } ///< [B, Hkv, D] float64

private:
    void updatePages(int64_t from, int64_t to); ///< the bounds of the pages holding [from, to)
    void project(int64_t from, int64_t to);     ///< positions [from, to) into the basis

    int64_t m_B, m_H, m_D, m_cap, m_len = 0;
    at::Tensor m_k, m_kt, m_v, m_vsum;
    int64_t m_pageSize = 0;
    at::Tensor m_pmin, m_pmax, m_basis, m_kp;
    ProjectionTag m_tag{nullptr, 0};
    struct MethodStateEntry {
        int64_t length = -1; ///< the positions it was made for
        std::map<std::string, at::Tensor> tensors;
    };
    std::map<std::string, MethodStateEntry> m_states;
    std::map<std::string, at::Tensor> m_inputs;
};

/// Which instruction set the decode kernels' hand-written versions (the half-precision loops
/// and converters, the candidate scans) use in this process: "avx512", "avx2" (with FMA and F16C)
/// or "baseline", the widest the CPU has unless the environment variable SPARQLAB_ISA (read once,
/// at the first decode call) caps it at "avx2" or "baseline", so that one machine can test every
/// version. Other values of SPARQLAB_ISA are ignored. (The auto-vectorised loops are compiled for
/// AVX-512, AVX2 and baseline too, and picked by the loader from the CPU alone.)
const char* decodeKernelIsa();

/// Whether the fast path computes `config`: dense; SparQ and sparq-top-p with group
/// components; Quest (the cache's pages of the same size); Loki (the cache projected on the
/// config's basis for its layer) and Double Sparsity with their calibration; oracle-top-p.
/// Soft-capped or windowed layers and the other methods go through attend().
bool decodeSupports(const AttentionConfig& config);

/// Whether `config`'s fast path reads the dimension-major copy of K (SparQ, sparq-top-p,
/// Double Sparsity's channel rows): a cache for it is made with dimensionMajor = true.
bool decodeNeedsDimensionMajor(const AttentionConfig& config);

/// What a DecodeCache needs for `config` beyond K and V (the pages of Quest, Loki's
/// projection), set up if missing: called by whoever owns the cache before run().
void prepareDecodeCache(DecodeCache& cache, const AttentionConfig& config);

/// The bytes a CPU decode step reads for each intra-op thread it wakes (its method's transfer
/// count, SPARQ.md §5). Waking a worker from OpenMP's wait costs tens of µs (2 cores,
/// 2026-12-02: a step of dense or SparQ took 30–50 µs longer on two threads than on one up to
/// 4 MB read), more than it saves below about 1 MiB a thread; a long step takes every thread.
inline constexpr double kDecodeBytesPerThread = 1 << 20;

/// Runs dense or SparQ decode attention over a DecodeCache. Keep one per thread that decodes
/// (it owns the workspaces); run() itself uses libtorch's intra-op threads, one for every
/// bytesPerThread() the step reads (at least one, at most one per (batch row, KV head)).
class DecodeAttention {
public:
    /// y [B, Hq, D] float32 for q [B, Hq, D] attending to every position of the cache.
    /// Hq must be a multiple of the cache's KV heads. Throws AttentionError on bad input or
    /// a configuration decodeSupports() rejects. With `alpha`, SparQ's α [B, Hq] is returned
    /// there (ones for dense).
    ///
    /// On a CUDA cache the CUDA kernels run it (cuda/decode_cuda.h) where the method's unit names
    /// their pieces and the shape fits them, asynchronously and without a host synchronisation
    /// (q is then not checked for NaN: a NaN query gives NaN); otherwise libtorch's operations
    /// (decodeOnDevice).
    at::Tensor run(const at::Tensor& q, const DecodeCache& cache, const AttentionConfig& config,
                   at::Tensor* alpha = nullptr);
    /// run() that also gives, where the CUDA kernels ran it, the positions each selection unit
    /// attended: [B, Hkv·units, W] int32, −1 padded, and their counts [B, Hkv·units] (units: 1,
    /// or the group's heads with the per-head GQA rule). Undefined where they did not. For tests.
    at::Tensor runWithSelection(const at::Tensor& q, const DecodeCache& cache,
                                const AttentionConfig& config, at::Tensor* alpha,
                                at::Tensor* selection, at::Tensor* selectionCount);
    /// Why the CUDA kernels do not run `config` on `cache` (empty: they do).
    static std::string gpuUnsupported(const DecodeCache& cache, const AttentionConfig& config,
                                      int64_t queryHeads);
    /// runWithSelection()'s CUDA kernel path through `kernels`, on a cache of any device: the
    /// same request, outputs and workspace, the selection always given. Throws AttentionError
    /// where `kernels` do not take the step. For the kernels' host emulation (tests/cuda/simt),
    /// which runs them over a CPU cache.
    at::Tensor runOnKernels(const at::Tensor& q, const DecodeCache& cache,
                            const AttentionConfig& config, const cuda::Kernels& kernels,
                            at::Tensor* alpha, at::Tensor* selection, at::Tensor* selectionCount);

    /// What wakes one more CPU thread (kDecodeBytesPerThread); 0: every thread, whatever the
    /// step reads. The threads change which thread computes a (batch row, KV head), not what.
    double bytesPerThread() const { return m_bytesPerThread; }
    void setBytesPerThread(double bytes) { m_bytesPerThread = bytes; }

private:
    friend class DecodeGraph;
    double m_bytesPerThread = kDecodeBytesPerThread;
    /// A call's checks and its DecodeCall (the CPU kernels' and the CUDA request's source).
    DecodeCall prepare(const at::Tensor& q, const DecodeCache& cache,
                       const AttentionConfig& config);
    /// The kernel's setup on the cache's device (made once per setup).
    at::Tensor setupOn(const DecodeCall& call, at::Device device);
    /// The view and the request the CUDA kernels are given for `call`, pointers to q, y, α and
    /// the selection left null (`channels` holds what request.channels points to); false where
    /// the method has no kernels.
    bool kernelRequest(const DecodeCall& call, const DecodeCache& cache, cuda::CacheView& view,
                       cuda::Request& request, at::Tensor& channels);
    /// The step launched through `kernels` (which take it) from qf [B, Hq, D] float32 on the
    /// cache's device: y, with α and (where asked) the selection.
    at::Tensor launchKernels(const DecodeCall& call, const DecodeCache& cache, const at::Tensor& qf,
                             cuda::Request& r, const cuda::CacheView& view,
                             const cuda::Kernels& kernels, at::Tensor* alpha, at::Tensor* selection,
                             at::Tensor* selectionCount);
    at::Tensor m_gpuWork; // the CUDA kernels' workspace (bytes), grown as needed
    /// The kernel's per-call setup (Double Sparsity's checked channels), kept per
    /// (method, calibration, layer, r, heads, head_dim): made once, not at every decode step
    /// of every layer.
    at::Tensor setupFor(const DecodeCall& call);
    struct Setup {
        Method method;
        std::shared_ptr<const Calibration> calibration; // held: its address stays its own
        int64_t layer = -1, r = 0, heads = 0, headDim = 0;
        at::Tensor value;
        at::Tensor onDevice; // value copied to the GPU, once
    };
    std::vector<Setup> m_setups;

    std::vector<std::vector<float>> m_work; // one per intra-op thread
    std::vector<std::vector<int64_t>> m_index;
    std::vector<std::vector<int64_t>> m_heap;
    std::vector<std::vector<int32_t>> m_cand;     // a long row's candidate positions
    std::vector<std::vector<const void*>> m_rows; // step-1 rows of Loki, DS, sparq-top-p
};

/// A decode step on a CUDA cache recorded once as a CUDA graph (the CUDA kernels only): each
/// replay() computes what run() would for the values `q` holds at that time, into y(), with no
/// host synchronisation and no allocation. `q` must stay alive: [B, Hq, D] float32, contiguous,
/// on the cache's device. Throws AttentionError where the kernels do not run the step.
class DecodeGraph {
public:
    DecodeGraph(DecodeAttention& engine, const at::Tensor& q, const DecodeCache& cache,
                const AttentionConfig& config);
    ~DecodeGraph();
    DecodeGraph(const DecodeGraph&) = delete;
    DecodeGraph& operator=(const DecodeGraph&) = delete;
    /// Launches the step on the default stream (asynchronous).
    void replay();
    const at::Tensor& y() const { return m_y; }

private:
    at::Tensor m_y, m_alpha, m_work, m_channels;
    std::unique_ptr<cuda::Graph> m_graph;
};

/// Dense decode attention by libtorch's own operations (batched matrix products and softmax)
/// over the same cache, the other candidate for the benchmark's dense baseline.
at::Tensor denseDecodeTorch(const at::Tensor& q, const DecodeCache& cache,
                            std::optional<double> scale = {});

/// DecodeAttention::run on a cache held on another device (CUDA): q [B, Hq, D] float32 already
/// checked, `scale` the logit scale. Used by the engine; reentrant.
at::Tensor decodeOnDevice(const at::Tensor& q, const DecodeCache& cache,
                          const AttentionConfig& config, double scale, at::Tensor* alpha);

} // namespace sparqlab::attention
