// The CUDA decode interface's device services (cuda/decode_cuda.h): whether a device is there,
// the timer, the L2 flush, the graphs, the copy bandwidth and the memory figures. The plan of a
// step and its launch are plan.cu.

#include "attention/cuda/internal.h"

#include <algorithm>
#include <cstdio>
#include <stdexcept>

namespace sparqlab::attention::cuda {
using namespace detail;

bool built() {
    return true;
}

bool deviceAvailable() {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        (void)cudaGetLastError();
        return false;
    }
    return n > 0;
}

std::string deviceSummary() {
    if (!deviceAvailable())
        return "no CUDA device";
    int id = 0;
    cudaDeviceProp prop{};
    check(cudaGetDevice(&id), "cudaGetDevice");
    check(cudaGetDeviceProperties(&prop, id), "cudaGetDeviceProperties");
    int runtime = 0, driver = 0;
    cudaRuntimeGetVersion(&runtime);
    cudaDriverGetVersion(&driver);
    char buf[256];
    std::snprintf(buf, sizeof buf, "%s, %d SMs, %d MiB L2, %.1f GiB, runtime %d.%d, driver %d.%d",
                  prop.name, prop.multiProcessorCount, prop.l2CacheSize >> 20,
                  static_cast<double>(prop.totalGlobalMem) / (1u << 30), runtime / 1000,
                  (runtime % 1000) / 10, driver / 1000, (driver % 1000) / 10);
    return buf;
}

EventTimer::EventTimer(void* stream) : m_stream(stream) {
    cudaEvent_t a, b;
    check(cudaEventCreate(&a), "cudaEventCreate");
    check(cudaEventCreate(&b), "cudaEventCreate");
    m_start = a;
    m_stop = b;
}
EventTimer::~EventTimer() {
    cudaEventDestroy(static_cast<cudaEvent_t>(m_start));
    cudaEventDestroy(static_cast<cudaEvent_t>(m_stop));
}
void EventTimer::start() {
    check(cudaEventRecord(static_cast<cudaEvent_t>(m_start), asStream(m_stream)), "event record");
}
double EventTimer::stopUs() {
    check(cudaEventRecord(static_cast<cudaEvent_t>(m_stop), asStream(m_stream)), "event record");
    check(cudaEventSynchronize(static_cast<cudaEvent_t>(m_stop)), "event synchronize");
    float ms = 0;
    check(cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(m_start),
                               static_cast<cudaEvent_t>(m_stop)),
          "event elapsed");
    return static_cast<double>(ms) * 1e3;
}

namespace detail {
namespace {
/// Reads n float4 (and writes nothing unless the data says so, which it never does): the L2
/// cache then holds clean lines of this buffer only, as after another layer's reads. (A write,
/// such as a memset, would leave dirty lines that the timed call pays to write back.)
__global__ void readAll(const float4* p, size_t n, float* sink) {
    float acc = 0.0f;
    for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<size_t>(gridDim.x) * blockDim.x) {
        const float4 v = __ldcg(p + i);
        acc += v.x + v.y + v.z + v.w;
    }
    if (acc == 1.5f)
        *sink = acc;
}
} // namespace
} // namespace detail

L2Flusher::L2Flusher() {
    m_bytes = static_cast<size_t>(std::max(device().l2, 1 << 20)) * 2;
    check(cudaMalloc(&m_buf, m_bytes + 256), "cudaMalloc (L2 flush)");
    check(cudaMemset(m_buf, 0, m_bytes + 256), "L2 flush buffer");
    check(cudaDeviceSynchronize(), "synchronize");
}
L2Flusher::~L2Flusher() {
    cudaFree(m_buf);
}
void L2Flusher::operator()(void* stream) {
    SPARQLAB_LAUNCH(4 * device().sms, 256, 0, asStream(stream), detail::readAll)(
        static_cast<const float4*>(m_buf), m_bytes / 16,
        reinterpret_cast<float*>(static_cast<char*>(m_buf) + m_bytes));
    check(cudaGetLastError(), "L2 flush");
}

Graph::Graph(const std::function<void(void* stream)>& body) {
    cudaStream_t s;
    check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
    m_stream = s;
    check(cudaDeviceSynchronize(), "synchronize"); // the inputs are written (other streams)
    body(s); // once outside the capture: the kernels' attributes and plans are set up
    check(cudaStreamSynchronize(s), "warm-up");
    cudaGraph_t graph;
    check(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), "begin capture");
    try {
        body(s);
    } catch (...) {
        cudaStreamEndCapture(s, &graph);
        throw;
    }
    check(cudaStreamEndCapture(s, &graph), "end capture");
    m_graph = graph;
    cudaGraphExec_t exec;
    check(cudaGraphInstantiate(&exec, graph, 0), "graph instantiate");
    m_exec = exec;
}
Graph::~Graph() {
    if (m_exec)
        cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(m_exec));
    if (m_graph)
        cudaGraphDestroy(static_cast<cudaGraph_t>(m_graph));
    if (m_stream)
        cudaStreamDestroy(asStream(m_stream));
}
void Graph::replay(void* stream) {
    check(cudaGraphLaunch(static_cast<cudaGraphExec_t>(m_exec), asStream(stream)), "graph launch");
}

double copyBandwidthGbps(size_t bytes, int repeats) {
    void *a = nullptr, *b = nullptr;
    check(cudaMalloc(&a, bytes), "cudaMalloc (bandwidth)");
    if (cudaMalloc(&b, bytes) != cudaSuccess) {
        cudaFree(a);
        throw std::runtime_error("CUDA: cudaMalloc (bandwidth) failed");
    }
    check(cudaMemset(a, 1, bytes), "memset");
    EventTimer t;
    double best = 1e30;
    for (int i = 0; i < repeats + 1; ++i) {
        t.start();
        check(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, nullptr), "copy");
        const double us = t.stopUs();
        if (i > 0)
            best = std::min(best, us);
    }
    cudaFree(a);
    cudaFree(b);
    return 2.0 * static_cast<double>(bytes) / (best * 1e-6) / 1e9;
}

void synchronize() {
    check(cudaDeviceSynchronize(), "synchronize");
}

MemoryInfo memoryInfo() {
    MemoryInfo m;
    size_t freeBytes = 0, totalBytes = 0;
    if (!deviceAvailable() || cudaMemGetInfo(&freeBytes, &totalBytes) != cudaSuccess) {
        (void)cudaGetLastError();
        return m;
    }
    m.freeBytes = static_cast<int64_t>(freeBytes);
    m.totalBytes = static_cast<int64_t>(totalBytes);
    return m;
}

} // namespace sparqlab::attention::cuda
