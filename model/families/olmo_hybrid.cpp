// OLMo Hybrid (OlmoHybridForCausalLM: AllenAI's Olmo-Hybrid-7B): three Gated DeltaNet layers to
// one attention layer. The attention layers are OLMo 3's block (norms after attention and the
// MLP, RMSNorm over the whole q and k, no window) and the released folders give them no RoPE;
// the linear layers are Llama's pre-norm block around a Gated DeltaNet with separate q, k, v, g,
// b and a projections, a convolution each for q, k and v, β doubled (linear_allow_neg_eigval)
// and an output norm with eps 1e-5 (docs/learned-sparse-and-hybrid.md §16).

#include "model/family_common.h"
#include "model/model_family.h"

#include <algorithm>

namespace sparqlab::model {
namespace {

/// Whether the attention layers rotate q and k: transformers 5 builds a rotary embedding only
/// where rope_parameters holds a rope_theta that is not null, and fills rope_parameters (null or
/// absent) and an omitted rope_theta from the top-level key or the default base; both released
/// folders set it null.
bool rotates(const ConfigKeys& t) {
    if (t.has("rope_parameters") && t.raw("rope_parameters").is_object() &&
        t.raw("rope_parameters").contains("rope_theta"))
        return !t.nested("rope_parameters").isNull("rope_theta");
    return !t.isNull("rope_theta");
}

void parseOlmoHybrid(const ConfigKeys& t, ModelConfig& c) {
    const LlamaDefaults d{.vocab = 100352,
                          .hidden = 3840,
                          .intermediate = 11008,
                          .layers = 32,
                          .heads = 30,
                          .maxPositions = 65536};
    readLlamaCore(t, c, d); // (head_dim: hidden / heads unless the file gives it)
    c.norms = NormPlacement::PostAttentionPreLinear;
    c.qkNorm = QkNorm::Whole;
    c.normWeightInFloat = true; // OLMo's RMSNorm: (w · x̂) in float32, then the cast

    // Every fourth layer attention by default, the last one where that gives none.
    std::vector<std::string> kinds(static_cast<size_t>(c.nLayers), "linear_attention");
    for (size_t l = 3; l < kinds.size(); l += 4)
        kinds[l] = "full_attention";
    if (c.nLayers < 4)
        kinds.back() = "full_attention";
    readLayerKinds(t, c, kinds, {"linear_attention", "full_attention"},
                   {{"attention", "full_attention"}, {"mamba", "linear_attention"}});
    c.layerKinds.clear();
    for (const std::string& k : kinds)
        c.layerKinds.push_back(k == "full_attention" ? LayerKind::Attention
                                                     : LayerKind::GatedDeltaNet);
    if (std::count(kinds.begin(), kinds.end(), "full_attention") == 0)
        t.fail("layer_types", "must name at least one \"full_attention\" layer");
    if (std::count(kinds.begin(), kinds.end(), "linear_attention") == 0)
        t.fail("layer_types", "must name at least one \"linear_attention\" layer");

    const bool rope = rotates(t);
    c.layerNoRope.assign(static_cast<size_t>(c.nLayers), !rope);
    if (rope) // (only then does transformers read the RoPE keys)
        readRopeScaling(t, c);

    LinearSpec& s = c.linear;
    s.projections = GdnProjections::Separate;
    s.separateConvs = true; // (one conv1d where the checkpoint holds it so: model.cpp)
    s.keyHeads = t.integer("linear_num_key_heads", c.nHeads);
    s.valueHeads = t.integer("linear_num_value_heads", c.nHeads);
    if (s.valueHeads % s.keyHeads != 0)
        t.fail("linear_num_value_heads",
               "must be a multiple of linear_num_key_heads (" + std::to_string(s.keyHeads) + ")");
    // int(0.75 · hidden / key heads), as OlmoHybridConfig derives it
    s.keyDim = t.integer("linear_key_head_dim", 3 * c.hiddenSize / (4 * s.keyHeads));
    s.valueDim = t.integer("linear_value_head_dim", 2 * s.keyDim);
    s.convKernel = t.integer("linear_conv_kernel_dim", 4, 1, 64);
    s.betaScale = t.boolean("linear_allow_neg_eigval", true) ? 2.0 : 1.0;
    s.gateNormEps = 1e-5; // (OlmoHybridRMSNormGated's, FLA's default, whatever rms_norm_eps is)
}

} // namespace
} // namespace sparqlab::model

SPARQLAB_MODEL_FAMILY(olmo_hybrid) {
    return {.name = "olmo_hybrid",
            .label = "OLMo Hybrid",
            .examples = "Olmo-Hybrid-7B (Gated DeltaNet hybrid, NoPE attention with OLMo 3's "
                        "norms)",
            .architectures = {"OlmoHybridForCausalLM"},
            .parse = parseOlmoHybrid};
}
