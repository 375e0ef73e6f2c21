#pragma once
/// \file rope.h
/// Rotary position embeddings as Hugging Face computes them (transformers 5.x
/// modeling_rope_utils and each family's apply function): the inverse frequencies of every
/// scaling the families use (default, linear, llama3, longrope, yarn) and the rotation in the
/// three layouts checkpoints are trained with. Internal to the capture layer.

#include "model/model_config.h"

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace sparqlab::model {

/// The inverse frequencies [rot / 2] of `rope` over `rot` rotary dimensions, in float32 as HF
/// computes them; for longrope its long factors (`longFactors`) or its short ones.
at::Tensor ropeInverseFrequencies(const RopeSpec& rope, int64_t rot, bool longFactors = false);

/// YaRN's attention factor (cos and sin are multiplied by it) for a config that names none:
/// 0.1·mscale·ln(factor) + 1 over the same with mscale_all_dim, or 0.1·ln(factor) + 1.
double yarnAttentionFactor(double factor, double mscale, double mscaleAllDim);
/// DeepSeek's yarn_get_mscale: 0.1·m·ln(s) + 1 for s > 1, else 1.
double yarnMscale(double scale, double m);

/// The cos and sin of the angles position × invFreq for T positions from firstPos, [T, rot / 2]
/// in float32, multiplied by an attention factor: computed once per forward call and shared by
/// every layer's q and k (a decode step otherwise spends a dozen operations a layer on them).
struct RopeAngles {
    at::Tensor cos, sin;
    /// The rotate-half layout's [cos | cos] and [sin | sin] [T, rot] in the dtype of the last x
    /// rotated (HF casts them to x's dtype), made at the first use.
    mutable at::Tensor halfCos, halfSin;
};
RopeAngles ropeAngles(const at::Tensor& invFreq, int64_t firstPos, int64_t T,
                      double attentionFactor);

/// Rotates the first `rot` dimensions of x [B, H, T, D] whose positions start at firstPos, by
/// angles position × invFreq, in `layout`, cos and sin multiplied by `attentionFactor`; the
/// other dimensions pass through. Returns x's dtype (interleaved layouts rotate in float32).
at::Tensor applyRope(const at::Tensor& x, const at::Tensor& invFreq, int64_t firstPos, int64_t rot,
                     RopeLayout layout, double attentionFactor);
/// angles.halfCos and halfSin in `dtype` ([cos | cos], [sin | sin] [T, rot]), made if they are not.
void ropeHalfTables(const RopeAngles& angles, at::ScalarType dtype);
/// The same with the angles of x's positions computed already.
at::Tensor applyRope(const at::Tensor& x, const RopeAngles& angles, int64_t rot, RopeLayout layout);

} // namespace sparqlab::model
