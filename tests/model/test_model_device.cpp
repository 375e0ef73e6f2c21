// The model on the GPU (docs/gpu.md, "The model on the GPU"): a capture made with --device cuda
// equals the CPU's, and greedy generation (dense, and SparQ through the decode kernels) gives the
// same tokens where the margins allow, for a random model of each attention kind of the family
// table: sinks, MLA, chunked and NoPE layers, MoE, a DSA indexer, MiniMax-M3's block indexer,
// hybrid linear attention. Where
// no CUDA device is usable these functions are skipped with the reason; what runs everywhere is the
// one-line error when CUDA is asked for and absent, the GPU memory check, and the generation
// benchmark's arithmetic (bench-generate) on the CPU.

#include "test_support.h"

#include "analysis/generation_speed.h"
#include "attention/method_table.h"
#include "attention/runtime_info.h"
#include "attention/transfer.h"
#include "capture/capture_file.h"
#include "model/model.h"

#include <ATen/ATen.h>
#include <QTemporaryDir>
#ifdef SPARQLAB_STEP_EMULATION
#include "attention/cuda/step.h"
#include "simt/emulated.h"
#endif
#include <QtTest>
#include <nlohmann/json.hpp>

#include <cmath>

using namespace sparqlab;
using json = nlohmann::json;

