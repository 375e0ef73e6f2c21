// The plan and dispatch of the CUDA decode kernels (attention/cuda/plan.cu) under the host
// emulation (simt.h), and the bridge of emulated.h to them.

#include "simt.h"

#define sparqlab sparqlab_simt
#include "attention/cuda/plan.cu"

namespace sparqlab::attention::cuda {
// The emulated device is always there (runtime.cu's device services are not emulated).
bool built() {
    return true;
}
bool deviceAvailable() {
    return true;
}
} // namespace sparqlab::attention::cuda
#undef sparqlab

// The bridge: the caller's types (the real namespace) to the emulated ones, the same header's
// definitions under the other name, by layout.
#include "emulated.h"

namespace sparqlab::test::emulated {
namespace {
const sparqlab_simt::attention::cuda::CacheView& view(const attention::cuda::CacheView& c) {
    return reinterpret_cast<const sparqlab_simt::attention::cuda::CacheView&>(c);
}
const sparqlab_simt::attention::cuda::Request& request(const attention::cuda::Request& r) {
    return reinterpret_cast<const sparqlab_simt::attention::cuda::Request&>(r);
}
} // namespace

std::string unsupported(const attention::cuda::CacheView& c, const attention::cuda::Request& r) {
    return sparqlab_simt::attention::cuda::unsupported(view(c), request(r));
}
size_t workspaceBytes(const attention::cuda::CacheView& c, const attention::cuda::Request& r) {
    return sparqlab_simt::attention::cuda::workspaceBytes(view(c), request(r));
}
int64_t maxSelection(const attention::cuda::CacheView& c, const attention::cuda::Request& r) {
    return sparqlab_simt::attention::cuda::maxSelection(view(c), request(r));
}
void launch(const attention::cuda::CacheView& c, const attention::cuda::Request& r, void* workspace,
            size_t workspaceSize, void* stream) {
    sparqlab_simt::attention::cuda::launch(view(c), request(r), workspace, workspaceSize, stream);
}

Work work() {
    const simt::Counters& c = simt::counters();
    return Work{c.launches, c.blocks, c.switches, c.paths};
}

} // namespace sparqlab::test::emulated
