// The tests' replacement of the fused decode-step operations (cuda/step.h,
// setStepOpsForTesting): compiled in every build, with or without nvcc.

#include "attention/cuda/step.h"

namespace sparqlab::attention::cuda {

namespace {
const StepOps* g_override = nullptr;
} // namespace

void setStepOpsForTesting(const StepOps* ops) {
    g_override = ops;
}
const StepOps* stepOpsForTesting() {
    return g_override;
}

} // namespace sparqlab::attention::cuda