namespace {

/// A config of each attention kind, as the references of refs/hf3 and refs/hf4 hold them (the
/// Llama 4 and MiniMax-M3 ones as test_model_families_2026 builds them; M3's blocks of 8, so that
/// 80 positions pass the 3 kept), with the context the test needs.
struct Kind {
    const char* name;
    const char* config;
};

const Kind
    kKinds[] =
        {
            {"gpt_oss (sinks, sliding layers, MoE)",
             R"({"architectures":["GptOssForCausalLM"],"attention_bias":true,"head_dim":64,"hidden_act":"silu","hidden_size":128,"intermediate_size":64,"layer_types":["sliding_attention","full_attention","sliding_attention","full_attention"],"max_position_embeddings":4096,"model_type":"gpt_oss","num_attention_heads":4,"num_experts_per_tok":4,"num_hidden_layers":4,"num_key_value_heads":2,"num_local_experts":8,"rms_norm_eps":1e-05,"rope_parameters":{"beta_fast":32.0,"beta_slow":1.0,"factor":32.0,"original_max_position_embeddings":4096,"rope_theta":150000.0,"rope_type":"yarn","truncate":false},"sliding_window":16,"tie_word_embeddings":false,"dtype":"float32","vocab_size":512,"bos_token_id":1,"eos_token_id":2})"},
            {"deepseek_v3 (MLA, MoE)",
             R"({"architectures":["DeepseekV3ForCausalLM"],"attention_bias":false,"first_k_dense_replace":1,"head_dim":16,"hidden_act":"silu","hidden_size":128,"intermediate_size":256,"kv_lora_rank":32,"max_position_embeddings":4096,"model_type":"deepseek_v3","moe_intermediate_size":64,"n_group":4,"n_routed_experts":8,"n_shared_experts":1,"norm_topk_prob":true,"num_attention_heads":4,"num_experts_per_tok":2,"num_hidden_layers":3,"num_key_value_heads":4,"q_lora_rank":64,"qk_head_dim":48,"qk_nope_head_dim":32,"qk_rope_head_dim":16,"rms_norm_eps":1e-06,"rope_interleave":true,"rope_parameters":{"beta_fast":32.0,"beta_slow":1.0,"factor":40.0,"mscale":1.0,"mscale_all_dim":1.0,"original_max_position_embeddings":4096,"rope_theta":10000.0,"rope_type":"yarn"},"routed_scaling_factor":2.5,"tie_word_embeddings":false,"topk_group":2,"v_head_dim":32,"dtype":"float32","vocab_size":512,"bos_token_id":0,"eos_token_id":1})"},
            {"mistral4 (MLA, softmax-routed MoE, queries scaled by position)",
             R"({"architectures":["Mistral4ForCausalLM"],"model_type":"mistral4","hidden_size":128,"intermediate_size":256,"moe_intermediate_size":64,"num_hidden_layers":3,"num_attention_heads":4,"num_key_value_heads":4,"q_lora_rank":64,"kv_lora_rank":32,"qk_nope_head_dim":32,"qk_rope_head_dim":16,"v_head_dim":32,"n_routed_experts":8,"n_shared_experts":1,"num_experts_per_tok":2,"n_group":2,"topk_group":1,"routed_scaling_factor":1.0,"first_k_dense_replace":1,"rope_interleave":true,"rope_parameters":{"rope_type":"yarn","rope_theta":10000.0,"factor":4.0,"original_max_position_embeddings":16,"beta_fast":32.0,"beta_slow":1.0,"mscale":1.0,"mscale_all_dim":1.0,"llama_4_scaling_beta":0.1},"vocab_size":512,"max_position_embeddings":4096,"rms_norm_eps":1e-06,"tie_word_embeddings":false,"dtype":"float32","bos_token_id":1,"eos_token_id":2})"},
            {"llama4_text (chunked and NoPE layers, MoE)",
             R"({"architectures":["Llama4ForCausalLM"],"model_type":"llama4_text","hidden_size":64,"intermediate_size":32,"intermediate_size_mlp":96,"num_hidden_layers":4,"num_attention_heads":4,"num_key_value_heads":2,"head_dim":16,"vocab_size":512,"max_position_embeddings":4096,"rms_norm_eps":1e-05,"hidden_act":"silu","num_local_experts":4,"num_experts_per_tok":1,"interleave_moe_layer_step":2,"no_rope_layers":[1,1,1,0],"attention_chunk_size":6,"attn_temperature_tuning":true,"floor_scale":4,"attn_scale":0.1,"use_qk_norm":true,"rope_parameters":{"rope_type":"default","rope_theta":500000.0},"tie_word_embeddings":false,"dtype":"float32","bos_token_id":1,"eos_token_id":2})"},
            {"cohere2 (sliding and NoPE full layers, parallel block)",
             R"({"architectures":["Cohere2ForCausalLM"],"attention_bias":false,"head_dim":32,"hidden_act":"silu","hidden_size":128,"intermediate_size":256,"layer_norm_eps":1e-05,"layer_types":["sliding_attention","sliding_attention","sliding_attention","full_attention"],"logit_scale":0.25,"max_position_embeddings":4096,"model_type":"cohere2","num_attention_heads":4,"num_hidden_layers":4,"num_key_value_heads":2,"rope_parameters":{"rope_theta":50000.0,"rope_type":"default"},"sliding_window":16,"tie_word_embeddings":true,"dtype":"float32","vocab_size":512,"bos_token_id":5,"eos_token_id":3})"},
            {"qwen3_moe (MoE)",
             R"({"architectures":["Qwen3MoeForCausalLM"],"attention_bias":false,"decoder_sparse_step":1,"head_dim":48,"hidden_act":"silu","hidden_size":128,"intermediate_size":256,"max_position_embeddings":4096,"mlp_only_layers":[1],"model_type":"qwen3_moe","moe_intermediate_size":64,"norm_topk_prob":true,"num_attention_heads":4,"num_experts_per_tok":2,"num_hidden_layers":3,"num_key_value_heads":2,"num_local_experts":8,"rms_norm_eps":1e-06,"rope_parameters":{"rope_theta":1000000.0,"rope_type":"default"},"tie_word_embeddings":false,"dtype":"float32","vocab_size":512,"bos_token_id":1,"eos_token_id":2})"},
            {"deepseek_v32 (DSA indexer, MLA)",
             R"({"architectures":["DeepseekV32ForCausalLM"],"attention_bias":false,"first_k_dense_replace":1,"head_dim":16,"hidden_act":"silu","hidden_size":128,"index_head_dim":32,"index_n_heads":16,"index_topk":16,"intermediate_size":256,"kv_lora_rank":32,"layer_types":["deepseek_sparse_attention","deepseek_sparse_attention","deepseek_sparse_attention"],"max_position_embeddings":4096,"mlp_bias":false,"mlp_layer_types":["dense","sparse","sparse"],"model_type":"deepseek_v32","moe_intermediate_size":64,"n_group":4,"n_routed_experts":8,"n_shared_experts":1,"norm_topk_prob":true,"num_attention_heads":4,"num_experts_per_tok":2,"num_hidden_layers":3,"num_key_value_heads":4,"q_lora_rank":64,"qk_head_dim":48,"qk_nope_head_dim":32,"qk_rope_head_dim":16,"rms_norm_eps":1e-06,"rope_parameters":{"beta_fast":32.0,"beta_slow":1.0,"factor":40.0,"mscale":1.0,"mscale_all_dim":1.0,"original_max_position_embeddings":4096,"rope_theta":10000.0,"rope_type":"yarn"},"routed_scaling_factor":2.5,"tie_word_embeddings":false,"topk_group":2,"v_head_dim":32,"dtype":"float32","vocab_size":512,"bos_token_id":0,"eos_token_id":1})"},
            {"qwen3_next (hybrid: Gated DeltaNet layers, gated attention, MoE)",
             R"({"architectures":["Qwen3NextForCausalLM"],"attention_bias":false,"decoder_sparse_step":1,"head_dim":64,"hidden_act":"silu","hidden_size":128,"intermediate_size":256,"layer_types":["linear_attention","linear_attention","linear_attention","full_attention"],"linear_conv_kernel_dim":4,"linear_key_head_dim":32,"linear_num_key_heads":2,"linear_num_value_heads":4,"linear_value_head_dim":32,"max_position_embeddings":4096,"mlp_only_layers":[],"model_type":"qwen3_next","moe_intermediate_size":64,"norm_topk_prob":true,"num_attention_heads":4,"num_experts":8,"num_experts_per_tok":2,"num_hidden_layers":4,"num_key_value_heads":2,"partial_rotary_factor":0.25,"rms_norm_eps":1e-06,"rope_parameters":{"partial_rotary_factor":0.25,"rope_theta":10000000.0,"rope_type":"default"},"shared_expert_intermediate_size":64,"tie_word_embeddings":false,"dtype":"float32","vocab_size":512,"bos_token_id":1,"eos_token_id":2})"},
            {"qwen3_5_moe (hybrid, MoE; a VL folder, the experts packed)",
             R"({"architectures":["Qwen3_5MoeForConditionalGeneration"],"model_type":"qwen3_5_moe","text_config":{"model_type":"qwen3_5_moe_text","attention_bias":false,"head_dim":64,"hidden_act":"silu","hidden_size":128,"layer_types":["linear_attention","linear_attention","linear_attention","full_attention"],"linear_conv_kernel_dim":4,"linear_key_head_dim":32,"linear_num_key_heads":2,"linear_num_value_heads":4,"linear_value_head_dim":32,"max_position_embeddings":4096,"moe_intermediate_size":64,"num_attention_heads":4,"num_experts":8,"num_experts_per_tok":2,"num_hidden_layers":4,"num_key_value_heads":2,"rms_norm_eps":1e-06,"rope_parameters":{"partial_rotary_factor":0.25,"rope_theta":10000000.0,"rope_type":"default","mrope_interleaved":true,"mrope_section":[11,11,10]},"shared_expert_intermediate_size":64,"dtype":"float32","vocab_size":512,"bos_token_id":1,"eos_token_id":2},"tie_word_embeddings":false})"},
            {"minimax_m3 (block indexer per group of query heads, MoE)",
             R"({"architectures":["MiniMaxM3VLForCausalLM"],"model_type":"minimax_m3_vl_text","hidden_size":128,"intermediate_size":64,"dense_intermediate_size":128,"shared_intermediate_size":64,"num_hidden_layers":3,"num_attention_heads":4,"num_key_value_heads":2,"head_dim":32,"rotary_dim":16,"max_position_embeddings":4096,"rms_norm_eps":1e-06,"num_local_experts":8,"num_experts_per_tok":2,"routed_scaling_factor":2.0,"swiglu_alpha":1.702,"swiglu_limit":7.0,"hidden_act":"swigluoai","mlp_layer_types":["dense","sparse","sparse"],"layer_types":["full_attention","minimax_m3_sparse","minimax_m3_sparse"],"index_n_heads":2,"index_head_dim":32,"index_block_size":8,"index_topk_blocks":3,"index_local_blocks":1,"rope_parameters":{"rope_type":"default","rope_theta":5000000.0},"tie_word_embeddings":false,"dtype":"float32","vocab_size":512,"bos_token_id":1,"eos_token_id":2})"},
            {"granitemoehybrid (hybrid: Mamba-2 layers, NoPE attention, experts beside a "
             "shared "
             "MLP)",
             R"({"architectures":["GraniteMoeHybridForCausalLM"],"model_type":"granitemoehybrid","hidden_size":128,"intermediate_size":64,"shared_intermediate_size":128,"num_hidden_layers":4,"num_attention_heads":4,"num_key_value_heads":2,"vocab_size":512,"max_position_embeddings":4096,"rms_norm_eps":1e-05,"num_local_experts":8,"num_experts_per_tok":2,"layer_types":["mamba","mamba","mamba","attention"],"position_embedding_type":"nope","mamba_n_heads":8,"mamba_n_groups":2,"mamba_d_state":32,"mamba_d_head":32,"mamba_d_conv":4,"mamba_expand":2,"mamba_chunk_size":16,"embedding_multiplier":12.0,"attention_multiplier":0.03125,"residual_multiplier":0.22,"logits_scaling":4.0,"tie_word_embeddings":true,"dtype":"float32","bos_token_id":1,"eos_token_id":2})"},
            {"bamba (hybrid: Mamba-2 layers, attention with RoPE on half of each head)",
             R"({"architectures":["BambaForCausalLM"],"model_type":"bamba","hidden_size":128,"intermediate_size":192,"num_hidden_layers":4,"num_attention_heads":4,"num_key_value_heads":2,"vocab_size":512,"max_position_embeddings":4096,"rms_norm_eps":1e-05,"attn_layer_indices":[1,3],"mamba_n_heads":8,"mamba_n_groups":1,"mamba_d_state":32,"mamba_d_head":"auto","mamba_d_conv":4,"mamba_expand":2,"mamba_chunk_size":16,"rope_theta":10000.0,"tie_word_embeddings":false,"dtype":"float32","bos_token_id":1,"eos_token_id":2})"},
            {"jamba (hybrid: Mamba layers, attention without positions, experts)", R"({"architectures":["JambaForCausalLM"],"model_type":"jamba","hidden_size":128,"intermediate_size":192,"num_hidden_layers":4,"num_attention_heads":4,"num_key_value_heads":2,"vocab_size":512,"max_position_embeddings":4096,"rms_norm_eps":1e-06,"attn_layer_period":2,"attn_layer_offset":1,"expert_layer_period":2,"expert_layer_offset":1,"num_experts":4,"num_experts_per_tok":2,"mamba_d_state":16,"mamba_d_conv":4,"mamba_expand":2,"mamba_dt_rank":"auto","tie_word_embeddings":false,"dtype":"float32","bos_token_id":1,"eos_token_id":2})"},
            {"minimax (hybrid: lightning attention, attention with RoPE on half of each "
             "head, experts)",
             R"({"architectures":["MiniMaxForCausalLM"],"model_type":"minimax","hidden_size":128,"intermediate_size":192,"num_hidden_layers":4,"num_attention_heads":4,"num_key_value_heads":2,"vocab_size":512,"max_position_embeddings":4096,"rms_norm_eps":1e-05,"layer_types":["linear_attention","full_attention","linear_attention","full_attention"],"block_size":16,"rotary_dim":16,"num_local_experts":4,"num_experts_per_tok":2,"full_attn_alpha_factor":2.8,"linear_attn_alpha_factor":2.8,"mlp_alpha_factor":2.8,"rope_theta":10000000.0,"tie_word_embeddings":false,"dtype":"float32","bos_token_id":1,"eos_token_id":2})"},
            {"zamba2 (hybrid: Mamba-2 layers, a shared attention block on [x | embeddings] "
             "with per-layer adapters)",
             R"({"architectures":["Zamba2ForCausalLM"],"model_type":"zamba2","hidden_size":64,"intermediate_size":128,"num_hidden_layers":4,"num_attention_heads":4,"num_key_value_heads":4,"vocab_size":512,"max_position_embeddings":4096,"rms_norm_eps":1e-05,"layers_block_type":["hybrid","mamba","hybrid","hybrid"],"num_mem_blocks":2,"use_shared_attention_adapter":true,"adapter_rank":8,"use_mem_rope":true,"rope_theta":10000.0,"mamba_d_state":16,"mamba_d_conv":4,"mamba_expand":2,"mamba_ngroups":2,"n_mamba_heads":4,"chunk_size":16,"hidden_act":"gelu","tie_word_embeddings":true,"dtype":"float32","bos_token_id":1,"eos_token_id":2})"},
            {"olmo_hybrid (hybrid: Gated DeltaNet with a convolution each for q, k and v, "
             "NoPE attention with OLMo 3's norms)",
             R"({"architectures":["OlmoHybridForCausalLM"],"model_type":"olmo_hybrid","hidden_size":128,"intermediate_size":192,"num_hidden_layers":4,"num_attention_heads":4,"num_key_value_heads":2,"vocab_size":512,"max_position_embeddings":4096,"rms_norm_eps":1e-06,"layer_types":["linear_attention","linear_attention","linear_attention","full_attention"],"linear_num_key_heads":2,"linear_num_value_heads":4,"linear_key_head_dim":32,"linear_value_head_dim":64,"linear_conv_kernel_dim":4,"linear_allow_neg_eigval":true,"rope_parameters":{"rope_theta":null,"rope_type":"default"},"hidden_act":"silu","tie_word_embeddings":false,"dtype":"float32","bos_token_id":1,"eos_token_id":2})"},
            {"nemotron_h (hybrid: single-mixer blocks of Mamba-2, NoPE attention, relu² MLPs "
             "and "
             "experts)",
             R"({"architectures":["NemotronHForCausalLM"],"model_type":"nemotron_h","hidden_size":128,"intermediate_size":192,"hybrid_override_pattern":"MEM*E-","num_attention_heads":4,"num_key_value_heads":2,"head_dim":32,"vocab_size":512,"max_position_embeddings":4096,"layer_norm_epsilon":1e-05,"mamba_num_heads":8,"mamba_head_dim":32,"ssm_state_size":32,"n_groups":2,"conv_kernel":4,"chunk_size":16,"n_routed_experts":8,"num_experts_per_tok":2,"moe_intermediate_size":64,"moe_shared_expert_intermediate_size":96,"n_group":1,"topk_group":1,"routed_scaling_factor":2.5,"dtype":"float32","bos_token_id":1,"eos_token_id":2})"},
            {"falcon_h1 (hybrid: attention and Mamba-2 side by side in every layer, µP "
             "multipliers)",
             R"({"architectures":["FalconH1ForCausalLM"],"model_type":"falcon_h1","hidden_size":128,"intermediate_size":192,"num_hidden_layers":3,"num_attention_heads":4,"num_key_value_heads":2,"head_dim":32,"vocab_size":512,"max_position_embeddings":4096,"rms_norm_eps":1e-05,"mamba_d_ssm":256,"mamba_n_heads":8,"mamba_d_state":32,"mamba_n_groups":2,"mamba_d_conv":4,"mamba_chunk_size":16,"mamba_rms_norm":true,"mamba_norm_before_gate":false,"rope_theta":100000000000.0,"embedding_multiplier":5.656854249492381,"key_multiplier":0.390625,"attention_out_multiplier":0.9375,"ssm_in_multiplier":1.25,"ssm_out_multiplier":0.23570226039551587,"ssm_multipliers":[0.3535533905932738,0.25,0.3535533905932738,0.5,0.3535533905932738],"mlp_multipliers":[0.8838834764831844,0.5859375],"lm_head_multiplier":0.0390625,"tie_word_embeddings":false,"dtype":"float32","bos_token_id":1,"eos_token_id":2})"},
            {"lfm2 (hybrid: gated short convolutions, attention with q and k norms)",
             R"({"architectures":["Lfm2ForCausalLM"],"model_type":"lfm2","hidden_size":128,"block_ff_dim":384,"block_multiple_of":64,"num_hidden_layers":4,"num_attention_heads":4,"num_key_value_heads":2,"vocab_size":512,"max_position_embeddings":4096,"norm_eps":1e-05,"full_attn_idxs":[1,3],"conv_L_cache":3,"rope_theta":1000000.0,"tie_embedding":true,"dtype":"float32","bos_token_id":1,"eos_token_id":2})"},
            {"lfm2_moe (hybrid: short convolutions, experts behind a sigmoid router)",
             R"({"architectures":["Lfm2MoeForCausalLM"],"model_type":"lfm2_moe","hidden_size":128,"intermediate_size":256,"moe_intermediate_size":64,"num_dense_layers":1,"num_experts":8,"num_experts_per_tok":2,"num_hidden_layers":4,"num_attention_heads":4,"num_key_value_heads":2,"vocab_size":512,"max_position_embeddings":4096,"norm_eps":1e-05,"full_attn_idxs":[1,3],"conv_L_cache":3,"rope_theta":1000000.0,"tie_embedding":true,"dtype":"float32","bos_token_id":1,"eos_token_id":2})"},
            {"deepseek_v4 (a window and compressed entries, an indexer over them, "
             "hyper-connections, hash-routed experts)",
             R"({"architectures":["DeepseekV4ForCausalLM"],"model_type":"deepseek_v4","hidden_size":128,"moe_intermediate_size":64,"num_hidden_layers":3,"num_attention_heads":4,"num_key_value_heads":1,"head_dim":64,"q_lora_rank":64,"o_groups":2,"o_lora_rank":32,"partial_rotary_factor":0.25,"sliding_window":16,"layer_types":["heavily_compressed_attention","compressed_sparse_attention","sliding_attention"],"compress_rates":{"compressed_sparse_attention":4,"heavily_compressed_attention":8},"index_n_heads":16,"index_head_dim":32,"index_topk":4,"hc_mult":4,"hc_sinkhorn_iters":20,"hc_eps":1e-06,"n_routed_experts":8,"num_experts_per_tok":2,"mlp_layer_types":["hash_moe","moe","moe"],"routed_scaling_factor":1.5,"swiglu_limit":10.0,"rope_parameters":{"main":{"rope_type":"default","rope_theta":10000.0},"compress":{"rope_type":"yarn","rope_theta":160000.0,"factor":16.0,"original_max_position_embeddings":64,"attention_factor":1.0}},"vocab_size":512,"max_position_embeddings":4096,"rms_norm_eps":1e-06,"tie_word_embeddings":false,"dtype":"float32","bos_token_id":0,"eos_token_id":1})"},
            {"llama (GQA, the decode kernels' shape: head_dim 128)",
             R"({"architectures":["LlamaForCausalLM"],"model_type":"llama","hidden_size":256,"intermediate_size":512,"num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":2,"head_dim":128,"vocab_size":512,"max_position_embeddings":4096,"rms_norm_eps":1e-05,"hidden_act":"silu","rope_parameters":{"rope_type":"default","rope_theta":10000.0},"tie_word_embeddings":false,"dtype":"float32","bos_token_id":1,"eos_token_id":2})"},
};

/// The tolerances of a GPU capture against the CPU's, relative to the CPU tensor's largest
/// magnitude: float32 differs by the order of summation alone; bfloat16 rounds every product to
/// 8 bits of mantissa, compounded over the layers.
double tolerance(const QString& dtype) {
    return dtype == QLatin1String("f32") ? 1e-4 : 3e-2;
}

/// Whether a capture of `m` starts at the model's first layer (not a hybrid's first attention
/// layer).
bool startsAtLayer0(const model::Model& m) {
    const std::vector<int64_t>& layers = m.captureInfo().modelLayers;
    return layers.empty() || layers.front() == 0;
}

/// How many of `n` positions may differ past the first layer (compareCaptures): none in float32;
/// a quarter in bfloat16, where a random model's router flips between near-tied experts at 9 of
/// 48 positions (gpt_oss, bfloat16 against float32 on the CPU).
int64_t offTokens(const QString& dtype, size_t n) {
    return dtype == QLatin1String("f32") ? 0 : static_cast<int64_t>(n) / 4;
}

/// A random model of `config` in `dtype` (sparqlab-cli init-model) under `root`.
QString makeModel(const QString& root, const Kind& kind, const QString& dtype) {
    const QString dir = root + QLatin1String("/") + QString::number(qHash(QString(kind.name))) +
                        QLatin1String("-") + dtype;
    const QString config = dir + QLatin1String(".json");
    if (!test::writeFile(config, kind.config))
        throw std::runtime_error("cannot write " + config.toStdString());
    test::cliOut({"init-model", "--config", config, "--out", dir, "--dtype", dtype, "--seed", "3"});
    return dir;
}

/// Random ids in [2, vocab) (no end-of-sequence id), seeded.
std::vector<int64_t> randomIds(int64_t n, int64_t vocab, uint64_t seed) {
    auto gen = at::detail::createCPUGenerator(seed);
    return test::toVector(at::randint(2, vocab, {n}, gen, at::kLong));
}

/// The gap between the top two logits of a generation's step `i`.
double topGap(const model::Generation& g, size_t i) {
    const at::Tensor top = std::get<0>(g.stepLogits[i].to(at::kFloat).topk(2));
    return (top[0] - top[1]).item<double>();
}

/// Empty when two generations choose the same tokens up to the first step whose top two logits
/// on the CPU are at most `margin` apart (a near tie may fall either way, and the sequences part
/// there), else the first difference; a near tie at the first step is a failure too (nothing
/// would be compared).
QString compareTokens(const model::Generation& cpu, const model::Generation& gpu, double margin) {
    for (size_t i = 0; i < cpu.newIds.size() && i < gpu.newIds.size(); ++i) {
        const double gap = topGap(cpu, i);
        if (gap <= margin)
            return i > 0 ? QString()
                         : QStringLiteral("the first step is a near tie (margin %1)").arg(gap);
        if (cpu.newIds[i] != gpu.newIds[i])
            return QStringLiteral("step %1: the CPU chose %2, the GPU %3 (margin %4)")
                .arg(i)
                .arg(cpu.newIds[i])
                .arg(gpu.newIds[i])
                .arg(gap);
    }
    if (cpu.newIds.size() != gpu.newIds.size())
        return QStringLiteral("%1 tokens on the CPU, %2 on the GPU")
            .arg(cpu.newIds.size())
            .arg(gpu.newIds.size());
    return {};
}

/// Empty when captures `a` and `b` hold the same tensors (q, K, V, a DSA model's indexer scores),
/// `b`'s on the host, with the same non-finite entries and the rest within `tol` of `a`'s largest
/// magnitude; else what differs. Rounding can flip a discrete choice (an MoE router's experts,
/// the DSA indexer's keys) where two candidates nearly tie, and the position it is made for then
/// differs in every later layer: past the model's first layer (which comes before any choice;
/// checked where `reference`'s capture starts there, not at a hybrid's first attention layer), at
/// most offTokens() of the prompt's positions may hold entries further off. `tol`: tolerance().
QString compareCaptures(const model::CaptureExample& a, const model::CaptureExample& b,
                        const QString& dtype, const model::Model& reference) {
    const double tol = tolerance(dtype);
    const int64_t mayBeOff = offTokens(dtype, static_cast<size_t>(a.k.size(2)));
    const bool firstIsModelFirst = startsAtLayer0(reference);
    // Each tensor is [L, ...] with the prompt's positions in dimension `tokenDim` (the index
    // scores: DSA's [L, T, S], a block indexer's [L, Hi, T, blocks]).
    const int indexTokens = a.indexScores.defined() && a.indexScores.dim() == 4 ? 2 : 1;
    for (const auto& [name, x, y, tokenDim] :
         {std::tuple{"q", a.q, b.q, 2}, std::tuple{"k", a.k, b.k, 2}, std::tuple{"v", a.v, b.v, 2},
          std::tuple{"index_scores", a.indexScores, b.indexScores, indexTokens}}) {
        const QString what = QString::fromLatin1(name);
        if (x.defined() != y.defined())
            return what + QStringLiteral(": in one capture only");
        if (!x.defined())
            continue;
        if (!y.device().is_cpu())
            return what + QStringLiteral(": not on the host");
        const at::Tensor finite = at::isfinite(x);
        if (!at::equal(finite, at::isfinite(y)))
            return what + QStringLiteral(": the non-finite entries differ");
        const double scale = std::max(1e-6, x.masked_select(finite).abs().max().item<double>());
        const at::Tensor xs = x.masked_fill(finite.logical_not(), 0).to(at::kDouble);
        const at::Tensor ys = y.masked_fill(finite.logical_not(), 0).to(at::kDouble);
        const QString first =
            firstIsModelFirst ? test::compareClose(ys[0], xs[0], tol * scale, 0) : QString();
        if (!first.isEmpty())
            return what + QStringLiteral(" of the first layer: ") + first;
        const at::Tensor off = (ys - xs).abs().gt(tol * scale).transpose(0, tokenDim).flatten(1);
        const int64_t offAt = off.any(1).sum().item<int64_t>();
        if (offAt > mayBeOff)
            return what +
                   QStringLiteral(": %1 of %2 positions off, at most %3 may be: ")
                       .arg(offAt)
                       .arg(off.size(0))
                       .arg(mayBeOff) +
                   test::compareClose(ys, xs, tol * scale, 0);
    }
    return {};
}

#ifdef SPARQLAB_STEP_EMULATION
/// The fused decode-step operations under the kernels' host emulation, counting their calls.
struct StepCalls {
    int norm = 0, rope = 0, append = 0, gemv = 0, gemvQkv = 0, gemvSiluMul = 0;
} g_stepCalls;
void countedNorm(const attention::cuda::RmsNormStep& s, void* stream) {
    ++g_stepCalls.norm;
    test::emulated::rmsNorm(s, stream);
}
void countedRope(const attention::cuda::RopeStep& s, void* stream) {
    ++g_stepCalls.rope;
    test::emulated::rope(s, stream);
}
void countedAppend(const attention::cuda::AppendStep& s, void* stream) {
    ++g_stepCalls.append;
    test::emulated::appendStep(s, stream);
}
void countedGemv(const attention::cuda::GemvStep& s, void* stream) {
    ++g_stepCalls.gemv;
    g_stepCalls.gemvQkv += s.outputs == 3;
    g_stepCalls.gemvSiluMul += s.siluMul;
    test::emulated::gemv(s, stream);
}
/// The model and the decode cache take the counted emulated operations while it lives.
struct EmulatedStepOps {
    const attention::cuda::StepOps ops{&countedNorm, &countedRope, &countedAppend, &countedGemv};
    EmulatedStepOps() {
        g_stepCalls = {};
        attention::cuda::setStepOpsForTesting(&ops);
    }
    ~EmulatedStepOps() { attention::cuda::setStepOpsForTesting(nullptr); }
    EmulatedStepOps(const EmulatedStepOps&) = delete;
    EmulatedStepOps& operator=(const EmulatedStepOps&) = delete;
};
#endif

/// The index in kKinds of the kind whose name starts with `prefix`.
int kindNamed(const char* prefix) {
    for (int i = 0; i < static_cast<int>(std::size(kKinds)); ++i)
        if (QString::fromLatin1(kKinds[i].name).startsWith(QLatin1String(prefix)))
            return i;
    throw std::runtime_error(std::string("no kind named ") + prefix);
}

/// The model of `folder` computing in its stored dtype, on the CPU or (`gpu`) the GPU.
std::unique_ptr<model::Model> openStored(const QString& folder, bool gpu) {
    model::ModelOpenOptions o;
    o.compute = model::ComputeDtype::Stored;
    if (gpu)
        o.device = attention::requireDevice("cuda");
    return model::Model::open(folder.toStdString(), o);
}

/// The model of `folder` opened on the CPU and on the GPU, both computing in its stored dtype.
std::pair<std::unique_ptr<model::Model>, std::unique_ptr<model::Model>>
openOnBoth(const QString& folder) {
    return {openStored(folder, false), openStored(folder, true)};
}

/// The float32 logits [1, 1, V] (on the host) of decode steps feeding `next` after a prefill of
/// `prompt`, the first half with `first`, the rest with `second`, then, rewound to the prompt
/// (as bench-generate replays each method from one prefill), the first half again with
/// `second`; with `graphs`, as CUDA graphs where the model allows them (KVCache::cudaGraphs).
/// With the cache's graphs.
struct Steps {
    std::vector<at::Tensor> logits;
    std::shared_ptr<model::DecodeGraphs> graphs;
};
Steps teacherForced(model::Model& m, const std::vector<int64_t>& prompt,
                    const std::vector<int64_t>& next, const attention::AttentionConfig& first,
                    const attention::AttentionConfig& second, bool graphs) {
    const at::AutoGradMode noGrad(false);
    model::KVCache cache;
    cache.capacity = static_cast<int64_t>(prompt.size() + next.size()) + 1;
    cache.dimensionMajor = true;
    cache.cudaGraphs = graphs;
    m.prefill(prompt, cache, first);
    Steps out;
    auto step = [&](int64_t id, const attention::AttentionConfig& a) {
        const attention::AttentionConfig attn = model::onDevice(a, m.net()->device());
        out.logits.push_back(
            m.net()->forward(at::tensor({id}, at::kLong).view({1, 1}), &cache, attn).cpu());
    };
    for (size_t i = 0; i < next.size(); ++i)
        step(next[i], i < next.size() / 2 ? first : second);
    cache.truncate(static_cast<int64_t>(prompt.size()));
    for (size_t i = 0; i < next.size() / 2; ++i)
        step(next[i], second);
    out.graphs = cache.graphs;
    return out;
}

/// Dense attention and SparQ (r 8, k 24) for `m`, checked.
std::pair<attention::AttentionConfig, attention::AttentionConfig>
denseAndSparq(const model::Model& m) {
    attention::AttentionConfig dense, sparq;
    sparq.method = attention::Method::Sparq;
    sparq.r = 8;
    sparq.k = 24;
    for (attention::AttentionConfig* a : {&dense, &sparq})
        a->validateFor(m.config().headDim, m.config().nLayers, m.config().nHeads,
                       m.config().nKvHeads);
    return {dense, sparq};
}

/// A test's data: every attention kind with each of `values` in the column `column`.
void kindRows(const char* column, std::initializer_list<const char*> values) {
    QTest::addColumn<int>("kind");
    QTest::addColumn<QString>(column);
    for (int i = 0; i < static_cast<int>(std::size(kKinds)); ++i)
        for (const char* v : values)
            QTest::newRow(qPrintable(QStringLiteral("%1 %2").arg(kKinds[i].name, v)))
                << i << QString::fromLatin1(v);
}

} // namespace

