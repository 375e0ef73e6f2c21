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
    c.linear.splitProjections = true;
}

/// A Qwen3.5 folder's config: the text model's keys at the top (…ForCausalLM), or in
/// text_config (the vision-language folders, their weights under model.language_model, found
/// from the checkpoint when the model opens).
void readQwen35Folder(const ConfigKeys& k, ModelConfig& c,
                      void (*text)(const ConfigKeys&, ModelConfig&)) {
    if (!k.has("text_config"))
        return text(k, c);
    if (!k.raw("text_config").is_object())
        k.fail("text_config", "must be an object (the text model's config)");
    const ConfigKeys t = k.nested("text_config");
    if (c.eosIds.empty())
        c.eosIds = t.ids("eos_token_id");
    if (c.bosId < 0 && !t.ids("bos_token_id").empty())
        c.bosId = t.ids("bos_token_id").front();
    text(t, c);
    if (k.boolean("tie_word_embeddings", false))
        c.tieEmbeddings = true;
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
    readQwen35Folder(k, c, parseQwen35Text);
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
