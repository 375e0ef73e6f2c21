// The lightning indexers (transformer_layer.h), as transformers 5.x computes them
// (docs/learned-sparse-and-hybrid.md). DeepSeek Sparse Attention (DeepSeek-V3.2, GLM-5): per
// query s and earlier key t, I[s, t] = Σ_h w[s, h]·ReLU(q[s, h]·k[t]·Di^-½) with
// w = weights_proj(x)·Hi^-½, the query from the attention's q latent, one LayerNorm'd key per
// position shared by every indexer head, RoPE on the first qk_rope_head_dim dimensions of both;
// the attention sees the top index_topk causal keys. MiniMax-M3: per indexer head, blocks of
// keys scored by their best key's q·k, the top index_topk_blocks kept for that head's group.

#include "transformer_layer.h"

#include "attention/select.h"
#include "model/rope.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

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

at::Tensor blockIndexerSelect(const ModelConfig& c, const CausalLMImpl::Layer& L,
                              const at::Tensor& x, const RopeAngles* angles, int64_t firstPos,
                              at::Tensor& keys, int64_t topBlocks, at::Tensor* blockScores) {
    const IndexerSpec& ix = c.indexer;
    const int64_t B = x.size(0), T = x.size(1), Hi = ix.heads, Di = ix.dim, bs = ix.blockSize;
    // (1 + w) RMSNorms of each head's query and of the one key a position has, then RoPE on the
    // attention's rotary dimensions.
    at::Tensor q = rmsNorm(at::linear(x, L.idxQW).view({B, T, Hi, Di}), L.idxQNormW, c.normEps,
                           /*plusOne=*/true, /*weightInFloat=*/false)
                       .transpose(1, 2); // [B, Hi, T, Di]
    at::Tensor k = rmsNorm(at::linear(x, L.idxKW).view({B, T, 1, Di}), L.idxKNormW, c.normEps,
                           /*plusOne=*/true, /*weightInFloat=*/false)
                       .transpose(1, 2); // [B, 1, T, Di]
    if (angles) {
        q = applyRope(q, *angles, c.rotaryDim, c.ropeLayout);
        k = applyRope(k, *angles, c.rotaryDim, c.ropeLayout);
    }
    k = k.squeeze(1); // [B, T, Di]
    keys = keys.defined() ? at::cat({keys, k}, 1) : k;
    const int64_t S = keys.size(1), blocks = attention::blocksForKeys(S, bs),
                  kept = std::min(topBlocks, blocks);
    const bool everyBlock = kept == blocks; // every causal key: the layer attends causally
    if (everyBlock && !blockScores)
        return {};
    const at::Tensor kt = keys.to(at::kFloat).transpose(1, 2).unsqueeze(1); // [B, 1, Di, S]
    const at::Tensor qf = q.to(at::kFloat);
    constexpr float kInf = std::numeric_limits<float>::infinity();
    const auto longs = x.options().dtype(at::kLong);
    const at::Tensor keyPos = at::arange(S, longs).unsqueeze(0); // [1, S]
    at::Tensor selected =
        everyBlock ? at::Tensor() : at::empty({B, Hi, T, S}, x.options().dtype(at::kBool));
    std::vector<at::Tensor> scoreRows;
    // A few query rows at a time: every head's scores of 4,096 tokens would be 256 MB at once.
    const int64_t per =
        std::max<int64_t>(1, kMaskedAttentionScores / std::max<int64_t>(1, B * Hi * S));
    for (int64_t t0 = 0; t0 < T; t0 += per) {
        const int64_t n = std::min(per, T - t0);
        const at::Tensor pos = at::arange(firstPos + t0, firstPos + t0 + n, longs); // [n]
        const at::Tensor future = keyPos.gt(pos.unsqueeze(1));                      // [n, S]
        at::Tensor z = at::matmul(qf.narrow(2, t0, n), kt).masked_fill(future, -kInf);
        if (blocks * bs > S)
            z = at::constant_pad_nd(z, {0, blocks * bs - S}, -kInf);
        at::Tensor score = z.view({B, Hi, n, blocks, bs}).amax(-1); // [B, Hi, n, blocks]
        if (blockScores)
            scoreRows.push_back(score);
        if (everyBlock)
            continue;
        // The query's own block and the local ones before it, then the best scores.
        const at::Tensor keep =
            attention::keepBlocks(score, at::floor_divide(pos, bs), ix.localBlocks, kept).mask;
        selected.narrow(2, t0, n).copy_(
            keep.repeat_interleave(bs, -1).narrow(-1, 0, S).logical_and(future.logical_not()));
    }
    if (blockScores)
        *blockScores = at::cat(scoreRows, 2);
    return selected;
}

} // namespace sparqlab::model