class TestModelDevice : public QObject {
    Q_OBJECT

private Q_SLOTS:
    /// Without a usable CUDA device, --device cuda is one line saying what is missing, before
    /// anything is read, for the library and the command line alike.
    void cudaAbsentIsOneLine() {
        if (attention::cudaUsable())
            QSKIP("a CUDA device is usable here: the absent case cannot be shown");
        bool threw = false;
        try {
            attention::requireDevice("cuda");
        } catch (const attention::DeviceError& e) {
            threw = true;
            const QString what = QString::fromUtf8(e.what());
            QVERIFY2(!what.contains(QLatin1Char('\n')), qPrintable(what));
            QVERIFY2(what.startsWith(QLatin1String("--device cuda: ")), qPrintable(what));
            QVERIFY2(what.contains(QLatin1String("CPU build")) ||
                         what.contains(QLatin1String("no CUDA device")),
                     qPrintable(what));
        }
        QVERIFY(threw);
        QVERIFY_THROWS_EXCEPTION(std::invalid_argument, attention::requireDevice("gpu"));
        QCOMPARE(attention::requireDevice("cpu"), c10::Device(c10::kCPU));

        model::ModelOpenOptions o;
        o.device = c10::Device(c10::kCUDA, 0);
        QVERIFY_THROWS_EXCEPTION(attention::DeviceError, model::Model::open("demo", o));

        const QTemporaryDir dir;
        const QString ids = dir.filePath(QStringLiteral("ids.json"));
        QVERIFY(test::writeFile(ids, "[1, 2, 3]"));
        for (const QStringList& args :
             {QStringList{"capture", "--model", "demo", "--ids-file", ids, "--out",
                          dir.filePath(QStringLiteral("c.h5")), "--device", "cuda"},
              QStringList{"generate", "--model", "demo", "--ids-file", ids, "--max-new-tokens", "2",
                          "--device", "cuda"},
              QStringList{"bench-generate", "--model", "demo", "--device", "cuda"}}) {
            const test::ProcessResult r = test::runCli(args);
            QCOMPARE(r.exitCode, 1);
            const QStringList lines = r.err.trimmed().split(QLatin1Char('\n'));
            QVERIFY2(lines.size() == 1 && lines.front().contains(QLatin1String("--device cuda")),
                     qPrintable(r.err));
            QVERIFY(!QFile::exists(dir.filePath(QStringLiteral("c.h5"))));
        }
        const test::ProcessResult bad =
            test::runCli({"generate", "--model", "demo", "--ids-file", ids, "--max-new-tokens", "2",
                          "--device", "tpu"});
        QCOMPARE(bad.exitCode, 2);
        QVERIFY2(bad.err.contains(QLatin1String("--device takes cpu or cuda, got 'tpu'")),
                 qPrintable(bad.err));
    }

