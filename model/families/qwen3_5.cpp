// Qwen3.5 (Qwen3_5ForCausalLM, and the language model of Qwen3_5ForConditionalGeneration
// folders): Qwen3-Next's hybrid of Gated DeltaNet and gated attention with separate, flat
// projections (in_proj_qkv, in_proj_z, in_proj_b, in_proj_a) and a dense SwiGLU in every layer;
// its interleaved multimodal RoPE is plain partial RoPE for text
// (docs/learned-sparse-and-hybrid.md).

#include "model/family_common.h"
#include "model/model_family.h"

namespace sparqlab::model {

void readQwen3NextCore(const ConfigKeys& t, ModelConfig& c); // qwen3_next.cpp

/// A Qwen3.5 text model's keys (the dense and the MoE family's): Qwen3-Next's core with the
/// Gated DeltaNet's flat projections.
void readQwen35TextCore(const ConfigKeys& t, ModelConfig& c, const LlamaDefaults& d) {
    readLlamaCore(t, c, d);
    readQwen3NextCore(t, c);
    c.linear.projections = GdnProjections::Flat;
}

namespace {

void parseQwen35Text(const ConfigKeys& t, ModelConfig& c) {
    readQwen35TextCore(t, c,
                       {.vocab = 248320,
                        .hidden = 4096,
                        .intermediate = 12288,
                        .layers = 32,
                        .heads = 16,
                        .kvHeads = 4,
                        .headDim = 256,
                        .maxPositions = 32768});
}

void parseQwen35(const ConfigKeys& k, ModelConfig& c) {
    readTextConfigFolder(k, c, parseQwen35Text);
}

} // namespace
} // namespace sparqlab::model

SPARQLAB_MODEL_FAMILY(qwen3_5) {
    return {.name = "qwen3_5",
            .label = "Qwen3.5",
            .examples = "Qwen3.5 (Gated DeltaNet hybrid, dense; the language model of its VL "
                        "folders)",
            .architectures = {"Qwen3_5ForCausalLM", "Qwen3_5ForConditionalGeneration"},
            .parse = parseQwen35};
}
