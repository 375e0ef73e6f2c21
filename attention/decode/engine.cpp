// The decode engine (decode/engine.h): checks a call, sizes each thread's workspaces and hands the
// (batch row, KV head) tasks to the method unit's kernel (MethodSpec::decode); a non-CPU cache
// goes to the device path (decode/torch.cpp).

#include "attention/decode/kernel.h"
#include "attention/method_spec.h"
#include "attention/method_table.h"
#include "attention/runtime_info.h"

#include <algorithm>
#include <atomic>
#include <cmath>

namespace sparqlab::attention {

using detail::fail;
using detail::shapeOf;

bool decodeSupports(const AttentionConfig& c) {
    // Soft-capped, windowed, chunked layers and sinks go through attend().
    if (c.softcap > 0 || c.slidingWindow > 0 || c.chunk > 0 || c.sinks.defined())
        return false;
    const DecodeKernel* k = methodSpec(c.method).decode;
    return k && (!k->supports || k->supports(c));
}

bool decodeNeedsDimensionMajor(const AttentionConfig& c) {
    const DecodeKernel* k = methodSpec(c.method).decode;
    return k && k->dimensionMajor;
}

void prepareDecodeCache(DecodeCache& cache, const AttentionConfig& c) {
    const DecodeKernel* k = methodSpec(c.method).decode;
    if (k && k->prepareCache)
        k->prepareCache(cache, c);
}

at::Tensor DecodeAttention::setupFor(const DecodeCall& call) {
    const AttentionConfig& c = *call.config;
    for (const Setup& s : m_setups)
        if (s.method == c.method && s.calibration == c.calibration && s.layer == c.layer &&
            s.r == c.r && s.heads == call.Hq && s.headDim == call.D)
            return s.value;
    Setup s{c.method,
            c.calibration,
            c.layer,
            c.r,
            call.Hq,
            call.D,
            methodSpec(c.method).decode->setup(call),
            at::Tensor()};
    m_setups.push_back(s); // one per layer of a model
    return s.value;
}

DecodeCall DecodeAttention::prepare(const at::Tensor& q, const DecodeCache& cache,
                                    const AttentionConfig& config) {
    const MethodSpec& spec = methodSpec(config.method);
    if (!decodeSupports(config))
        fail("the fast decode path does not run '" + std::string(spec.info.name) + "'" +
             (spec.calibrator && !config.calibration        ? " without its calibration"
              : config.components != ComponentSelect::Group ? " with per-head components"
                                                            : std::string()));
    const DecodeKernel& kernel = *spec.decode;
    if (!q.defined() || q.dim() != 3 || q.size(0) != cache.batch() ||
        q.size(2) != cache.headDim() || q.size(1) % cache.kvHeads() != 0)
        fail("decode attention: q must be [" + std::to_string(cache.batch()) + ", Hq, " +
             std::to_string(cache.headDim()) + "] with Hq a multiple of " +
             std::to_string(cache.kvHeads()) + ", got " + (q.defined() ? shapeOf(q) : "none"));
    const int64_t S = cache.length();
    if (S < 1)
        fail("decode attention over an empty cache");
    if (S > std::numeric_limits<int32_t>::max() - 16) // a row's candidates are int32 indices
        fail("decode attention holds at most 2^31 - 17 positions, got " + std::to_string(S));
    const int64_t B = q.size(0), Hq = q.size(1), D = q.size(2), H = cache.kvHeads(), g = Hq / H;
    if (g > 64)
        fail("decode attention supports at most 64 query heads per KV head");
    detail::checkConfig(config, {D, 0, Hq, H}, /*user=*/false);
    if (kernel.dimensionMajor && !cache.dimensionMajor())
        fail("'" + std::string(spec.info.name) +
             "' decode needs the cache's dimension-major copy of K");
    if (kernel.cacheMissing) {
        const std::string missing = kernel.cacheMissing(cache, config);
        if (!missing.empty())
            fail(missing);
    }
    const double scale = config.scale ? *config.scale : 1.0 / std::sqrt(static_cast<double>(D));
    DecodeCall call;
    call.cache = &cache;
    call.config = &config;
    call.B = B;
    call.Hq = Hq;
    call.H = H;
    call.g = g;
    call.D = D;
    call.S = S;
    call.cap = cache.stride();
    call.kEff = std::min(config.k, S);
    call.local = config.effectiveLocal();
    call.rEff = std::min(config.r, D);
    call.storage = cache.storage();
    call.es = c10::elementSize(call.storage);
    call.scale = static_cast<float>(scale);
    call.defaultScale = !config.scale.has_value();
    return call;
}

at::Tensor DecodeAttention::setupOn(const DecodeCall& call, at::Device device) {
    const at::Tensor value = setupFor(call);
    for (Setup& s : m_setups)
        if (s.value.unsafeGetTensorImpl() == value.unsafeGetTensorImpl()) {
            if (!s.onDevice.defined() || s.onDevice.device() != device)
                s.onDevice = value.to(device);
            return s.onDevice;
        }
    return value.to(device);
}

namespace {

/// The kernels' GQA rule (false for max-probs, which they do not take).
bool gpuGqa(GroupSelect g, cuda::Gqa& out) {
    switch (g) {
    case GroupSelect::SumLogits:
        out = cuda::Gqa::SumLogits;
        return true;
    case GroupSelect::PerHead:
        out = cuda::Gqa::PerHead;
        return true;
    case GroupSelect::SumProbs:
        out = cuda::Gqa::SumProbs;
        return true;
    case GroupSelect::MaxProbs:
        break;
    }
    return false;
}

int gpuTau(TauMode t) {
    switch (t) {
    case TauMode::Adaptive:
        return 0;
    case TauMode::SqrtDh:
        return 1;
    case TauMode::SqrtR:
        return 2;
    case TauMode::One:
        return 3;
    case TauMode::Fixed:
        return 4;
    }
    return 0;
}

cuda::CacheView gpuView(const DecodeCache& c) {
    cuda::CacheView v;
    v.k = c.kStorage().data_ptr();
    v.v = c.vStorage().data_ptr();
    v.kt = c.dimensionMajor() ? c.ktStorage().data_ptr() : nullptr;
    v.kp = c.projectedStorage().defined() ? c.projectedStorage().data_ptr() : nullptr;
    v.basis = c.projectionBasis().defined() ? c.projectionBasis().data_ptr<float>() : nullptr;
    if (c.pageSize() > 0) {
        v.pmin = c.pageMin().data_ptr();
        v.pmax = c.pageMax().data_ptr();
        v.pagesCap = c.pageMin().size(2);
        v.pageSize = c.pageSize();
    }
    v.vsum = c.vSum().data_ptr<double>();
    v.B = c.batch();
    v.H = c.kvHeads();
    v.D = c.headDim();
    v.stride = c.stride();
    v.S = c.length();
    v.storage = cuda::storageOf(c.storage());
    return v;
}

/// The CUDA request of `call` without its pointers (the unit's pieces over the common fields);
/// false when the method names none.
bool gpuRequest(const DecodeCall& call, cuda::Request& r) {
    const DecodeKernel* kernel = methodSpec(call.config->method).decode;
    const AttentionConfig& c = *call.config;
    if (!kernel || !kernel->gpu || !gpuGqa(c.gqa, r.gqa))
        return false;
    r.Hq = call.Hq;
    r.scale = call.scale;
    r.defaultScale = call.defaultScale;
    r.r = call.rEff;
    r.k = call.kEff;
    r.local = call.local;
    r.tau = gpuTau(c.tau);
    r.tauValue = c.tauValue;
    r.p = c.p;
    kernel->gpu(call, r);
    return true;
}

} // namespace

std::string DecodeAttention::gpuUnsupported(const DecodeCache& cache, const AttentionConfig& config,
                                            int64_t queryHeads) {
    if (!cuda::built())
        return "this build has no CUDA kernels";
    if (cache.device().is_cpu())
        return "the cache is on the CPU";
    const DecodeKernel* kernel = methodSpec(config.method).decode;
    if (!kernel || !kernel->gpu)
        return "'" + methodName(config.method) + "' has no CUDA kernels";
    DecodeCall call;
    call.cache = &cache;
    call.config = &config;
    call.B = cache.batch();
    call.Hq = queryHeads;
    call.H = cache.kvHeads();
    call.g = queryHeads / std::max<int64_t>(1, cache.kvHeads());
    call.D = cache.headDim();
    call.S = cache.length();
    call.cap = cache.stride();
    call.kEff = std::min(config.k, call.S);
    call.local = config.effectiveLocal();
    call.rEff = std::min(config.r, call.D);
    call.scale = static_cast<float>(config.scale ? *config.scale : 1.0 / std::sqrt(double(call.D)));
    call.defaultScale = !config.scale.has_value();
    cuda::Request r;
    if (!gpuRequest(call, r))
        return "the CUDA kernels do not take the GQA rule max-probs";
    return cuda::unsupported(gpuView(cache), r);
}

bool DecodeAttention::kernelRequest(const DecodeCall& call, const DecodeCache& cache,
                                    cuda::CacheView& view, cuda::Request& request,
                                    at::Tensor& channels) {
    view = gpuView(cache);
    request = cuda::Request();
    channels = at::Tensor();
    if (!gpuRequest(call, request))
        return false;
    if (methodSpec(call.config->method).decode->setup) {
        channels = setupOn(call, cache.device());
        request.channels = channels.data_ptr<int64_t>();
    }
    return true;
}

at::Tensor DecodeAttention::launchKernels(const DecodeCall& call, const DecodeCache& cache,
                                          const at::Tensor& qf, cuda::Request& r,
                                          const cuda::CacheView& view, const cuda::Kernels& kernels,
                                          at::Tensor* alphaOut, at::Tensor* selection,
                                          at::Tensor* selectionCount) {
    // Asynchronous on a GPU, no host synchronisation (docs/design/CUDA.md).
    const int64_t B = call.B, Hq = call.Hq, D = call.D, H = call.H, g = call.g;
    at::Tensor y = at::empty({B, Hq, D}, qf.options());
    at::Tensor alpha = at::empty({B, Hq}, qf.options());
    r.q = qf.data_ptr<float>();
    r.y = y.data_ptr<float>();
    r.alpha = alpha.data_ptr<float>();
    if (selection && r.score != cuda::Score::None) {
        const int64_t units = r.gqa == cuda::Gqa::PerHead && g > 1 ? g : 1;
        r.selStride = kernels.maxSelection(view, r);
        *selection = at::empty({B, H * units, r.selStride}, qf.options().dtype(at::kInt));
        *selectionCount = at::empty({B, H * units}, qf.options().dtype(at::kInt));
        r.selOut = selection->data_ptr<int32_t>();
        r.selCount = selectionCount->data_ptr<int32_t>();
    }
    size_t bytes = kernels.workspaceBytes(view, r);
    if (!m_gpuWork.defined() || static_cast<size_t>(m_gpuWork.numel()) < bytes ||
        m_gpuWork.device() != cache.device()) {
        // Sized for the cache's whole capacity at once: the later steps of a generation (more
        // positions, more chunks) then allocate nothing, which on a GPU could wait for the device.
        cuda::CacheView full = view;
        full.S = view.stride;
        bytes = std::max(bytes, kernels.workspaceBytes(full, r));
        m_gpuWork = at::empty({static_cast<int64_t>(std::max<size_t>(bytes, 256))},
                              qf.options().dtype(at::kByte));
    }
    try {
        // On libtorch's current stream, as the step's other kernels (emulated: none).
        kernels.launch(view, r, m_gpuWork.data_ptr(), static_cast<size_t>(m_gpuWork.numel()),
                       qf.is_cuda() ? currentCudaStream() : nullptr);
    } catch (const std::runtime_error& e) {
        fail(std::string("decode attention: ") + e.what());
    }
    if (alphaOut)
        *alphaOut = alpha;
    return y;
}

at::Tensor DecodeAttention::runOnKernels(const at::Tensor& q, const DecodeCache& cache,
                                         const AttentionConfig& config,
                                         const cuda::Kernels& kernels, at::Tensor* alpha,
                                         at::Tensor* selection, at::Tensor* selectionCount) {
    const DecodeCall call = prepare(q, cache, config);
    cuda::Request r;
    cuda::CacheView view;
    at::Tensor channels;
    if (!kernelRequest(call, cache, view, r, channels))
        fail("the CUDA kernels do not run '" + methodName(config.method) + "'");
    const std::string why = kernels.unsupported(view, r);
    if (!why.empty())
        fail(why);
    if (selection)
        *selection = at::Tensor();
    if (selectionCount)
        *selectionCount = at::Tensor();
    return launchKernels(call, cache, q.to(cache.device(), at::kFloat).contiguous(), r, view,
                         kernels, alpha, selection, selectionCount);
}

at::Tensor DecodeAttention::run(const at::Tensor& q, const DecodeCache& cache,
                                const AttentionConfig& config, at::Tensor* alphaOut) {
    return runWithSelection(q, cache, config, alphaOut, nullptr, nullptr);
}

at::Tensor DecodeAttention::runWithSelection(const at::Tensor& q, const DecodeCache& cache,
                                             const AttentionConfig& config, at::Tensor* alphaOut,
                                             at::Tensor* selection, at::Tensor* selectionCount) {
    DecodeCall call = prepare(q, cache, config);
    const MethodSpec& spec = methodSpec(config.method);
    const DecodeKernel& kernel = *spec.decode;
    const int64_t B = call.B, Hq = call.Hq, D = call.D, H = call.H, g = call.g, S = call.S;
    if (selection)
        *selection = at::Tensor();
    if (selectionCount)
        *selectionCount = at::Tensor();
    if (!cache.device().is_cpu()) {
        const at::Tensor qf = q.to(cache.device(), at::kFloat).contiguous();
        cuda::Request r;
        cuda::CacheView view;
        at::Tensor channels;
        if (cuda::built() && kernelRequest(call, cache, view, r, channels) &&
            cuda::unsupported(view, r).empty())
            return launchKernels(call, cache, qf, r, view, cuda::kernels(), alphaOut, selection,
                                 selectionCount);
        // As on the kernels' path, q is not checked on the device (a NaN query gives NaN).
        return decodeOnDevice(qf, cache, config, static_cast<double>(call.scale), alphaOut);
    }
    at::Tensor qf = q.to(at::kFloat).contiguous();
    const float* qp = qf.data_ptr<float>();
    // A loop, not isfinite().all(): three dispatched operations cost more than this step's
    // arithmetic at a lab's small shapes.
    if (!std::all_of(qp, qp + qf.numel(), [](float x) { return std::isfinite(x); }))
        throw NonFiniteInputError("q has non-finite entries (NaN or inf)");
    if (kernel.setup)
        call.aux = setupFor(call);

    at::Tensor y = at::empty({B, Hq, D}, qf.options());
    at::Tensor alpha = at::empty({B, Hq}, qf.options());
    // After the kernel's workspace: step 1's coefficients [g, D], then SparQ's component
    // scores [D] and heap values [D] (sparq-top-p's setup).
    const int64_t setupAt = kernel.workFloats(call);
    const int64_t work = setupAt + g * D + 2 * D;
    const size_t threads = static_cast<size_t>(std::max(1, at::get_num_threads()));
    if (m_work.size() < threads) {
        m_work.resize(threads);
        m_index.resize(threads);
        m_heap.resize(threads);
        m_cand.resize(threads);
        m_rows.resize(threads);
    }
    const int64_t heapSize = std::max(S, D) + 16;
    for (size_t t = 0; t < threads; ++t) {
        if (static_cast<int64_t>(m_work[t].size()) < work)
            m_work[t].resize(static_cast<size_t>(work));
        m_index[t].reserve(static_cast<size_t>(std::max<int64_t>(S, D)));
        if (spec.info.selects && static_cast<int64_t>(m_cand[t].size()) < S + 16)
            m_cand[t].resize(static_cast<size_t>(S + 16));
        if (static_cast<int64_t>(m_heap[t].size()) < heapSize)
            m_heap[t].resize(static_cast<size_t>(heapSize));
        if (static_cast<int64_t>(m_rows[t].size()) < g * D)
            m_rows[t].resize(static_cast<size_t>(g * D));
    }
    const size_t es = call.es;
    const int64_t cap = call.cap;
    const auto* kBase = static_cast<const char*>(cache.kStorage().data_ptr());
    const auto* vBase = static_cast<const char*>(cache.vStorage().data_ptr());
    const char* ktBase =
        cache.dimensionMajor() ? static_cast<const char*>(cache.ktStorage().data_ptr()) : nullptr;
    const double* vsum = cache.vSum().data_ptr<double>();
    float* yp = y.data_ptr<float>();
    float* ap = alpha.data_ptr<float>();

    // Tasks are handed out one at a time, not split in equal ranges up front: a thread that
    // starts late (woken from a passive wait) or loses its core for a while (a shared VM) then
    // leaves its share to the others instead of finishing alone at the end. A thread is woken
    // for every bytesPerThread() the step reads (its method's transfer count, SPARQ.md §5).
    const int64_t tasks = B * H;
    const int64_t most = std::min<int64_t>(tasks, static_cast<int64_t>(threads));
    const double bytes = transferElements(config.method, transferArgs(config, S, D)) *
                         static_cast<double>(tasks) * static_cast<double>(es);
    const double wanted = m_bytesPerThread > 0 ? std::ceil(bytes / m_bytesPerThread) : 1e18;
    const int64_t workers = wanted < static_cast<double>(most) // (a NaN count: every thread)
                                ? std::max<int64_t>(1, static_cast<int64_t>(wanted))
                                : most;
    std::atomic<int64_t> nextTask{0};
    at::parallel_for(0, workers, 1, [&](int64_t, int64_t) {
        const size_t t = static_cast<size_t>(at::get_thread_num());
        DecodeScratch s;
        s.work = m_work[t].data();
        s.coef = s.work + setupAt;
        s.sel = &m_index[t];
        s.heap = m_heap[t].data();
        s.cand = m_cand[t].data();
        s.rows = m_rows[t].data();
        for (int64_t task; (task = nextTask.fetch_add(1, std::memory_order_relaxed)) < tasks;) {
            decode::GroupArgs a;
            a.q = qp + task * g * D;
            a.y = yp + task * g * D;
            a.alpha = ap + task * g;
            const size_t off = static_cast<size_t>(task * cap * D) * es;
            a.k = kBase + off;
            a.v = vBase + off;
            a.kt = ktBase ? ktBase + off : nullptr;
            a.vsum = vsum + task * D;
            a.g = g;
            a.D = D;
            a.S = S;
            a.cap = cap;
            a.scale = call.scale;
            kernel.task(call, a, task, s);
        }
    });
    if (alphaOut)
        *alphaOut = alpha;
    return y;
}

} // namespace sparqlab::attention