    /// The memory check names the model's file, what did not fit and both sizes, in one line.
    void theMemoryCheckSaysWhatDoesNotFit() {
        QVERIFY_THROWS_EXCEPTION(model::MemoryError,
                                 model::checkFits("m/config.json", "the model's bfloat16 weights",
                                                  int64_t{20} << 30, int64_t{16} << 30,
                                                  "on the GPU"));
        try {
            model::checkFits("m/config.json", "the model's bfloat16 weights", int64_t{20} << 30,
                             int64_t{16} << 30, "on the GPU");
        } catch (const model::MemoryError& e) {
            QCOMPARE(QString::fromUtf8(e.what()),
                     QStringLiteral("m/config.json: the model's bfloat16 weights need 20480 MiB "
                                    "but only 16384 MiB are available on the GPU"));
        }
        // 90% of what is free may be asked for; unknown memory (0) is not checked.
        model::checkFits("w", "x", int64_t{9} << 20, int64_t{10} << 20, "on the GPU");
        model::checkFits("w", "x", int64_t{1} << 40, 0, "on the GPU");
    }

    /// The KV cache a position takes: K, V and SparQ's second copy of K in every attention
    /// layer's KV heads, counted here from the config's numbers.
    void theCacheSizeFollowsTheConfig() {
        const QTemporaryDir dir;
        for (const Kind& kind : kKinds) {
            const json whole = json::parse(kind.config);
            const json& j = whole.contains("text_config") ? whole["text_config"] : whole;
            const QString path = dir.filePath(QStringLiteral("config.json"));
            QVERIFY(test::writeFile(path, kind.config));
            const model::ModelConfig c = model::readModelConfig(path.toStdString());
            const int64_t layers = static_cast<int64_t>(c.attentionLayers().size());
            const int64_t want = layers * j["num_key_value_heads"].get<int64_t>() *
                                 (2 * c.headDim + c.valueDim()) * 2;
            QCOMPARE(c.cacheBytesPerToken(2), want);
        }
        // Counted by hand from the configs: the Llama's 2 layers × 2 KV heads × (2·128 + 128)
        // bfloat16s; DeepSeek-V3's MLA keeps 4 heads' keys of 32 + 16 and values of 32 in each
        // of 3 layers: 3 × 4 × (2·48 + 32) × 2.
        for (const auto& [kind, bytes] :
             {std::pair{kindNamed("llama ("), 3072}, std::pair{kindNamed("deepseek_v3"), 3072}}) {
            const QString path = dir.filePath(QStringLiteral("config.json"));
            QVERIFY(test::writeFile(path, kKinds[kind].config));
            QCOMPARE(model::readModelConfig(path.toStdString()).cacheBytesPerToken(2),
                     int64_t{bytes});
        }
    }

