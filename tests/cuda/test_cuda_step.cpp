// The fused operations of a decode step (attention/cuda/step.h) under the kernels' host
// emulation (simt/), against the libtorch formulas they replace (step_cases.h): in CI, which
// has nvcc's headers and no GPU. test_cuda_decode runs the same checks on a GPU.

#include "simt/emulated.h"
#include "step_cases.h"

#include <ATen/Parallel.h>

int main() {
    at::set_num_threads(1);
    const sparqlab::attention::cuda::StepOps ops{
        &sparqlab::test::emulated::rmsNorm, &sparqlab::test::emulated::rope,
        &sparqlab::test::emulated::appendStep, &sparqlab::test::emulated::gemv};
    sparqlab::test::step::all(ops, at::kCPU);
    return sparqlab::test::finish("test_cuda_step (emulated)");
}
