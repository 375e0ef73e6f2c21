#include "model/decode_graphs.h"

#include "attention/runtime_info.h"

#include <ATen/ATen.h>

#include <chrono>
#include <optional>
#include <stdexcept>

#ifdef SPARQLAB_TORCH_CUDA // a CUDA libtorch (model/CMakeLists.txt)
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/version.h>
#endif

namespace sparqlab::model {

struct DecodeGraphs::Impl {
#ifdef SPARQLAB_TORCH_CUDA
    std::vector<std::unique_ptr<at::cuda::CUDAGraph>> segments;
    // One memory pool for all segments: they are replayed in the order they were captured, and
    // what one passes to a later one (the residual stream, q, k, v) stays allocated while the
    // later ones are captured.
    std::optional<decltype(at::cuda::graph_pool_handle())> pool;
    std::optional<c10::cuda::CUDAStream> side, previous; // capture needs a stream of its own
    bool capturing = false;
#endif
};

DecodeGraphs::DecodeGraphs() : m_impl(std::make_unique<Impl>()) {}

DecodeGraphs::~DecodeGraphs() {
    abandon({});
}

bool DecodeGraphs::available() {
#ifdef SPARQLAB_TORCH_CUDA
    return true;
#else
    return false;
#endif
}

void* DecodeGraphs::currentStream() {
    return attention::currentCudaStream();
}

void DecodeGraphs::startCapture() {
#ifdef SPARQLAB_TORCH_CUDA
    Impl& d = *m_impl;
    if (!d.pool)
        d.pool = at::cuda::graph_pool_handle();
    if (!d.side)
        d.side = c10::cuda::getStreamFromPool();
    d.previous = c10::cuda::getCurrentCUDAStream();
    c10::cuda::setCurrentCUDAStream(*d.side);
    d.segments.push_back(std::make_unique<at::cuda::CUDAGraph>());
    d.capturing = true;
#if TORCH_VERSION_MAJOR >= 2
    // This thread's capture only: another thread's CUDA calls (the lab's GUI asking for free
    // memory) neither fail nor invalidate it.
    d.segments.back()->capture_begin(*d.pool, cudaStreamCaptureModeThreadLocal);
#else
    d.segments.back()->capture_begin(*d.pool);
#endif
#else
    throw std::runtime_error("CUDA graphs need a CUDA libtorch");
#endif
}

void DecodeGraphs::endCapture() {
#ifdef SPARQLAB_TORCH_CUDA
    Impl& d = *m_impl;
    d.capturing = false;
    try {
        d.segments.back()->capture_end(); // on the stream it began on
    } catch (...) {
        c10::cuda::setCurrentCUDAStream(*d.previous);
        throw;
    }
    c10::cuda::setCurrentCUDAStream(*d.previous);
    // Captured, not run: run it on the caller's stream, where what comes next is queued.
    d.segments.back()->replay();
#endif
}

at::Tensor DecodeGraphs::begin(const at::Tensor& ids) {
    m_batch = ids.size(0);
    m_ids = ids.clone();
    startCapture();
    return m_ids;
}

void DecodeGraphs::cut(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
    endCapture();
    m_q.push_back(q);
    m_k.push_back(k);
    m_v.push_back(v);
}

at::Tensor DecodeGraphs::resume(const at::Tensor& y, at::ScalarType dtype) {
    at::Tensor in = at::empty(y.sizes(), y.options().dtype(dtype));
    in.copy_(y);
    m_inputs.push_back(in);
    startCapture();
    return in;
}

at::Tensor DecodeGraphs::end(const at::Tensor& logits) {
    endCapture();
    m_logits = logits;
    m_recorded = true;
    return m_logits.to(at::kFloat, /*non_blocking=*/false, /*copy=*/true);
}

void DecodeGraphs::abandon(const std::string& why) {
#ifdef SPARQLAB_TORCH_CUDA
    Impl& d = *m_impl;
    if (d.capturing) {
        d.capturing = false;
        try {
            d.segments.back()->capture_end();
        } catch (...) { // an invalidated capture ends with an error: it is what is given up
        }
        if (d.previous)
            c10::cuda::setCurrentCUDAStream(*d.previous);
        (void)cudaGetLastError();
    }
    d.segments.clear();
    d.pool.reset(); // the graphs released it: a new recording takes a new one
#endif
    m_ids = m_logits = at::Tensor();
    m_q.clear();
    m_k.clear();
    m_v.clear();
    m_inputs.clear();
    angles.clear();
    m_recorded = false;
    m_batch = 0;
    if (!why.empty())
        m_failure = why;
}

std::vector<double> DecodeGraphs::segmentMicroseconds(int repeats) const {
    std::vector<double> out;
#ifdef SPARQLAB_TORCH_CUDA
    if (!m_recorded || repeats < 1)
        return out;
    for (const auto& g : m_impl->segments) {
        g->replay(); // (a first replay outside the timing)
        c10::cuda::device_synchronize();
        const auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < repeats; ++i)
            g->replay();
        c10::cuda::device_synchronize();
        out.push_back(
            std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0)
                .count() /
            repeats);
    }
#else
    (void)repeats;
#endif
    return out;
}

at::Tensor DecodeGraphs::replay(const at::Tensor& ids, const Attend& attend) {
#ifdef SPARQLAB_TORCH_CUDA
    Impl& d = *m_impl;
    if (!m_recorded || d.segments.size() != m_inputs.size() + 1)
        throw std::logic_error("DecodeGraphs::replay before a step was recorded");
    m_ids.copy_(ids);
    for (size_t i = 0; i < m_inputs.size(); ++i) {
        d.segments[i]->replay();
        m_inputs[i].copy_(attend(static_cast<int64_t>(i), m_q[i], m_k[i], m_v[i]));
    }
    d.segments.back()->replay();
    ++m_replays;
    return m_logits.to(at::kFloat, /*non_blocking=*/false, /*copy=*/true);
#else
    (void)ids;
    (void)attend;
    throw std::runtime_error("CUDA graphs need a CUDA libtorch");
#endif
}

} // namespace sparqlab::model
