// The mixture of experts of a sparse layer (transformer_layer.h), as transformers 5.x's eager
// experts compute it: the family's routing rule, then each expert that tokens reach, in
// ascending order, its weighted output added to those tokens' rows, then the shared expert.

#include "transformer_layer.h"

#include "model/safetensors.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <stdexcept>
#include <vector>

namespace sparqlab::model {

at::Tensor activation(const std::string& act, const at::Tensor& t) {
    if (act == "silu")
        return at::silu(t);
    if (act == "gelu")
        return at::gelu(t);
    if (act == "relu2") // transformers' ReLUSquaredActivation
        return at::relu(t).square();
    return at::gelu(t, "tanh"); // gelu_new, gelu_pytorch_tanh
}

at::Tensor activate(const ModelConfig& c, const at::Tensor& t) {
    return activation(c.hiddenAct, t);
}

at::Tensor mlpOf(const ModelConfig& c, const at::Tensor& x, const Expert& e) {
    const at::Tensor u = at::linear(x, e.up, e.upB);
    return at::linear(e.gate.defined() ? gatedUnit(c, at::linear(x, e.gate), u) : activate(c, u),
                      e.down, e.downB);
}

at::Tensor gatedUnit(const ModelConfig& c, const at::Tensor& gate, const at::Tensor& up) {
    if (c.swigluLimit <= 0)
        return activate(c, gate) * up;
    // SwiGLU-OAI (gpt-oss, MiniMax-M3): the gate clamped above, up clamped both ways, plus one.
    const double limit = c.swigluLimit;
    const at::Tensor g = gate.clamp_max(limit);
    return (up.clamp(-limit, limit) + 1) * (g * at::sigmoid(g * c.swigluAlpha));
}

MoeRouting moeRoute(const ModelConfig& c, const MoeWeights& w, const at::Tensor& x,
                    const at::Tensor& ids) {
    const MoeSpec& m = c.moe;
    MoeRouting r;
    switch (m.router) {
    case MoeRouter::SqrtSoftplusTopK: { // DeepSeek-V4: in the model's dtype, the bias in float32
        const at::Tensor s = at::sqrt(at::softplus(at::linear(x, w.routerW))); // [N, E]
        at::Tensor idx;
        if (w.tid2eid.defined()) { // a hash layer: the table's experts for each token id
            if (!ids.defined() || ids.numel() != x.size(0))
                throw std::invalid_argument("a hash layer's routing needs the tokens' ids");
            idx = w.tid2eid.index_select(0, ids.reshape(-1).to(w.tid2eid.device())).to(at::kLong);
        } else {
            const at::Tensor choice =
                w.scoreBias.defined() ? s.to(at::kFloat) + w.scoreBias.to(at::kFloat) : s;
            idx = std::get<1>(choice.topk(m.topK, -1, true, false));
        }
        const at::Tensor top = s.gather(1, idx);
        r.experts = idx;
        r.weights = timesFloat(top / (top.sum(-1, /*keepdim=*/true) + m.normEps), m.routedScale);
        break;
    }
    case MoeRouter::SoftmaxTopK: { // Qwen3-MoE, Mixtral: softmax in float32, top k, renormalised
        const at::Tensor probs = at::softmax(at::linear(x, w.routerW).to(at::kFloat), -1);
        auto [top, idx] = at::topk(probs, m.topK, -1);
        if (m.normTopK)
            top = top / top.sum(-1, /*keepdim=*/true);
        r.experts = idx;
        r.weights = top.to(x.scalar_type());
        break;
    }
    case MoeRouter::TopKSoftmax: { // gpt-oss: the top k logits (with the bias), softmax of them
        at::Tensor logits = at::linear(x, w.routerW, w.routerB);
        if (m.routerFloat32) // GraniteMoe: in float32, the weights back in the hidden dtype
            logits = logits.to(at::kFloat);
        const auto [top, idx] = at::topk(logits, m.topK, -1);
        r.experts = idx;
        r.weights = at::softmax(top, -1).to(x.scalar_type());
        break;
    }
    case MoeRouter::SigmoidGroups:   // DeepSeek-V3, V3.2, GLM-5, Kimi, MiniMax-M2: in float32
    case MoeRouter::SoftmaxGroups: { // Mistral 4: softmax in the model's dtype, no bias
        const at::Tensor s =
            m.router == MoeRouter::SoftmaxGroups
                ? at::softmax(at::linear(x, w.routerW), -1)
                : at::sigmoid(at::linear(x.to(at::kFloat), w.routerW.to(at::kFloat))); // [N, E]
        const int64_t N = s.size(0), E = m.experts, G = m.groups;
        at::Tensor choice = w.scoreBias.defined() ? s + w.scoreBias.to(at::kFloat) : s;
        if (G > 1) {
            // A group's score: the sum of its two best choices; the best topk_group groups
            // stay.
            const at::Tensor groupScore =
                std::get<0>(choice.view({N, G, E / G}).topk(2, -1)).sum(-1); // [N, G]
            const at::Tensor groups = std::get<1>(groupScore.topk(m.topKGroups, -1, true, false));
            const at::Tensor keep = at::zeros_like(groupScore)
                                        .scatter_(1, groups, 1.0)
                                        .unsqueeze(-1)
                                        .expand({N, G, E / G})
                                        .reshape({N, E})
                                        .to(at::kBool);
            // The other groups' experts score -inf (transformers 5.x, and DeepSeek's own code
            // since V3-0324; 4.x filled 0, to which a kept expert with a negative corrected
            // score lost).
            choice = choice.masked_fill(keep.logical_not(), -INFINITY);
        }
        const at::Tensor idx = std::get<1>(choice.topk(m.topK, -1, true, false));
        at::Tensor top = s.gather(1, idx);
        if (m.normTopK)
            top = top / (top.sum(-1, /*keepdim=*/true) + m.normEps);
        r.experts = idx;
        r.weights = top * m.routedScale;
        break;
    }
    case MoeRouter::SigmoidTopK: { // Llama 4: σ of the top logits
        const auto [top, idx] = at::topk(at::linear(x, w.routerW), m.topK, -1);
        r.experts = idx;
        r.weights = at::sigmoid(top.to(at::kFloat)).to(top.scalar_type());
        break;
    }
    }
    return r;
}

namespace {

/// Checks an expert's tensors the first time a token reaches it.
void checkExpert(MoeWeights& w, int64_t e, const std::vector<at::Tensor>& parts) {
    if (w.checked.empty() || w.checked[static_cast<size_t>(e)])
        return;
    for (const at::Tensor& t : parts)
        if (t.defined() && !at::isfinite(t).all().item<bool>())
            throw CheckpointError(w.file + ": the weights of expert " + std::to_string(e) + " ('" +
                                  w.names[static_cast<size_t>(e)] +
                                  "') hold NaN or infinite values");
    w.checked[static_cast<size_t>(e)] = 1;
}

/// A routed expert's unit under c.moe.expertClamp L (DeepSeek-V4): act(min(gate, L))·clamp(up, ±L).
at::Tensor clampedUnit(const ModelConfig& c, const at::Tensor& gate, const at::Tensor& up) {
    const double L = c.moe.expertClamp;
    return activate(c, gate.clamp_max(L)) * up.clamp(-L, L);
}

/// An MXFP4 expert's gate_up [h, 2I] and down [I, h]: decoded when a token reaches it and the
/// decoder does not hold it, then held or not as its keeper says (expert_keeper.h).
std::pair<at::Tensor, at::Tensor> decoded(MoeWeights& w, int64_t e) {
    ExpertDecoder& d = *w.decoder;
    const int64_t E = static_cast<int64_t>(w.decodedGateUp.size()), id = w.decoderSlot * E + e;
    const auto i = static_cast<size_t>(e);
    if (d.keeper.reach(id))
        return {w.decodedGateUp[i], w.decodedDown[i]};
    at::Tensor gateUp = d.checkpoint->loadExpert(w.gateUpName, e, d.dtype).to(d.device);
    at::Tensor down = d.checkpoint->loadExpert(w.downName, e, d.dtype).to(d.device);
    const ExpertKeeper::Admission a =
        d.keeper.admit(id, (gateUp.numel() + down.numel()) * gateUp.element_size());
    for (int64_t dropped : a.drop) {
        MoeWeights& layer = *d.layers[static_cast<size_t>(dropped / E)];
        layer.decodedGateUp[static_cast<size_t>(dropped % E)] = at::Tensor();
        layer.decodedDown[static_cast<size_t>(dropped % E)] = at::Tensor();
    }
    if (a.keep) {
        w.decodedGateUp[i] = gateUp;
        w.decodedDown[i] = down;
    }
    return {gateUp, down};
}

/// Expert e on its tokens' rows xe [n, h].
at::Tensor expert(const ModelConfig& c, MoeWeights& w, int64_t e, const at::Tensor& xe) {
    const MoeSpec& m = c.moe;
    switch (m.layout) {
    case ExpertLayout::PerExpert:
    case ExpertLayout::Mixtral: {
        const Expert& x = w.experts[static_cast<size_t>(e)];
        checkExpert(w, e, {x.gate, x.up, x.down});
        if (m.expertClamp > 0 && x.gate.defined())
            return at::linear(clampedUnit(c, at::linear(xe, x.gate), at::linear(xe, x.up)), x.down);
        return mlpOf(c, xe, x);
    }
    case ExpertLayout::FusedInterleaved: { // gpt-oss: gate, up interleaved; SwiGLU-OAI
        const auto [gu, dn] = w.decoder ? decoded(w, e) : std::pair{w.gateUp[e], w.down[e]};
        const at::Tensor gub = w.gateUpB[e], dnb = w.downB[e];
        checkExpert(w, e, {gu, gub, dn, dnb});
        const at::Tensor h = at::matmul(xe, gu) + gub; // x @ W, not Wᵀ
        const at::Tensor gate = h.slice(-1, 0, h.size(-1), 2), up = h.slice(-1, 1, h.size(-1), 2);
        return at::matmul(gatedUnit(c, gate, up), dn) + dnb;
    }
    case ExpertLayout::FusedHalves: { // Llama 4: [gate | up]
        const at::Tensor gu = w.gateUp[e], dn = w.down[e];
        checkExpert(w, e, {gu, dn});
        const at::Tensor h = at::matmul(xe, gu);
        const int64_t I = h.size(-1) / 2;
        return at::matmul(gatedUnit(c, h.narrow(-1, 0, I), h.narrow(-1, I, I)), dn);
    }
    case ExpertLayout::FusedRows: // transformers 5: Linear weights, rows [gate | up]
    case ExpertLayout::ParallelExperts: {
        const at::Tensor gu = w.gateUp[e], dn = w.down[e];
        checkExpert(w, e, {gu, dn});
        if (!c.gatedMlp) { // Nemotron-H: up [I, h] alone
            Expert ungated;
            ungated.up = gu;
            ungated.down = dn;
            return mlpOf(c, xe, ungated);
        }
        const at::Tensor h = at::linear(xe, gu);
        const int64_t I = h.size(-1) / 2;
        return at::linear(m.expertClamp > 0 ? clampedUnit(c, h.narrow(-1, 0, I), h.narrow(-1, I, I))
                                            : gatedUnit(c, h.narrow(-1, 0, I), h.narrow(-1, I, I)),
                          dn);
    }
    }
    return {};
}

} // namespace

at::Tensor moeForward(const ModelConfig& c, MoeWeights& w, const at::Tensor& x,
                      const at::Tensor& ids) {
    const std::vector<int64_t> shape = x.sizes().vec();
    const at::Tensor xs = x.reshape({-1, shape.back()}); // [N, h]
    const MoeRouting r = moeRoute(c, w, xs, ids.defined() ? ids.reshape(-1) : ids);
    // Nemotron-H's experts take and give a latent (fc1_latent_proj, fc2_latent_proj).
    const at::Tensor xin = w.latentInW.defined() ? at::linear(xs, w.latentInW, w.latentInB) : xs;
    at::Tensor out = c.moe.sumInRouterDtype
                         ? at::zeros_like(xin, xin.options().dtype(r.weights.scalar_type()))
                         : at::zeros_like(xin);
    const bool scaleInput = c.moe.router == MoeRouter::SigmoidTopK; // Llama 4
    // The experts reached, in ascending order, each over the (token, slot) pairs routed to it in
    // token order. The routing is read on the host once (on a GPU: one copy, not a wait per
    // expert), and the pairs go back to the model's device in one tensor.
    const at::Tensor routed = r.experts.to(at::kCPU, at::kLong).contiguous(); // [N, k]
    const int64_t K = routed.size(1), pairs = routed.numel();
    const int64_t* rp = routed.data_ptr<int64_t>();
    std::map<int64_t, std::vector<int64_t>> byExpert; // expert → flat pairs token·K + slot
    for (int64_t i = 0; i < pairs; ++i)
        byExpert[rp[i]].push_back(i);
    std::vector<int64_t> order, tokenOf;
    order.reserve(static_cast<size_t>(pairs));
    tokenOf.reserve(static_cast<size_t>(pairs));
    for (const auto& [e, list] : byExpert)
        for (const int64_t i : list) {
            order.push_back(i);
            tokenOf.push_back(i / K);
        }
    const at::Tensor lists =
        at::stack({at::tensor(order, at::kLong), at::tensor(tokenOf, at::kLong)}).to(xs.device());
    const at::Tensor weightsFlat = r.weights.reshape(-1);
    int64_t at0 = 0;
    for (const auto& [e, list] : byExpert) {
        const int64_t n = static_cast<int64_t>(list.size());
        const at::Tensor tokens = lists[1].narrow(0, at0, n);
        const at::Tensor wt = weightsFlat.index_select(0, lists[0].narrow(0, at0, n)).unsqueeze(-1);
        at0 += n;
        const at::Tensor xe = xin.index_select(0, tokens);
        // The weight in its router's dtype: a float32 router's product is float32, rounded
        // to the model's dtype once, as transformers' eager experts do.
        const at::Tensor ye = scaleInput ? expert(c, w, e, xe * wt) : expert(c, w, e, xe) * wt;
        out.index_add_(0, tokens, ye.to(out.scalar_type()));
    }
    out = out.to(xin.scalar_type());
    if (w.latentOutW.defined())
        out = at::linear(out, w.latentOutW, w.latentOutB);
    if (w.shared.up.defined()) {
        at::Tensor shared = mlpOf(c, xs, w.shared);
        if (w.sharedGateW.defined()) // Qwen3-Next: σ(shared_expert_gate(x)) · shared(x)
            shared = at::sigmoid(at::linear(xs, w.sharedGateW)) * shared;
        out = shared + out;
    }
    return out.view(shape);
}

} // namespace sparqlab::model
