// The CUDA decode kernels for f32 storage (kernels.cuh), compiled on their own so that the three
// storage types build in parallel.

#include "attention/cuda/kernels.cuh"

namespace sparqlab::attention::cuda::detail {
template void launchStorage<float>(const CacheView&, const Request&, const Layout&, char*,
                                  cudaStream_t);
template int denseResidentFor<float>(int, int);
} // namespace sparqlab::attention::cuda::detail
