// The fused operations of a decode step (attention/cuda/step.cu) under the host emulation
// (simt.h), renamed as emulated.h says, and the bridge of emulated.h to them.

#include "simt.h"

#define sparqlab sparqlab_simt
#include "attention/cuda/step.cu"
#undef sparqlab

#include "emulated.h"

namespace sparqlab::test::emulated {

namespace simt_cuda = sparqlab_simt::attention::cuda;

// The caller's types to the emulated ones: the same header's definitions under the other name.
void rmsNorm(const attention::cuda::RmsNormStep& s, void* stream) {
    simt_cuda::rmsNorm(reinterpret_cast<const simt_cuda::RmsNormStep&>(s), stream);
}
void rope(const attention::cuda::RopeStep& s, void* stream) {
    simt_cuda::rope(reinterpret_cast<const simt_cuda::RopeStep&>(s), stream);
}
void appendStep(const attention::cuda::AppendStep& s, void* stream) {
    simt_cuda::appendStep(reinterpret_cast<const simt_cuda::AppendStep&>(s), stream);
}
void gemv(const attention::cuda::GemvStep& s, void* stream) {
    simt_cuda::gemv(reinterpret_cast<const simt_cuda::GemvStep&>(s), stream);
}

} // namespace sparqlab::test::emulated
