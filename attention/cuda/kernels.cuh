// The CUDA decode kernels (cuda/decode_cuda.h; docs/design/CUDA.md), included once per storage
// dtype (kernels_f32.cu, kernels_f16.cu, kernels_bf16.cu): dense flash-decoding,
// step 1 of the selecting methods (low-rank rows, page bounds, exact scores) and step 2 (the
// GQA ranking, the exact top-k / top-p / Quest pages on chip, the gather of the chosen rows of K
// and V with the exact softmax, SparQ's mean-value term). Storage float32, float16 or bfloat16;
// arithmetic float32. The shared arithmetic is cuda/logic.h.

#include "attention/cuda/kernels/launch.cuh" // (dense, score, select, common)

namespace sparqlab::attention::cuda::detail {

template <typename T>
void launchStorage(const CacheView& c, const Request& r, const Layout& l, char* ws, cudaStream_t s) {
    launchT<T>(c, r, l, ws, s);
}

template <typename T> int denseResidentFor(int lanes, int gt) {
    return denseResidentForT<T>(lanes, gt);
}

} // namespace sparqlab::attention::cuda::detail
