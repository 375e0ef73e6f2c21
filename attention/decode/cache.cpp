// The decode engine's KV cache (decode/engine.h): K and V (and K dimension-major) in float32,
// float16 or bfloat16 with room for a capacity, the running sum of V, and what methods keep beside
// it (Quest's page bounds, Loki's projected keys).

#include "attention/decode/engine.h"

#include "attention/cuda/step.h"
#include "attention/method_kit.h"
#include "attention/runtime_info.h"

#include <ATen/ATen.h>

#include <sys/mman.h>

namespace sparqlab::attention {

using detail::fail;
using detail::shapeOf;

namespace {

/// Asks for transparent huge pages on a large buffer not yet touched: a decode step streams
/// gigabytes, and with 4 KiB pages every page costs a TLB walk (Linux "madvise" mode).
void adviseHugePages(const at::Tensor& t) {
#ifdef MADV_HUGEPAGE
    constexpr uintptr_t kHuge = uintptr_t{2} << 20;
    const auto begin = reinterpret_cast<uintptr_t>(t.data_ptr());
    const uintptr_t end = begin + static_cast<uintptr_t>(t.nbytes());
    const uintptr_t a = (begin + kHuge - 1) & ~(kHuge - 1), b = end & ~(kHuge - 1);
    if (b > a)
        ::madvise(reinterpret_cast<void*>(a), b - a, MADV_HUGEPAGE); // advice only: errors ignored
#else
    (void)t;
#endif
}

void checkStorage(at::ScalarType t) {
    if (t != at::kFloat && t != at::kHalf && t != at::kBFloat16)
        fail(std::string("the decode cache stores float32, float16 or bfloat16, not ") +
             c10::toString(t));
}

} // namespace

// --- DecodeCache ---------------------------------------------------------------------------

DecodeCache::DecodeCache(int64_t batch, int64_t kvHeads, int64_t headDim, int64_t capacity,
                         at::ScalarType storage, bool dimensionMajor, at::Device device)
    : m_B(batch), m_H(kvHeads), m_D(headDim), m_cap(capacity) {
    checkStorage(storage);
    if (batch < 1 || kvHeads < 1 || headDim < 1 || capacity < 1)
        fail("a decode cache needs batch, KV heads, head_dim and capacity of at least 1");
    const auto opts = at::TensorOptions().dtype(storage).device(device);
    // On a GPU each row holds a multiple of 8 positions, so that the CUDA kernels' 16-byte loads
    // of 8 positions stay aligned and inside the row (cuda/decode_cuda.h).
    const int64_t stride = device.is_cpu() ? capacity : (capacity + 7) / 8 * 8;
    m_k = at::empty({batch, kvHeads, stride, headDim}, opts);
    m_v = at::empty({batch, kvHeads, stride, headDim}, opts);
    if (dimensionMajor)
        m_kt = at::empty({batch, kvHeads, headDim, stride}, opts);
    if (device.is_cpu())
        for (const at::Tensor* t : {&m_k, &m_v, &m_kt})
            if (t->defined())
                adviseHugePages(*t);
    m_vsum = at::zeros({batch, kvHeads, headDim}, opts.dtype(at::kDouble));
}

int64_t DecodeCache::bytesFor(int64_t batch, int64_t kvHeads, int64_t headDim, int64_t capacity,
                              at::ScalarType storage, bool dimensionMajor) {
    return batch * kvHeads * headDim * capacity * static_cast<int64_t>(c10::elementSize(storage)) *
           (dimensionMajor ? 3 : 2);
}

int64_t DecodeCache::bytes() const {
    int64_t extra = 0; // Quest's pages, Loki's projected keys, a method's state
    for (const at::Tensor* t : {&m_pmin, &m_pmax, &m_kp})
        if (t->defined())
            extra += static_cast<int64_t>(t->nbytes());
    for (const auto& [key, state] : m_states)
        for (const auto& [name, t] : state.tensors)
            if (t.defined())
                extra += static_cast<int64_t>(t.nbytes());
    return bytesFor(m_B, m_H, m_D, m_cap, storage(), dimensionMajor()) + extra;
}

void DecodeCache::append(const at::Tensor& k, const at::Tensor& v) {
    if (k.dim() != 4 || k.size(0) != m_B || k.size(1) != m_H || k.size(3) != m_D || !v.defined() ||
        v.sizes() != k.sizes())
        fail("decode cache append: K and V must be [" + std::to_string(m_B) + ", " +
             std::to_string(m_H) + ", T, " + std::to_string(m_D) + "], got K " + shapeOf(k) +
             (v.defined() ? " and V " + shapeOf(v) : std::string()));
    const int64_t T = k.size(2);
    if (m_len + T > m_cap)
        fail("decode cache is full: " + std::to_string(m_len) + " + " + std::to_string(T) +
             " positions exceed its capacity of " + std::to_string(m_cap));
    // A decode step's one position on a GPU is not checked: the check would wait for the device at
    // every layer of every step (CUDA.md §3: a step is a fixed sequence a CUDA graph can record).
    const bool check = m_k.device().is_cpu() || T > 1;
    if (check && (!at::isfinite(k).all().item<bool>() || !at::isfinite(v).all().item<bool>()))
        fail("decode cache append: K or V has non-finite entries (NaN or inf)");
    const cuda::StepOps* testOps = cuda::stepOpsForTesting();
    if (T == 1 && (m_k.device().is_cpu() ? testOps != nullptr : cuda::stepOpsBuilt()) &&
        k.scalar_type() == m_k.scalar_type() && v.scalar_type() == m_k.scalar_type() &&
        k.is_contiguous() && v.is_contiguous() && k.device() == m_k.device() &&
        v.device() == m_k.device()) {
        // A decode step's position on a GPU: K, V, the dimension-major K and the value sum in
        // one kernel (five of libtorch's otherwise).
        cuda::AppendStep p;
        p.storage = cuda::storageOf(m_k.scalar_type());
        p.k = k.data_ptr();
        p.v = v.data_ptr();
        p.K = m_k.data_ptr();
        p.V = m_v.data_ptr();
        p.Kt = m_kt.defined() ? m_kt.data_ptr() : nullptr;
        p.vsum = m_vsum.data_ptr<double>();
        p.B = m_B;
        p.H = m_H;
        p.D = m_D;
        p.cap = m_k.size(2); // the rows' stride (a multiple of 8 positions on a GPU)
        p.pos = m_len;
        if (m_k.device().is_cpu()) // (the emulated kernels)
            testOps->appendStep(p, nullptr);
        else // on libtorch's current stream, as the step's other kernels
            cuda::appendStep(p, currentCudaStream());
    } else {
        m_k.narrow(2, m_len, T).copy_(k);
        m_v.narrow(2, m_len, T).copy_(v);
        if (m_kt.defined())
            m_kt.narrow(3, m_len, T).copy_(k.transpose(2, 3));
        // The mean of what is stored (rounded to the storage dtype), as attend() would see it.
        m_vsum += at::sum(m_v.narrow(2, m_len, T), {2}, /*keepdim=*/false, at::kDouble);
    }
    m_len += T;
    if (m_pageSize > 0)
        updatePages(m_len - T, m_len);
    if (m_basis.defined())
        project(m_len - T, m_len);
}

void DecodeCache::truncate(int64_t length) {
    if (length < 0 || length > m_len)
        fail("decode cache truncate: length " + std::to_string(length) + " outside 0.." +
             std::to_string(m_len));
    m_len = length;
    m_vsum = m_len ? values().to(at::kDouble).sum(2) : at::zeros_like(m_vsum);
    if (m_pageSize > 0 && m_len % m_pageSize != 0) // the last page lost positions
        updatePages(m_len - m_len % m_pageSize, m_len);
}

void DecodeCache::dropExtras() {
    m_pageSize = 0;
    m_pmin = m_pmax = m_basis = m_kp = at::Tensor();
    m_tag = {nullptr, 0};
    m_states.clear();
    m_inputs.clear();
}

void DecodeCache::setMethodState(std::string key, std::map<std::string, at::Tensor> state) {
    m_states[std::move(key)] = {m_len, std::move(state)};
}

const std::map<std::string, at::Tensor>* DecodeCache::methodState(const std::string& key) const {
    const auto it = m_states.find(key);
    return it != m_states.end() && it->second.length == m_len ? &it->second.tensors : nullptr;
}

void DecodeCache::setInput(const std::string& name, at::Tensor t) {
    m_inputs[name] = std::move(t);
    m_states.clear(); // a state may have been made from the input before
}

at::Tensor DecodeCache::input(const std::string& name) const {
    const auto it = m_inputs.find(name);
    return it == m_inputs.end() ? at::Tensor() : it->second;
}

void DecodeCache::enablePages(int64_t pageSize) {
    if (pageSize < 1)
        fail("the page size must be at least 1, got " + std::to_string(pageSize));
    if (pageSize == m_pageSize)
        return;
    m_pageSize = pageSize;
    const int64_t pages = (m_cap + pageSize - 1) / pageSize;
    m_pmin = at::zeros({m_B, m_H, pages, m_D}, m_k.options());
    m_pmax = at::zeros({m_B, m_H, pages, m_D}, m_k.options());
    if (m_len > 0)
        updatePages(0, m_len);
}

void DecodeCache::updatePages(int64_t from, int64_t to) {
    // Every page holding a position of [from, to), from its stored (rounded) keys; min and max
    // of stored values are stored values, so the bounds are exact in any storage dtype.
    const int64_t P = m_pageSize, p0 = from / P, full = to / P, p1 = (to + P - 1) / P;
    if (full > p0) {
        const at::Tensor k = m_k.narrow(2, p0 * P, (full - p0) * P)
                                 .to(at::kFloat)
                                 .view({m_B, m_H, full - p0, P, m_D});
        m_pmin.narrow(2, p0, full - p0).copy_(k.amin(3));
        m_pmax.narrow(2, p0, full - p0).copy_(k.amax(3));
    }
    if (p1 > full && p1 - 1 >= p0) { // the last page, partly filled
        const at::Tensor k = m_k.narrow(2, full * P, to - full * P).to(at::kFloat);
        m_pmin.select(2, full).copy_(k.amin(2));
        m_pmax.select(2, full).copy_(k.amax(2));
    }
}

ProjectionTag projectionTagOf(const AttentionConfig& c) {
    return {c.calibration ? c.calibration->tensor("basis").unsafeGetTensorImpl() : nullptr,
            c.layer};
}

void DecodeCache::setProjection(const at::Tensor& basis, ProjectionTag tag) {
    m_tag = tag;
    if (!basis.defined() || basis.dim() != 3 || basis.size(0) != m_H || basis.size(1) != m_D ||
        basis.size(2) != m_D)
        fail("decode cache projection: the basis must be [" + std::to_string(m_H) + ", " +
             std::to_string(m_D) + ", " + std::to_string(m_D) + "], got " +
             (basis.defined() ? shapeOf(basis) : std::string("none")));
    m_basis = basis.to(at::kFloat).to(m_k.device()).contiguous();
    if (!m_kp.defined())
        m_kp = at::empty({m_B, m_H, m_D, m_k.size(2)}, m_k.options());
    if (m_len > 0)
        project(0, m_len);
}

void DecodeCache::project(int64_t from, int64_t to) {
    // K_j·P in float32 from the stored keys, rounded once to the storage dtype.
    const at::Tensor kp = at::matmul(m_k.narrow(2, from, to - from).to(at::kFloat),
                                     m_basis.unsqueeze(0)); // [B, H, n, D]
    m_kp.narrow(3, from, to - from).copy_(kp.transpose(2, 3));
}

at::Tensor DecodeCache::keys() const {
    return m_k.narrow(2, 0, m_len);
}
at::Tensor DecodeCache::values() const {
    return m_v.narrow(2, 0, m_len);
}
at::Tensor DecodeCache::keysT() const {
    return m_kt.defined() ? m_kt.narrow(3, 0, m_len) : at::Tensor();
}
at::Tensor DecodeCache::meanValue() const {
    return (m_vsum / static_cast<double>(std::max<int64_t>(m_len, 1))).to(at::kFloat);
}
} // namespace sparqlab::attention