    /// SparQ's k for a compression ratio is the largest whose transfers stay within it
    /// (SPARQ.md §5), and the bytes of a decode step are the weights read once plus the caches,
    /// the attention layers' scaled by the method's transfer ratio.
    void theGenerationBenchCountsAsTheTransferModel() {
        for (const int64_t S : {1024, 4096, 32768})
            for (const int64_t r : {8, 16}) {
                const int64_t k = analysis::sparqKForCompression(0.125, S, 128, r);
                QVERIFY(attention::compressionRatio(attention::Method::Sparq, S, 128, k, r) <=
                        0.125 + 1e-12);
                QVERIFY(attention::compressionRatio(attention::Method::Sparq, S, 128, k + 1, r) >
                        0.125);
            }
        // r = 16 of d = 128 at S = 4,096: S·r/(2·S·d) = 1/16, so k ≈ S/16 (less the 4·d).
        QCOMPARE(analysis::sparqKForCompression(0.125, 4096, 128, 16), int64_t{254});
        // r = 32 alone reads 1/8: no k reaches it.
        QCOMPARE(analysis::sparqKForCompression(0.125, 1024, 128, 32), int64_t{0});

        const QTemporaryDir dir;
        const QString path = dir.filePath(QStringLiteral("config.json"));
        QVERIFY(test::writeFile(path, kKinds[kindNamed("llama (")].config)); // d = 128
        const model::ModelConfig c = model::readModelConfig(path.toStdString());
        const int64_t S = 1000, B = 3;
        // The weights but the untied embedding table's other rows, and every layer's K and V of
        // S positions read and one written (sparqlab-cli traffic's count), in bfloat16.
        const double weights = static_cast<double>(c.parameterCount() - 512 * 256 + B * 256);
        const double cache = 2 /*layers*/ * 2 /*KV heads*/ * 256.0 /*d + dv*/ * (S + 1) * B;
        attention::AttentionConfig dense;
        QCOMPARE(analysis::decodeStepBytes(c, dense, S, B, 2), (weights + cache) * 2);
        // SparQ reads (S·r + 2·k·d + 4·d) / (2·S·d + 2·d) of it (SPARQ.md §5).
        attention::AttentionConfig sparq;
        sparq.method = attention::Method::Sparq;
        sparq.r = 16;
        sparq.k = 64;
        const double ratio = (S * 16.0 + 2 * 64 * 128 + 4 * 128) / (2.0 * S * 128 + 2 * 128);
        QVERIFY(std::abs(analysis::decodeStepBytes(c, sparq, S, B, 2) -
                         (weights + cache * ratio) * 2) < 1e-6 * weights);
    }