namespace sparqlab::attention {

DecodeGraph::DecodeGraph(DecodeAttention& engine, const at::Tensor& q, const DecodeCache& cache,
                         const AttentionConfig& config) {
    const DecodeCall call = engine.prepare(q, cache, config);
    if (cache.device().is_cpu() || q.device() != cache.device() || q.scalar_type() != at::kFloat ||
        !q.is_contiguous())
        fail("a decode graph needs a CUDA cache and q float32, contiguous, on its device");
    cuda::Request r;
    cuda::CacheView view;
    if (!cuda::built() || !engine.kernelRequest(call, cache, view, r, m_channels))
        fail("the CUDA kernels do not run '" + methodName(config.method) + "'");
    const std::string why = cuda::unsupported(view, r);
    if (!why.empty())
        fail(why);
    m_y = at::empty({call.B, call.Hq, call.D}, q.options());
    m_alpha = at::empty({call.B, call.Hq}, q.options());
    r.q = q.data_ptr<float>();
    r.y = m_y.data_ptr<float>();
    r.alpha = m_alpha.data_ptr<float>();
    const size_t bytes = std::max<size_t>(cuda::workspaceBytes(view, r), 256);
    m_work = at::empty({static_cast<int64_t>(bytes)}, q.options().dtype(at::kByte));
    void* ws = m_work.data_ptr();
    try {
        m_graph = std::make_unique<cuda::Graph>(
            [view, r, ws, bytes](void* stream) { cuda::launch(view, r, ws, bytes, stream); });
    } catch (const std::runtime_error& e) {
        fail(std::string("decode graph: ") + e.what());
    }
}

DecodeGraph::~DecodeGraph() = default;

void DecodeGraph::replay() {
    try {
        m_graph->replay(nullptr);
    } catch (const std::runtime_error& e) {
        fail(std::string("decode graph: ") + e.what());
    }
}

} // namespace sparqlab::attention

namespace sparqlab::attention::cuda {

Storage storageOf(at::ScalarType t) {
    return t == at::kHalf ? Storage::F16 : t == at::kBFloat16 ? Storage::BF16 : Storage::F32;
}

} // namespace sparqlab::attention::cuda
