// The CUDA decode kernels for bf16 storage (kernels.cuh), compiled on their own so that the three
// storage types build in parallel.

#include "attention/cuda/kernels.cuh"

namespace sparqlab::attention::cuda::detail {
template void launchStorage<__nv_bfloat16>(const CacheView&, const Request&, const Layout&, char*,
                                  cudaStream_t);
template int denseResidentFor<__nv_bfloat16>(int, int);
} // namespace sparqlab::attention::cuda::detail