    /// bench-generate on the CPU: a row per length and method, SparQ's k from --compression, each
    /// step's bytes as the traffic count gives them, one measured bandwidth behind every limit. (No
    /// measured time is asserted: speed belongs to the benchmark's own output.)
    void benchGenerateRunsOnTheCpu() {
        const QTemporaryDir dir;
        const QString model =
            makeModel(dir.path(), kKinds[kindNamed("llama (")], QStringLiteral("f32"));
        const QString out = test::cliOut({"bench-generate", "--model", model, "--seq", "64,128",
                                          "--methods", "dense,sparq", "--compression", "0.25",
                                          "--r", "16", "--steps", "3", "--warmup", "1", "--json"});
        const QStringList lines = out.trimmed().split(QLatin1Char('\n'));
        QCOMPARE(lines.size(), 4);
        const model::ModelConfig config =
            model::readModelConfig((model + QStringLiteral("/config.json")).toStdString());
        for (int i = 0; i < 4; ++i) {
            const json row = json::parse(lines[i].toStdString());
            const int64_t S = i < 2 ? 64 : 128;
            QCOMPARE(row["seq"].get<int64_t>(), S);
            QCOMPARE(row["device"].get<std::string>(), std::string("cpu"));
            const bool reportsHostTime = row.contains("host_ms"); // a key, not a duration
            QVERIFY2(!reportsHostTime, "a GPU's only: on the CPU issuing a step is computing it");
            QCOMPARE(row["method"].get<std::string>(), std::string(i % 2 ? "sparq" : "dense"));
            if (i % 2)
                QCOMPARE(row["k"].get<int64_t>(), analysis::sparqKForCompression(0.25, S, 128, 16));
            attention::AttentionConfig attn;
            attn.method = attention::parseMethod(row["method"].get<std::string>());
            attn.r = 16;
            attn.k = row["k"].get<int64_t>();
            if (attn.method == attention::Method::Dense) {
                QCOMPARE(row["compression"].get<double>(), 1.0);
            } else {
                QVERIFY(row["compression"].get<double>() <= 0.25);
                attn.validateFor(128, 2, 4, 2);
            }
            QCOMPARE(row["bytes_per_step"].get<double>(),
                     analysis::decodeStepBytes(config, attn, S, 1, 4)); // float32 weights
            QVERIFY(row["limit_tokens_per_s"].get<double>() > 0);
            QVERIFY(
                std::abs(row["limit_tokens_per_s"].get<double>() *
                             row["bytes_per_step"].get<double>() -
                         json::parse(lines[0].toStdString())["limit_tokens_per_s"].get<double>() *
                             json::parse(lines[0].toStdString())["bytes_per_step"].get<double>()) <
                1e-6 * row["limit_tokens_per_s"].get<double>() *
                    row["bytes_per_step"].get<double>()); // one bandwidth for every row
        }
    }

