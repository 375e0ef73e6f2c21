// DeepSeek Sparse Attention's lightning indexer (transformer_layer.h), as transformers 5.x
// computes it for DeepSeek-V3.2 and GLM-5: per query s and earlier key t,
// I[s, t] = Σ_h w[s, h]·ReLU(q[s, h]·k[t]·Di^-½) with w = weights_proj(x)·Hi^-½, the query from
// the attention's q latent, one LayerNorm'd key per position shared by every indexer head, RoPE on
// the first qk_rope_head_dim dimensions of both; the attention sees the top index_topk causal keys
// (docs/learned-sparse-and-hybrid.md).

#include "transformer_layer.h"

#include "model/rope.h"

#include <ATen/ATen.h>

#include <cmath>

namespace sparqlab::model {

at::Tensor indexerSelect(const ModelConfig& c, const CausalLMImpl::Layer& L, const at::Tensor& x,
                         const at::Tensor& qResid, const at::Tensor& invFreq, int64_t firstPos,
                         at::Tensor& keys, int64_t topK, at::Tensor* scores) {
    const IndexerSpec& ix = c.indexer;
    const int64_t B = x.size(0), T = x.size(1), Hi = ix.heads, Di = ix.dim;
    const int64_t rot = c.mla.ropeDim;
    at::Tensor q = at::linear(qResid, L.idxQW).view({B, T, Hi, Di}).transpose(1, 2);
    at::Tensor k = at::layer_norm(at::linear(x, L.idxKW), {Di}, L.idxKNormW, L.idxKNormB, 1e-6)
                       .view({B, 1, T, Di});
    if (invFreq.defined()) {
        q = applyRope(q, invFreq, firstPos, rot, ix.ropeLayout, c.rope.attentionFactor);
        k = applyRope(k, invFreq, firstPos, rot, ix.ropeLayout, c.rope.attentionFactor);
    }
    k = k.squeeze(1); // [B, T, Di]
    keys = keys.defined() ? at::cat({keys, k}, 1) : k;
    const int64_t S = keys.size(1);
    // Per head q·k·Di^-½ [B, h, T, S], ReLU, weighted by w [B, T, Hi] and summed over heads, a
    // few heads at a time: 64 heads' scores of 4,096 tokens would be 4 GB at once.
    const at::Tensor w =
        (at::linear(x, L.idxWeightsW) * (1.0 / std::sqrt(double(Hi)))).transpose(1, 2);
    const at::Tensor kt = keys.unsqueeze(1).transpose(-1, -2); // [B, 1, Di, S]
    const int64_t per = std::max<int64_t>(1, (int64_t{1} << 26) / std::max<int64_t>(1, B * T * S));
    at::Tensor index;
    for (int64_t h0 = 0; h0 < Hi; h0 += per) {
        const int64_t n = std::min(per, Hi - h0);
        const at::Tensor part =
            (at::relu(at::matmul(q.narrow(1, h0, n), kt) * (1.0 / std::sqrt(double(Di)))) *
             w.narrow(1, h0, n).unsqueeze(-1))
                .sum(1);
        index = index.defined() ? index + part : part;
    }
    if (scores)
        *scores = index;
    // The causal keys of query s (absolute position firstPos + s) are 0..firstPos + s; HF adds
    // finfo.min to the rest and takes the top min(k, S); fillers past the causal keys stay hidden.
    const auto longs = index.options().dtype(at::kLong);
    const at::Tensor pos = at::arange(firstPos, firstPos + T, longs).unsqueeze(1);
    const at::Tensor causal = at::arange(S, longs).unsqueeze(0).le(pos).unsqueeze(0); // [1,T,S]
    // finfo(dtype).min of the scores' own dtype: float's would overflow a bfloat16 or float16.
    const double lowest =
        index.scalar_type() == at::kBFloat16 ? double(std::numeric_limits<c10::BFloat16>::lowest())
        : index.scalar_type() == at::kHalf   ? double(std::numeric_limits<c10::Half>::lowest())
        : index.scalar_type() == at::kDouble ? std::numeric_limits<double>::lowest()
                                             : double(std::numeric_limits<float>::lowest());
    const at::Tensor masked = index.masked_fill(causal.logical_not(), lowest);
    const int64_t kk = std::min(topK, S);
    const at::Tensor top = std::get<1>(masked.topk(kk, -1));
    return at::zeros({B, T, S}, index.options().dtype(at::kBool))
        .scatter_(2, top, true)
        .logical_and(causal);
}

} // namespace sparqlab::model
