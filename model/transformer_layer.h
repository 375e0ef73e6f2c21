#pragma once
/// \file transformer_layer.h
/// The tensors of one transformer block, borrowed from the modules CausalLMImpl registers under
/// the Hugging Face names, and the mixture of experts' forward pass. Internal to the capture
/// layer (transformer.cpp builds and loads, transformer_forward.cpp and moe.cpp run them).

#include "model/model_config.h"
#include "model/transformer.h"

#include <ATen/core/Tensor.h>

#include <string>
#include <vector>

namespace sparqlab::capture {

/// One routed expert's tensors (the per-expert layouts), or slices of the fused ones.
struct Expert {
    at::Tensor gate, up, down; ///< [I, h], [I, h], [h, I] (at::linear's layout)
};

/// A sparse layer: the router, the experts and the shared expert.
struct MoeWeights {
    at::Tensor routerW, routerB, scoreBias; ///< [E, h], [E] (gpt-oss), [E] (DeepSeek)
    std::vector<Expert> experts;            ///< the per-expert layouts
    /// The fused layouts: gate_up [E, h, 2I] (+ bias [E, 2I]), down [E, I, h] (+ bias [E, h]).
    at::Tensor gateUp, gateUpB, down, downB;
    Expert shared; ///< undefined tensors: none
    /// Per expert: its tensors were found finite (a mapped checkpoint's experts are checked when
    /// a token first reaches them, so that untouched experts are never read).
    std::vector<char> checked;
    std::vector<std::string> names; ///< per expert: its first tensor's name, for messages
    std::string file;               ///< where the experts are, for messages
};

struct CausalLMImpl::Layer {
    at::Tensor norm1W, norm1B, norm2W, norm2B; ///< before attention and before the MLP
    at::Tensor postAttnW, postFfnW; ///< after attention / the MLP (Gemma 2/3, OLMo 2/3, GLM-4)
    at::Tensor qW, qB, kW, kB, vW, vB, qkvW, qkvB, oW, oB;
    at::Tensor qNormW, kNormW; ///< Qwen 3, Gemma 3 (per head), OLMo 2/3 (whole projection)
    at::Tensor sinks;          ///< [Hq] gpt-oss's sink logits
    /// MLA: q_a_proj (+ bias), q_a_layernorm, q_b_proj (qW without q_lora_rank),
    /// kv_a_proj_with_mqa (+ bias), kv_a_layernorm, kv_b_proj.
    at::Tensor qAW, qAB, qANormW, qBW, kvAW, kvAB, kvANormW, kvBW;
    at::Tensor gateW, gateB, upW, upB, downW, downB, gateUpW;
    MoeWeights moe; ///< a sparse layer's (moe.routerW defined)
};

/// The sparse layer's output for x [B, T, h] (c.moe's routing, experts and shared expert).
/// Throws CheckpointError naming the tensor when an expert a token reaches holds NaN or ±inf.
at::Tensor moeForward(const ModelConfig& c, MoeWeights& w, const at::Tensor& x);

/// The activation of c.hiddenAct.
at::Tensor activate(const ModelConfig& c, const at::Tensor& t);

} // namespace sparqlab::capture
