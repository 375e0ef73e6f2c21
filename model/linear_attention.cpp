// The linear-attention layers of the hybrid models (transformer_layer.h): Gated DeltaNet
// (Qwen3-Next, Qwen3.5) and Kimi Delta Attention (Kimi Linear), as transformers 5.x computes
// them with its pure-torch kernels: projections, a depthwise causal convolution and SiLU, the
// gates, the gated delta rule over a recurrent state [H, dk, dv], a gated RMSNorm and the output
// projection (docs/learned-sparse-and-hybrid.md).

#include "transformer_layer.h"

#include <ATen/ATen.h>

#include <cmath>

namespace sparqlab::model {

namespace {

/// The depthwise causal convolution of x [B, T, C] with weight [C, 1, K], continuing from the
/// last K − 1 inputs in `prior` [B, C, K − 1] (zeros when undefined), then SiLU. `prior`
/// becomes the last K − 1 inputs after x.
at::Tensor causalConv(const at::Tensor& x, const at::Tensor& weight, at::Tensor& prior) {
    const int64_t B = x.size(0), C = x.size(2), K = weight.size(2);
    const at::Tensor xt = x.transpose(1, 2); // [B, C, T]
    const at::Tensor before = prior.defined() ? prior : at::zeros({B, C, K - 1}, x.options());
    const at::Tensor all = at::cat({before.to(x.scalar_type()), xt}, 2); // [B, C, K − 1 + T]
    prior = all.narrow(2, all.size(2) - (K - 1), K - 1).clone();
    return at::silu(at::conv1d(all, weight, at::Tensor(), at::IntArrayRef{1}, at::IntArrayRef{0},
                               at::IntArrayRef{1}, C))
        .transpose(1, 2); // [B, T, C]
}

/// HF's softplus of the decay: u for u > 20, else log(1 + exp(u)) (torch's softplus, threshold
/// 20).
at::Tensor decaySoftplus(const at::Tensor& u) {
    return at::softplus(u, 1.0, 20.0);
}

/// RMSNorm over the last axis in float32 with a plain weight, times the gate's activation
/// (GDN: SiLU of z; KDA: σ of the gate projection), in x's dtype.
at::Tensor gatedNorm(const at::Tensor& o, const at::Tensor& w, const at::Tensor& gate, double eps,
                     bool sigmoidGate) {
    const at::Tensor of = o.to(at::kFloat);
    const at::Tensor n = of * at::rsqrt(of.pow(2).mean(-1, /*keepdim=*/true) + eps);
    const at::Tensor g = gate.to(at::kFloat);
    const at::Tensor y =
        (w * n.to(o.scalar_type())).to(at::kFloat) * (sigmoidGate ? at::sigmoid(g) : at::silu(g));
    return y.to(o.scalar_type());
}

/// Records an intermediate under `name` (a copy, in float32) when tracing.
void record(std::map<std::string, at::Tensor>* trace, const std::string& name,
            const at::Tensor& t) {
    if (trace)
        (*trace)[name] = t.detach().to(at::kFloat).clone();
}

} // namespace

at::Tensor gatedDeltaRule(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                          const at::Tensor& g, const at::Tensor& beta, at::Tensor& state) {
    const int64_t T = q.size(2);
    const bool perChannel = g.dim() == 4;
    std::vector<at::Tensor> out;
    out.reserve(static_cast<size_t>(T));
    at::Tensor S = state.to(at::kFloat);
    const at::Tensor qf = q.to(at::kFloat), kf = k.to(at::kFloat), vf = v.to(at::kFloat);
    const at::Tensor decay = g.to(at::kFloat).exp(), bf = beta.to(at::kFloat);
    for (int64_t t = 0; t < T; ++t) {
        const at::Tensor kt = kf.select(2, t), qt = qf.select(2, t); // [B, H, dk]
        // S ← S·exp(g_t): every entry (GDN) or key channel i's row (KDA).
        S = perChannel ? S * decay.select(2, t).unsqueeze(-1)
                       : S * decay.select(2, t).unsqueeze(-1).unsqueeze(-1);
        const at::Tensor u = at::matmul(kt.unsqueeze(-2), S).squeeze(-2); // Sᵀk [B, H, dv]
        const at::Tensor delta = (vf.select(2, t) - u) * bf.select(2, t).unsqueeze(-1);
        S = S + kt.unsqueeze(-1) * delta.unsqueeze(-2);             // + k ⊗ β(v − Sᵀk)
        out.push_back(at::matmul(qt.unsqueeze(-2), S).squeeze(-2)); // Sᵀq
    }
    state = S;
    return at::stack(out, 2);
}

at::Tensor linearAttentionForward(const ModelConfig& c, const LinearWeights& w, LayerKind kind,
                                  const at::Tensor& x, LinearState* state,
                                  std::map<std::string, at::Tensor>* trace) {
    const LinearSpec& s = c.linear;
    const int64_t B = x.size(0), T = x.size(1);
    const int64_t Hk = s.keyHeads, Hv = s.valueHeads, dk = s.keyDim, dv = s.valueDim;
    const int64_t r = Hv / Hk;
    LinearState local;
    LinearState& st = state ? *state : local;
    at::Tensor q, k, v, z, g, beta;
    if (kind == LayerKind::GatedDeltaNet) {
        at::Tensor b, a, mixed;
        if (s.splitProjections) { // Qwen3.5: [q | k | v] already in the convolution's order
            mixed = at::linear(x, w.qkvW);
            z = at::linear(x, w.zW).view({B, T, Hv, dv});
            b = at::linear(x, w.bW);
            a = at::linear(x, w.aW);
        } else { // Qwen3-Next: per key head [q dk | k dk | v r·dv | z r·dv], [b r | a r]
            const at::Tensor qkvz = at::linear(x, w.qkvzW).view({B, T, Hk, 2 * dk + 2 * r * dv});
            const at::Tensor ba = at::linear(x, w.baW).view({B, T, Hk, 2 * r});
            const at::Tensor q0 = qkvz.narrow(-1, 0, dk), k0 = qkvz.narrow(-1, dk, dk);
            const at::Tensor v0 = qkvz.narrow(-1, 2 * dk, r * dv);
            z = qkvz.narrow(-1, 2 * dk + r * dv, r * dv).reshape({B, T, Hv, dv});
            b = ba.narrow(-1, 0, r).reshape({B, T, Hv});
            a = ba.narrow(-1, r, r).reshape({B, T, Hv});
            mixed = at::cat({q0.reshape({B, T, Hk * dk}), k0.reshape({B, T, Hk * dk}),
                             v0.reshape({B, T, Hv * dv})},
                            -1);
        }
        record(trace, "conv_in", mixed[0]);
        const at::Tensor conv = causalConv(mixed, w.convW, st.conv);
        q = conv.narrow(-1, 0, Hk * dk).view({B, T, Hk, dk});
        k = conv.narrow(-1, Hk * dk, Hk * dk).view({B, T, Hk, dk});
        v = conv.narrow(-1, 2 * Hk * dk, Hv * dv).view({B, T, Hv, dv});
        beta = at::sigmoid(b);
        g = -w.aLog.to(at::kFloat).exp() * decaySoftplus(a.to(at::kFloat) + w.dtBias);
        if (r > 1) { // value head h reads key head h / r
            q = q.repeat_interleave(r, 2);
            k = k.repeat_interleave(r, 2);
        }
        g = g.transpose(1, 2); // [B, Hv, T]
    } else {
        const at::Tensor qp = at::linear(x, w.qW), kp = at::linear(x, w.kW),
                         vp = at::linear(x, w.vW);
        record(trace, "conv_in", at::cat({qp, kp, vp}, -1)[0]);
        // One causal convolution each; the state keeps q's, k's and v's inputs side by side.
        at::Tensor pq, pk, pv;
        if (st.conv.defined()) {
            pq = st.conv.narrow(1, 0, Hk * dk);
            pk = st.conv.narrow(1, Hk * dk, Hk * dk);
            pv = st.conv.narrow(1, 2 * Hk * dk, Hv * dv);
        }
        q = causalConv(qp, w.qConvW, pq).view({B, T, Hk, dk});
        k = causalConv(kp, w.kConvW, pk).view({B, T, Hk, dk});
        v = causalConv(vp, w.vConvW, pv).view({B, T, Hv, dv});
        st.conv = at::cat({pq, pk, pv}, 1);
        const at::Tensor f = at::linear(at::linear(x, w.fAW), w.fBW) + w.dtBias; // [B, T, H·dk]
        g = -w.aLog.to(at::kFloat).exp().view({1, 1, Hv, 1}) *
            softplus(f.to(at::kFloat).view({B, T, Hv, dk}));
        beta = at::sigmoid(at::linear(x, w.bW)); // [B, T, H]
        z = at::linear(at::linear(x, w.gAW), w.gBW).view({B, T, Hv, dv});
        g = g.transpose(1, 2); // [B, H, T, dk]
    }
    q = q.transpose(1, 2); // [B, Hv, T, dk]
    k = k.transpose(1, 2);
    v = v.transpose(1, 2);
    beta = beta.transpose(1, 2); // [B, Hv, T]
    record(trace, "q_raw", q[0]);
    record(trace, "k_raw", k[0]);
    // The kernel's l2 norm (GDN: x·rsqrt(Σx² + 1e-6); KDA: x / sqrt(Σx² + 1e-6)), q × dk^-½.
    constexpr double kL2Eps = 1e-6;
    auto l2 = [&](const at::Tensor& t) {
        const at::Tensor tf = t.to(at::kFloat);
        const at::Tensor ss = tf.pow(2).sum(-1, /*keepdim=*/true) + kL2Eps;
        return kind == LayerKind::GatedDeltaNet ? tf * at::rsqrt(ss) : tf / at::sqrt(ss);
    };
    const at::Tensor qn = l2(q), kn = l2(k);
    record(trace, "q", qn[0]);
    record(trace, "k", kn[0]);
    record(trace, "v", v[0]);
    record(trace, "g", g[0]);
    record(trace, "beta", beta[0]);
    if (!st.recurrent.defined())
        st.recurrent = at::zeros({B, Hv, dk, dv}, x.options().dtype(at::kFloat));
    const at::Tensor o = gatedDeltaRule(qn * (1.0 / std::sqrt(static_cast<double>(dk))), kn, v, g,
                                        beta, st.recurrent); // [B, Hv, T, dv]
    record(trace, "core_out", o[0]);
    record(trace, "state", st.recurrent[0]);
    record(trace, "z", z[0].transpose(0, 1));
    const at::Tensor y = gatedNorm(o.transpose(1, 2).to(x.scalar_type()), w.normW, z, c.normEps,
                                   kind == LayerKind::KimiDelta)
                             .reshape({B, T, Hv * dv});
    record(trace, "normed", y[0]);
    return at::linear(y, w.outW);
}

} // namespace sparqlab::model
