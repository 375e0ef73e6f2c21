// Zamba2 (Zamba2ForCausalLM: Zyphra's Zamba2 1.2B, 2.7B and 7B): Mamba-2 layers, and at the
// hybrid layers a transformer block shared between them (attention and MLP on the hidden state
// beside the token embeddings, twice the hidden width, no residual of its own, low-rank adapters
// per layer), whose output joins the Mamba-2 layer's input through a linear of the layer's own
// (NormPlacement::SharedBlock; docs/learned-sparse-and-hybrid.md §15).

#include "model/family_common.h"
#include "model/model_family.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

namespace sparqlab::model {

namespace {

/// Zamba2Config's default layers_block_type (54 layers, hybrid at 6, 12, …, 42, 47, 51).
std::vector<std::string> defaultBlockTypes() {
    std::vector<std::string> k{"mamba"};
    for (int i = 0; i < 7; ++i) {
        k.insert(k.end(), 5, "mamba");
        k.emplace_back("hybrid");
    }
    k.insert(k.end(), 4, "mamba");
    k.emplace_back("hybrid");
    k.insert(k.end(), 3, "mamba");
    k.emplace_back("hybrid");
    k.insert(k.end(), 2, "mamba");
    return k;
}

/// The layer kinds from layers_block_type (alias layer_types): "mamba" (transformers' newest
/// "linear_attention") or "hybrid", one per layer.
void readBlockTypes(const ConfigKeys& t, ModelConfig& c) {
    const std::string key = t.has("layers_block_type") ? "layers_block_type" : "layer_types";
    std::vector<std::string> kinds;
    if (t.has(key)) {
        const json& j = t.raw(key);
        if (!j.is_array())
            t.fail(key, "must list \"mamba\" or \"hybrid\", one per layer");
        for (const json& k : j) {
            if (k.is_string() && (k == "m" || k == "g"))
                t.fail(key, "holds Zyphra's pre-transformers layer types (\"m\", \"g\"): convert "
                            "the checkpoint with transformers' Zamba2 first");
            if (!k.is_string() || (k != "mamba" && k != "linear_attention" && k != "hybrid"))
                t.fail(key, "must hold \"mamba\" or \"hybrid\"");
            kinds.push_back(k == "hybrid" ? "hybrid" : "mamba");
        }
    } else {
        kinds = defaultBlockTypes();
    }
    if (kinds.size() != static_cast<size_t>(c.nLayers))
        t.fail(key, "must list one kind per layer (" + std::to_string(c.nLayers) + "), not " +
                        std::to_string(kinds.size()));
    std::vector<int64_t> hybrid;
    for (size_t l = 0; l < kinds.size(); ++l) {
        c.layerKinds.push_back(kinds[l] == "hybrid" ? LayerKind::AttentionMamba2
                                                    : LayerKind::Mamba2);
        if (kinds[l] == "hybrid")
            hybrid.push_back(static_cast<int64_t>(l));
    }
    if (hybrid.empty())
        t.fail(key, "must name at least one hybrid layer (the layers SparQ Lab captures)");
    // transformers recomputes hybrid_layer_ids from the list; the adapters are indexed by it.
    if (t.has("hybrid_layer_ids") && t.raw("hybrid_layer_ids") != json(hybrid))
        t.fail("hybrid_layer_ids",
               "must be the hybrid layers of " + key + " (" + json(hybrid).dump() + ")");
}

/// Zamba2's Mamba-2 layers in LinearSpec's terms (model_config.h): mamba_ngroups key heads of
/// mamba_d_state (B and C), n_mamba_heads value heads over int(mamba_expand · hidden_size)
/// channels, a convolution of mamba_d_conv with its bias, then SiLU (hidden_act is the MLP's),
/// the time step at or above time_step_min, the gated norm per group with eps 1e-5.
void readMamba(const ConfigKeys& t, ModelConfig& c) {
    LinearSpec& s = c.linear;
    const double expand = t.number("mamba_expand", 2);
    if (!(expand > 0 && expand <= 64))
        t.fail("mamba_expand", "must be a number in (0, 64]");
    const auto inner = static_cast<int64_t>(expand * static_cast<double>(c.hiddenSize));
    s.valueHeads = t.integer("n_mamba_heads", 8);
    s.keyHeads = t.integer("mamba_ngroups", 1);
    s.keyDim = t.integer("mamba_d_state", 64);
    s.convKernel = t.integer("mamba_d_conv", 4, 1, 64);
    s.chunk = t.integer("chunk_size", 256);
    const std::string width = "int(mamba_expand × hidden_size) (" + std::to_string(inner) + ")";
    if (inner < 1 || inner % s.valueHeads != 0)
        t.fail("n_mamba_heads", "must divide " + width);
    s.valueDim = inner / s.valueHeads;
    if (t.has("mamba_headdim") && t.integer("mamba_headdim", s.valueDim) != s.valueDim)
        t.fail("mamba_headdim",
               "must be " + width + " / n_mamba_heads (" + std::to_string(s.valueDim) + ")");
    if (s.valueHeads % s.keyHeads != 0)
        t.fail("mamba_ngroups", "must divide n_mamba_heads (" + std::to_string(s.valueHeads) + ")");
    // The convolution always has its bias (transformers adds it in a prefill whatever
    // use_conv_bias says, and in a decode step only where it is true): false is refused.
    if (!t.boolean("use_conv_bias", true))
        t.fail("use_conv_bias", "false is not read: transformers' Zamba2 adds the convolution's "
                                "bias in a prefill and not in a decode step");
    s.convBias = true;
    s.convAct = "silu";
    s.normGroups = s.keyHeads;
    s.gateNormEps = 1e-5; // (Zamba2RMSNormGated's, whatever rms_norm_eps is)
    s.dtMin = t.number("time_step_min", 0.001);
    if (!(s.dtMin >= 0))
        t.fail("time_step_min", "must be a number at or above 0");
}

void parseZamba2(const ConfigKeys& t, ModelConfig& c) {
    LlamaDefaults d;
    d.vocab = 32000;
    d.hidden = 2560;
    d.layers = 54;
    d.heads = 32;
    d.maxPositions = 4096;
    d.normEps = 1e-5;
    d.tieEmbeddings = true;
    d.hiddenAct = "gelu";
    d.headDim = 1; // (set below: head_dim is not read, transformers computes it)
    readJambaBlockCore(t, c, d);
    const int64_t h = c.hiddenSize;
    // The attention reads [x | embeddings]: its heads split twice the hidden width.
    if ((2 * h) % c.nHeads != 0)
        t.fail("num_attention_heads",
               "must divide twice the hidden size (" + std::to_string(2 * h) + ")");
    c.headDim = c.rotaryDim = 2 * h / c.nHeads;
    for (const char* k : {"attention_head_dim", "head_dim"})
        if (t.has(k) && t.integer(k, c.headDim) != c.headDim)
            t.fail(k, "must be 2 × hidden_size / num_attention_heads (" +
                          std::to_string(c.headDim) + ")");
    if (c.nHeads % c.nKvHeads != 0)
        t.fail("num_key_value_heads",
               "must divide num_attention_heads (" + std::to_string(c.nHeads) + ")");
    c.attnScale = 1.0 / std::sqrt(static_cast<double>(c.headDim) / 2.0); // (head_dim / 2)^-½
    // intermediate_size null or 0: 4 × hidden_size (Zamba2Config's `intermediate_size or 4·h`)
    c.intermediateSize = t.has("intermediate_size") ? t.integer("intermediate_size", 0, 0) : 0;
    if (c.intermediateSize == 0)
        c.intermediateSize = 4 * h;
    if (t.boolean("add_bias_linear", false))
        t.fail("add_bias_linear",
               "true is not read: SparQ Lab reads Zamba2 without the MLP's and "
               "the Mamba-2 projections' biases (the released models have none)");
    c.qkvBias = c.outBias = c.mlpBias = false;
    c.norms = NormPlacement::SharedBlock;
    c.fusedGateUp = true; // (gate_up_proj: rows gate, up)
    SharedBlockSpec& b = c.shared;
    b.blocks = t.integer("num_mem_blocks", 1);
    b.adapterRank = t.integer("adapter_rank", 128);
    b.attentionAdapters = t.boolean("use_shared_attention_adapter", false);
    if (b.attentionAdapters && c.nKvHeads != c.nHeads)
        t.fail("num_key_value_heads", "must equal num_attention_heads where "
                                      "use_shared_attention_adapter is true (the k and v adapters "
                                      "give every head)");
    readBlockTypes(t, c);
    // Blocks beyond the hybrid layers' count are built by no layer and saved nowhere.
    b.blocks = std::min<int64_t>(b.blocks, static_cast<int64_t>(c.attentionLayers().size()));
    readMamba(t, c);
    // RoPE over the whole head where use_mem_rope says; none otherwise.
    if (t.boolean("use_mem_rope", false)) {
        if (t.boolean("use_long_context", false))
            t.fail("use_long_context",
                   "true with use_mem_rope is not read: transformers 4 scales rope_theta by "
                   "8^(d/(d − 2)) there and transformers 5 does not");
        readRopeScaling(t, c);
    } else {
        c.layerNoRope.assign(static_cast<size_t>(c.nLayers), true);
    }
    if (t.boolean("use_long_context", false))
        c.maxPositions = 16384; // (as Zamba2Config sets it)
}

} // namespace
} // namespace sparqlab::model

SPARQLAB_MODEL_FAMILY(zamba2) {
    return {.name = "zamba2",
            .label = "Zamba2",
            .examples = "Zamba2 1.2B, 2.7B and 7B (Mamba-2 layers and a shared attention block "
                        "with per-layer adapters)",
            .architectures = {"Zamba2ForCausalLM"},
            .parse = parseZamba2};
}
