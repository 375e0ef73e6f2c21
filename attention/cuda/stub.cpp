// The CUDA decode interface (cuda/decode_cuda.h) in a build without nvcc: every entry point
// says that the kernels are not built, so the decode engine falls back to libtorch's operations.

#include "attention/cuda/decode_cuda.h"
#include "attention/cuda/step.h"

#include <stdexcept>

namespace sparqlab::attention::cuda {

namespace {
[[noreturn]] void notBuilt() {
    throw std::runtime_error("this build has no CUDA kernels (nvcc was not found or "
                             "SPARQLAB_CUDA=OFF)");
}
} // namespace

std::string unsupported(const CacheView&, const Request&) {
    return "this build has no CUDA kernels";
}
size_t workspaceBytes(const CacheView&, const Request&) {
    return 0;
}
int64_t maxSelection(const CacheView&, const Request&) {
    return 0;
}
void launch(const CacheView&, const Request&, void*, size_t, void*) {
    notBuilt();
}
bool built() {
    return false;
}
void rmsNorm(const RmsNormStep&, void*) {
    notBuilt();
}
void rope(const RopeStep&, void*) {
    notBuilt();
}
void appendStep(const AppendStep&, void*) {
    notBuilt();
}
void gemv(const GemvStep&, void*) {
    notBuilt();
}
bool stepOpsBuilt() {
    return false;
}
bool deviceAvailable() {
    return false;
}
std::string deviceSummary() {
    return "no CUDA kernels in this build";
}

EventTimer::EventTimer(void* stream) : m_stream(stream) {
    notBuilt();
}
EventTimer::~EventTimer() = default;
void EventTimer::start() {}
double EventTimer::stopUs() {
    return 0;
}

L2Flusher::L2Flusher() {
    notBuilt();
}
L2Flusher::~L2Flusher() = default;
void L2Flusher::operator()(void*) {}

Graph::Graph(const std::function<void(void*)>&) {
    notBuilt();
}
Graph::~Graph() = default;
void Graph::replay(void*) {}

double copyBandwidthGbps(size_t, int) {
    notBuilt();
}

void synchronize() {}

MemoryInfo memoryInfo() {
    return {};
}

} // namespace sparqlab::attention::cuda