    /// Each method is replayed from the same prefill, a hybrid's recurrent states included, and a
    /// length of one (nothing prefilled) runs too: two methods on a Qwen3-Next-shaped model.
    void benchGenerateReplaysAHybridsPrefill() {
        const QTemporaryDir dir;
        const QString model =
            makeModel(dir.path(), kKinds[kindNamed("qwen3_next")], QStringLiteral("f32"));
        const QString out = test::cliOut({"bench-generate", "--model", model, "--seq", "1,24",
                                          "--methods", "dense,sparq", "--r", "8", "--k", "8",
                                          "--steps", "2", "--warmup", "1", "--json"});
        const QStringList lines = out.trimmed().split(QLatin1Char('\n'));
        QCOMPARE(lines.size(), 4);
        for (int i = 0; i < 4; ++i) { // every length and method came back, in order
            const json row = json::parse(lines[i].toStdString());
            QCOMPARE(row["seq"].get<int64_t>(), int64_t{i < 2 ? 1 : 24});
            QCOMPARE(row["method"].get<std::string>(), std::string(i % 2 ? "sparq" : "dense"));
        }
    }

    void storedBfloat16RunsOnTheCpu_data() { kindRows("dtype", {"bf16"}); }
    /// Every attention kind computes in its stored bfloat16 on the CPU too (what the GPU capture
    /// is compared with): the DSA indexer's masked scores once overflowed bfloat16 there. Against
    /// the same weights computed in float32, within bfloat16's tolerance.
    void storedBfloat16RunsOnTheCpu() {
        QFETCH(int, kind);
        QFETCH(QString, dtype);
        const QTemporaryDir dir;
        const QString folder = makeModel(dir.path(), kKinds[kind], dtype);
        model::ModelOpenOptions stored, f32;
        stored.compute = model::ComputeDtype::Stored;
        f32.compute = model::ComputeDtype::Float32;
        const auto half = model::Model::open(folder.toStdString(), stored);
        const auto full = model::Model::open(folder.toStdString(), f32);
        QCOMPARE(half->computeDtype(), at::kBFloat16);
        QCOMPARE(full->computeDtype(), at::kFloat);
        const std::vector<int64_t> ids = randomIds(48, 512, 5);
        const model::CaptureExample a = full->capture(ids, true, -1, {}, 0, 32);
        const model::CaptureExample b = half->capture(ids, true, -1, {}, 0, 32);
        const QString diff = compareCaptures(a, b, dtype, *full);
        QVERIFY2(diff.isEmpty(), qPrintable(diff));
    }

    void fusedStepOpsRunTheModel_data() {
        QTest::addColumn<int>("kind");
        QTest::addColumn<QString>("dtype");
        QTest::addColumn<bool>("inFloat32");
        QTest::newRow("llama bf16") << kindNamed("llama (") << QStringLiteral("bf16") << false;
        QTest::newRow("llama f32") << kindNamed("llama (") << QStringLiteral("f32") << false;
        QTest::newRow("llama bf16 computed in f32 (weights copied: the linear layers' kernel)")
            << kindNamed("llama (") << QStringLiteral("bf16") << true;
        QTest::newRow("qwen3_moe (per-head q and k norms) bf16")
            << kindNamed("qwen3_moe") << QStringLiteral("bf16") << false;
    }
    /// The model's fused decode-step operations (attention/cuda/step.h: RMSNorm with the residual
    /// add, RoPE of q and k, the cache's append, the linear layers at one row: q, k and v in one
    /// launch, SiLU(gate)·up in one), which run on a
    /// GPU, taken here through the kernels' host emulation: a capture and greedy generation equal
    /// the libtorch formulas' within the dtype's tolerance, and each fused operation did run. (The
    /// linear layers' kernel takes 16-byte aligned weights, as a GPU's allocations are; on the
    /// host a checkpoint's weights in their stored dtype are memory-mapped at the file's offsets,
    /// so it is asserted where they are copied: computed in float32.)
    void fusedStepOpsRunTheModel() {
#ifndef SPARQLAB_STEP_EMULATION
        QSKIP("the kernels' host emulation is not in this build (no CUDA headers, or a sanitizer "
              "build)");
#else
        QFETCH(int, kind);
        QFETCH(QString, dtype);
        QFETCH(bool, inFloat32);
        const QTemporaryDir dir;
        const QString folder = makeModel(dir.path(), kKinds[kind], dtype);
        model::ModelOpenOptions f32;
        f32.compute = model::ComputeDtype::Float32;
        const auto m =
            inFloat32 ? model::Model::open(folder.toStdString(), f32) : openStored(folder, false);
        attention::AttentionConfig dense;
        dense.validateFor(m->config().headDim, m->config().nLayers, m->config().nHeads,
                          m->config().nKvHeads);
        // A prompt whose first step is no near tie on libtorch's path (a random bfloat16 model's
        // top two logits can be equal, and the tokens would then compare nothing): the first of
        // a few seeds.
        std::vector<int64_t> ids;
        model::Generation ga;
        for (uint64_t seed = 5; seed < 15; ++seed) {
            ids = randomIds(40, 512, seed);
            ga = m->generate(ids, 6, dense, false);
            if (topGap(ga, 0) > 1e-3)
                break;
        }
        const model::CaptureExample a = m->capture(ids, true, -1, {}, 0, 32);
        model::CaptureExample b;
        model::Generation gb;
        {
            const EmulatedStepOps emulated;
            b = m->capture(ids, true, -1, {}, 0, 32);
            gb = m->generate(ids, 6, dense, false);
        }
        QVERIFY2(
            g_stepCalls.norm > 0 && g_stepCalls.rope > 0 && g_stepCalls.append > 0 &&
                ((g_stepCalls.gemv > 0 && g_stepCalls.gemvQkv > 0 && g_stepCalls.gemvSiluMul > 0) ||
                 !inFloat32),
            qPrintable(QStringLiteral("fused calls: %1 norms, %2 RoPEs, %3 appends, %4 linears "
                                      "(%5 of q, k and v, %6 of SiLU(gate)·up)")
                           .arg(g_stepCalls.norm)
                           .arg(g_stepCalls.rope)
                           .arg(g_stepCalls.append)
                           .arg(g_stepCalls.gemv)
                           .arg(g_stepCalls.gemvQkv)
                           .arg(g_stepCalls.gemvSiluMul)));
        const QString diff = compareCaptures(a, b, dtype, *m);
        QVERIFY2(diff.isEmpty(), qPrintable(diff));
        QCOMPARE(gb.newIds.size(), ga.newIds.size());
        const QString tokens = compareTokens(ga, gb, 1e-3);
        QVERIFY2(tokens.isEmpty(), qPrintable(tokens));
#endif
    }

