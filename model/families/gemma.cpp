// Gemma (GemmaForCausalLM), and what Gemma 2 and 3 share with it: (1 + w) RMSNorm, embeddings
// scaled by sqrt(hidden), the tanh GELU, head_dim 256, the logit scale
// 1/sqrt(query_pre_attn_scalar).

#include "model/family_common.h"
#include "model/model_family.h"

#include <cmath>

namespace sparqlab::model {

/// The Gemma family's common keys over `d` (Gemma 2 and 3 call it too). `scalarDefault` is
/// query_pre_attn_scalar's default (0: head_dim).
void readGemmaCore(const ConfigKeys& t, ModelConfig& c, LlamaDefaults d, int64_t scalarDefault) {
    d.headDim = 256;
    d.tieEmbeddings = true;
    readLlamaCore(t, c, d);
    c.hiddenAct = t.string("hidden_activation", t.string("hidden_act", "gelu_pytorch_tanh"));
    c.attnScale =
        1.0 / std::sqrt(static_cast<double>(t.integer(
                  "query_pre_attn_scalar", scalarDefault > 0 ? scalarDefault : c.headDim)));
    c.normPlusOne = true;
    c.embedScale = std::sqrt(static_cast<double>(c.hiddenSize));
    c.embedScaleInDtype = true; // (a tensor of the hidden dtype: the scale rounded)
}

/// Gemma 2 and 3: norms before and after attention and the MLP, the soft-caps (null: off).
void readGemmaSandwich(const ConfigKeys& t, ModelConfig& c, double attnCap, double finalCap) {
    c.norms = NormPlacement::Sandwich;
    c.attnSoftcap =
        t.isNull("attn_logit_softcapping") ? 0.0 : t.number("attn_logit_softcapping", attnCap);
    c.finalSoftcap =
        t.isNull("final_logit_softcapping") ? 0.0 : t.number("final_logit_softcapping", finalCap);
    if (c.attnSoftcap < 0)
        t.fail("attn_logit_softcapping", "must be positive (or null)");
    if (c.finalSoftcap < 0)
        t.fail("final_logit_softcapping", "must be positive (or null)");
}

namespace {

void parseGemma(const ConfigKeys& t, ModelConfig& c) {
    const LlamaDefaults d{.vocab = 256000,
                          .hidden = 3072,
                          .intermediate = 24576,
                          .layers = 28,
                          .heads = 16,
                          .maxPositions = 8192};
    readGemmaCore(t, c, d, 0);
    if (c.hiddenAct == "gelu")
        c.hiddenAct = "gelu_pytorch_tanh"; // HF Gemma uses the tanh approximation for "gelu"
    readRopeScaling(t, c);
}

} // namespace
} // namespace sparqlab::model

SPARQLAB_MODEL_FAMILY(gemma) {
    return {.name = "gemma",
            .label = "Gemma",
            .examples = "Gemma 1",
            .architectures = {"GemmaForCausalLM"},
            .parse = parseGemma};
}
