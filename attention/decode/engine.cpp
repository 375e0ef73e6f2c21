// The decode engine (decode.h): checks a call, sizes each thread's workspaces and hands the
// (batch row, KV head) tasks to the method unit's kernel (MethodSpec::decode); a non-CPU cache
// goes to the device path (decode/torch.cpp).

#include "attention/decode/kernel.h"
#include "attention/method_spec.h"

#include <atomic>

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
            methodSpec(c.method).decode->setup(call)};
    m_setups.push_back(s); // one per layer of a model
    return s.value;
}

at::Tensor DecodeAttention::run(const at::Tensor& q, const DecodeCache& cache,
                                const AttentionConfig& config, at::Tensor* alphaOut) {
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
    at::Tensor qf = q.to(at::kFloat).contiguous();
    if (!at::isfinite(qf).all().item<bool>())
        throw NonFiniteInputError("q has non-finite entries (NaN or inf)");
    const double scale = config.scale ? *config.scale : 1.0 / std::sqrt(static_cast<double>(D));
    if (!cache.device().is_cpu())
        return decodeOnDevice(qf, cache, config, scale, alphaOut);

    DecodeCall call;
    call.cache = &cache;
    call.config = &config;
    call.B = B;
    call.Hq = Hq;
    call.H = H;
    call.g = g;
    call.D = D;
    call.S = S;
    call.cap = cache.capacity();
    call.kEff = std::min(config.k, S);
    call.local = config.effectiveLocal();
    call.rEff = std::min(config.r, D);
    call.storage = cache.storage();
    call.es = c10::elementSize(call.storage);
    call.scale = static_cast<float>(scale);
    call.defaultScale = !config.scale.has_value();
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
    const float* qp = qf.data_ptr<float>();
    float* yp = y.data_ptr<float>();
    float* ap = alpha.data_ptr<float>();

    // Tasks are handed out one at a time, not split in equal ranges up front: a thread that
    // starts late (woken from a passive wait) or loses its core for a while (a shared VM) then
    // leaves its share to the others instead of finishing alone at the end.
    const int64_t tasks = B * H;
    std::atomic<int64_t> nextTask{0};
    at::parallel_for(
        0, std::min<int64_t>(tasks, static_cast<int64_t>(threads)), 1, [&](int64_t, int64_t) {
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