    /// Decode steps asked to run as CUDA graphs where no GPU runs them (the CPU) run eagerly,
    /// with the same logits, and record nothing.
    void cudaGraphsAskedOnTheCpuRunEagerly() {
        const QTemporaryDir dir;
        const QString folder =
            makeModel(dir.path(), kKinds[kindNamed("llama (")], QStringLiteral("f32"));
        const auto m = model::Model::open(folder.toStdString(), {});
        const auto [dense, sparq] = denseAndSparq(*m);
        const std::vector<int64_t> prompt = randomIds(40, 512, 5), next = randomIds(6, 512, 9);
        const Steps eager = teacherForced(*m, prompt, next, dense, sparq, false);
        const Steps asked = teacherForced(*m, prompt, next, dense, sparq, true);
        QVERIFY(!asked.graphs || !asked.graphs->recorded());
        QCOMPARE(asked.logits.size(), next.size() + next.size() / 2);
        for (size_t i = 0; i < asked.logits.size(); ++i)
            QVERIFY2(at::equal(asked.logits[i], eager.logits[i]), qPrintable(QString::number(i)));
    }

    void gpuGraphStepsEqualEager_data() {
        QTest::addColumn<int>("kind");
        QTest::addColumn<QString>("dtype");
        QTest::addColumn<bool>("graphable");
        QTest::newRow("llama f32") << kindNamed("llama (") << QStringLiteral("f32") << true;
        QTest::newRow("llama bf16") << kindNamed("llama (") << QStringLiteral("bf16") << true;
        QTest::newRow("cohere2 (layer norm, sliding and NoPE layers, parallel block) bf16")
            << kindNamed("cohere2") << QStringLiteral("bf16") << true;
        QTest::newRow("qwen3_moe (MoE: eager) bf16")
            << kindNamed("qwen3_moe") << QStringLiteral("bf16") << false;
        QTest::newRow("qwen3_next (linear attention: eager) f32")
            << kindNamed("qwen3_next") << QStringLiteral("f32") << false;
    }
    /// Decode steps replayed as CUDA graphs (model/decode_graphs.h), dense and then SparQ through
    /// the decode kernels in one cache, then SparQ again after the cache was rewound to the
    /// prompt, give the eager steps' logits (the same kernels on the same inputs: a RoPE table
    /// or an input left at the recorded step's position would move them far); the first step is
    /// recorded and every later one replayed. A model whose step
    /// cannot be a graph (MoE routing, a recurrent state) runs eagerly and records nothing.
    void gpuGraphStepsEqualEager() {
        if (!attention::cudaUsable())
            QSKIP("no usable CUDA device (a CPU libtorch or no GPU): no graphs are recorded");
        QFETCH(int, kind);
        QFETCH(QString, dtype);
        QFETCH(bool, graphable);
        const QTemporaryDir dir;
        const QString folder = makeModel(dir.path(), kKinds[kind], dtype);
        const auto m = openStored(folder, true);
        const auto [dense, sparq] = denseAndSparq(*m);
        const std::vector<int64_t> prompt = randomIds(40, 512, 5), next = randomIds(8, 512, 9);
        const Steps eager = teacherForced(*m, prompt, next, dense, sparq, false);
        const Steps graphed = teacherForced(*m, prompt, next, dense, sparq, true);
        QVERIFY(!eager.graphs || !eager.graphs->recorded());
        if (graphable && model::DecodeGraphs::available()) {
            QVERIFY(graphed.graphs);
            QVERIFY2(graphed.graphs->failure().empty(), graphed.graphs->failure().c_str());
            QVERIFY(graphed.graphs->recorded());
            QCOMPARE(graphed.graphs->replays(),
                     static_cast<int64_t>(next.size() + next.size() / 2) - 1);
        } else {
            QVERIFY(!graphed.graphs || !graphed.graphs->recorded());
        }
        // float32: the same operations; bfloat16: at most a rounding of the logits apart.
        const double tol = dtype == QLatin1String("f32") ? 1e-5 : 4e-3;
        QCOMPARE(graphed.logits.size(), eager.logits.size());
        for (size_t i = 0; i < eager.logits.size(); ++i) {
            const double scale = eager.logits[i].abs().max().item<double>();
            const QString diff =
                test::compareClose(graphed.logits[i], eager.logits[i], tol * scale, 0);
            QVERIFY2(diff.isEmpty(), qPrintable(QStringLiteral("step %1: ").arg(i) + diff));
        }
    }

    void gpuCaptureEqualsCpu_data() {
        kindRows("dtype", {"f32", "bf16"});
    }
    /// q, K and V of every layer and head (and a DSA model's indexer scores) captured on the GPU
    /// equal the CPU's within the dtype's tolerance, with the same weights in the same dtype.
    void gpuCaptureEqualsCpu() {
        if (!attention::cudaUsable())
            QSKIP("no usable CUDA device (a CPU libtorch or no GPU): the GPU capture is not run");
        QFETCH(int, kind);
        QFETCH(QString, dtype);
        const QTemporaryDir dir;
        const QString folder = makeModel(dir.path(), kKinds[kind], dtype);
        const auto [cpu, gpu] = openOnBoth(folder);
        QVERIFY(gpu->device().is_cuda() && gpu->net()->device().is_cuda());
        QCOMPARE(gpu->computeDtype(), cpu->computeDtype());
        // Longer than a prefill chunk of 32 so that the chunked capture runs too.
        const std::vector<int64_t> ids = randomIds(80, 512, 5);
        const model::CaptureExample a = cpu->capture(ids, true, -1, {}, 0, 32);
        const model::CaptureExample b = gpu->capture(ids, true, -1, {}, 0, 32);
        const QString diff = compareCaptures(a, b, dtype, *cpu);
        QVERIFY2(diff.isEmpty(), qPrintable(diff));
        // The capture file is written from the host: the model's sinks and RoPE come over too.
        const model::CaptureInfo info = gpu->captureInfo();
        QVERIFY(!info.sinks.defined() || info.sinks.device().is_cpu());
        capture::CaptureWriter w(dir.filePath(QStringLiteral("gpu.h5")).toStdString(), info);
        w.add(b);
        w.finish();
        QCOMPARE(w.count(), int64_t{1});
    }

    void gpuGenerationEqualsCpu_data() {
        kindRows("method", {"dense", "sparq"});
    }
    /// Greedy generation in float32 gives the same tokens on the GPU as on the CPU up to the first
    /// step whose top two logits are at most 1e-3 apart; SparQ runs through the GPU decode kernels
    /// where the shape allows (the llama model's head_dim 128).
    void gpuGenerationEqualsCpu() {
        if (!attention::cudaUsable())
            QSKIP("no usable CUDA device (a CPU libtorch or no GPU): GPU generation is not run");
        QFETCH(int, kind);
        QFETCH(QString, method);
        const QTemporaryDir dir;
        const QString folder = makeModel(dir.path(), kKinds[kind], QStringLiteral("f32"));
        const auto [cpu, gpu] = openOnBoth(folder);
        QVERIFY(gpu->device().is_cuda() && gpu->net()->device().is_cuda());
        attention::AttentionConfig attn;
        attn.method = attention::parseMethod(method.toStdString());
        attn.r = 8;
        attn.k = 24;
        attn.validateFor(cpu->config().headDim, cpu->config().nLayers, cpu->config().nHeads,
                         cpu->config().nKvHeads);
        const std::vector<int64_t> prompt = randomIds(64, 512, 7);
        const model::Generation a = cpu->generate(prompt, 16, attn, false);
        const model::Generation b = gpu->generate(prompt, 16, attn, false);
        QCOMPARE(b.newIds.size(), size_t{16});
        const QString diff = compareTokens(a, b, 1e-3);
        QVERIFY2(diff.isEmpty(), qPrintable(diff));
    }
};

QTEST_GUILESS_MAIN(TestModelDevice)
#include "test_model_device.moc"
