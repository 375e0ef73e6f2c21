// The linear-attention layers of the hybrid models (transformer_layer.h): Gated DeltaNet
// (Qwen3-Next, Qwen3.5, OLMo Hybrid), Kimi Delta Attention (Kimi Linear), Mamba-2 (Granite 4.0-H,
// Nemotron-H, Falcon-H1), LFM2's short convolution, Jamba's Mamba-1 and MiniMax-01's lightning
// attention, as transformers 5.x computes them with its pure-torch kernels: projections, a
// depthwise causal convolution and SiLU, the gates, the gated delta rule (or a scan) over a
// recurrent state [H, dk, dv], a gated RMSNorm and the output projection; the short convolution
// keeps only the convolution's last inputs (docs/learned-sparse-and-hybrid.md §3, §9 to §14).

#include "transformer_layer.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <vector>

namespace sparqlab::model {

namespace {

/// The depthwise causal convolution of x [B, T, C] with weight [C, 1, K] (and `bias`),
/// continuing from the last K − 1 inputs in `prior` [B, C, K − 1] (zeros when undefined), then
/// SiLU unless `silu` is false. `prior`
/// becomes the last K − 1 inputs after x.
at::Tensor causalConv(const at::Tensor& x, const at::Tensor& weight, at::Tensor& prior,
                      const at::Tensor& bias = {}, bool silu = true) {
    const int64_t B = x.size(0), C = x.size(2), K = weight.size(2);
    const at::Tensor xt = x.transpose(1, 2); // [B, C, T]
    const at::Tensor before = prior.defined() ? prior : at::zeros({B, C, K - 1}, x.options());
    const at::Tensor all = at::cat({before.to(x.scalar_type()), xt}, 2); // [B, C, K − 1 + T]
    prior = all.narrow(2, all.size(2) - (K - 1), K - 1).clone();
    const at::Tensor y = at::conv1d(all, weight, bias, at::IntArrayRef{1}, at::IntArrayRef{0},
                                    at::IntArrayRef{1}, C);
    return (silu ? at::silu(y) : y).transpose(1, 2); // [B, T, C]
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

/// Σ_{j < k ≤ i} a_k for i ≥ j, −inf above the diagonal, of a [..., n] (transformers'
/// segment_sum: masked cumulative sums rather than differences of them).
at::Tensor segmentSum(const at::Tensor& a) {
    const int64_t n = a.size(-1);
    const at::Tensor rows = a.unsqueeze(-1).expand({-1, -1, n, n}); // (i, j) = a_i
    const at::Tensor below = at::ones({n, n}, a.options().dtype(at::kBool)).tril(-1);
    const at::Tensor sums = rows.masked_fill(below.logical_not(), 0).cumsum(-2);
    return sums.masked_fill(at::ones({n, n}, below.options()).tril().logical_not(), -INFINITY);
}

/// Mamba-2's selective scan over T tokens, chunk by chunk, in float32: x [B, T, H, P] (values),
/// dt [B, T, H] (time steps), A [H] (negative), Bm and Cm [B, T, H, N] (keys and queries per
/// head); `state` [B, H, N, P] is read and left after the last token. The recurrence
/// S_t = exp(dt_t·A)·S_{t−1} + B_t ⊗ dt_t·x_t, y_t = C_tᵀ·S_t, computed per chunk of `chunk`
/// tokens as transformers' torch_forward does (within a chunk as masked attention, between
/// chunks through the state). Returns y [B, T, H, P] without the D skip.
at::Tensor ssdScan(const at::Tensor& x, const at::Tensor& dt, const at::Tensor& A,
                   const at::Tensor& Bm, const at::Tensor& Cm, int64_t chunk, at::Tensor& state) {
    const int64_t T = x.size(1), H = x.size(2);
    std::vector<at::Tensor> out;
    at::Tensor S = state;
    for (int64_t t0 = 0; t0 < T; t0 += chunk) {
        const int64_t n = std::min(chunk, T - t0);
        const at::Tensor d = dt.narrow(1, t0, n).transpose(1, 2);                    // [B, H, n]
        const at::Tensor xdt = x.narrow(1, t0, n).transpose(1, 2) * d.unsqueeze(-1); // [B,H,n,P]
        const at::Tensor b = Bm.narrow(1, t0, n).transpose(1, 2);                    // [B, H, n, N]
        const at::Tensor cq = Cm.narrow(1, t0, n).transpose(1, 2);                   // [B, H, n, N]
        const at::Tensor a = d * A.view({1, H, 1});                                  // [B, H, n]
        const at::Tensor cum = a.cumsum(-1);
        // Within the chunk: (C·Bᵀ ∘ exp(segsum)) · dt·x; from before it: exp(cum)·C·S.
        const at::Tensor weights = at::matmul(cq, b.transpose(-1, -2)) * segmentSum(a).exp();
        out.push_back((at::matmul(weights, xdt) + cum.exp().unsqueeze(-1) * at::matmul(cq, S))
                          .transpose(1, 2));
        const at::Tensor last = cum.narrow(-1, n - 1, 1); // [B, H, 1]
        S = last.exp().unsqueeze(-1) * S +
            at::matmul((b * (last - cum).exp().unsqueeze(-1)).transpose(-1, -2), xdt);
    }
    state = S;
    return at::cat(out, 1);
}

/// A Mamba-2 layer (GraniteMoeHybridMambaLayer.torch_forward, NemotronHMamba2Mixer's): in_proj
/// gives [z | x B C | dt]; the causal convolution (with its bias) and the activation over x B C;
/// dt = softplus(dt + dt_bias) clamped to [dtMin, dtMax] (time_step_limit); the scan; + D·x; the
/// gate SiLU(z) before the RMSNorm over every head (Granite) or each group of heads (Nemotron-H);
/// out_proj.
at::Tensor mamba2Forward(const ModelConfig& c, const LinearWeights& w, const at::Tensor& x,
                         LinearState& st, std::map<std::string, at::Tensor>* trace) {
    const LinearSpec& s = c.linear;
    const int64_t B = x.size(0), T = x.size(1), H = s.valueHeads, P = s.valueDim;
    const int64_t G = s.keyHeads, N = s.keyDim, I = H * P;
    at::Tensor proj = at::linear(x, w.inW, w.inB);
    // Falcon-H1's µP vector, a buffer of the model's dtype: each part × its multiplier rounded
    if (s.projScale != std::array<double, 5>{1, 1, 1, 1, 1}) {
        const int64_t from[] = {0, I, 2 * I, 2 * I + G * N, 2 * I + 2 * G * N, proj.size(-1)};
        proj = proj.clone();
        for (int p = 0; p < 5; ++p)
            proj.narrow(-1, from[p], from[p + 1] - from[p])
                .mul_(at::scalar_tensor(s.projScale[static_cast<size_t>(p)], proj.options()));
    }
    const at::Tensor z = proj.narrow(-1, 0, I);
    const at::Tensor xbc = proj.narrow(-1, I, I + 2 * G * N);
    const at::Tensor dtRaw = proj.narrow(-1, 2 * I + 2 * G * N, H);
    record(trace, "conv_in", xbc[0]);
    // the activation after the convolution (SiLU in every Granite 4.0 and Nemotron-H)
    const at::Tensor conv =
        activation(s.convAct, causalConv(xbc, w.convW, st.conv, w.convB, false));
    const at::Tensor xs = conv.narrow(-1, 0, I).to(at::kFloat).view({B, T, H, P});
    const int64_t r = H / G;
    const at::Tensor Bm =
        conv.narrow(-1, I, G * N).to(at::kFloat).view({B, T, G, N}).repeat_interleave(r, 2);
    const at::Tensor Cm =
        conv.narrow(-1, I + G * N, G * N).to(at::kFloat).view({B, T, G, N}).repeat_interleave(r, 2);
    // dt in the model's dtype as HF rounds it, then float32 with everything else
    const at::Tensor dt =
        decaySoftplus(dtRaw + w.dtBias).clamp(s.dtMin, s.dtMax).to(at::kFloat); // [B, T, H]
    const at::Tensor A = -w.aLog.to(at::kFloat).exp();
    if (!st.recurrent.defined())
        st.recurrent = at::zeros({B, H, N, P}, x.options().dtype(at::kFloat));
    at::Tensor y = ssdScan(xs, dt, A, Bm, Cm, s.chunk, st.recurrent);
    y = (y + w.d.to(at::kFloat).view({1, 1, H, 1}) * xs).reshape({B, T, I});
    record(trace, "core_out", y[0]);
    record(trace, "state", st.recurrent[0]);
    // The gate and the RMSNorm over all I channels (GraniteMoeHybridRMSNormGated) or over each of
    // normGroups groups alone (Nemotron-H's Zamba2RMSNormGated, FalconH1RMSNormGated), in
    // float32: y·SiLU(z) before the norm, or after it, or alone (SiLU in z's dtype there).
    at::Tensor out;
    if (s.gate == Mamba2Gate::NoNorm) {
        out = y * at::silu(z).to(at::kFloat);
    } else {
        const at::Tensor g = at::silu(z.to(at::kFloat));
        const at::Tensor in =
            (s.gate == Mamba2Gate::BeforeNorm ? y * g : y).view({B, T, s.normGroups, -1});
        const double eps = s.gateNormEps > 0 ? s.gateNormEps : c.normEps;
        out =
            w.normW * (in * at::rsqrt(in.pow(2).mean(-1, /*keepdim=*/true) + eps)).view({B, T, I});
        if (s.gate == Mamba2Gate::AfterNorm)
            out = out * g;
    }
    record(trace, "normed", out[0]);
    return at::linear(out.to(x.scalar_type()), w.outW, w.outB);
}

/// A Mamba (Mamba-1) layer (transformers 5's JambaMambaMixer, as the mamba-ssm scan it calls
/// computes it): in_proj gives [x | z]; the causal convolution (its bias) and the activation over
/// x; x_proj gives [dt | B | C], each normalised by Jamba's RMSNorms; dt = softplus(dt_proj(dt));
/// then per channel i and state dimension n the selective scan S_t = exp(dt_t·A)·S_{t−1} +
/// dt_t·B_t·x_t, y_t = S_t·C_t + D·x_t, in float32 from S₀ = 0 (`st.recurrent` [B, I, N]);
/// y·SiLU(z); out_proj.
at::Tensor mamba1Forward(const ModelConfig& c, const LinearWeights& w, const at::Tensor& x,
                         LinearState& st, std::map<std::string, at::Tensor>* trace) {
    const LinearSpec& s = c.linear;
    const int64_t B = x.size(0), T = x.size(1), I = s.valueDim, N = s.keyDim, R = s.dtRank;
    const at::Tensor proj = at::linear(x, w.inW, w.inB);
    const at::Tensor z = proj.narrow(-1, I, I);
    record(trace, "conv_in", proj.narrow(-1, 0, I)[0]);
    const at::Tensor u =
        activation(s.convAct, causalConv(proj.narrow(-1, 0, I), w.convW, st.conv, w.convB, false));
    const at::Tensor params = at::linear(u, w.xProjW); // [B, T, R + 2N]
    at::Tensor dt = params.narrow(-1, 0, R), Bm = params.narrow(-1, R, N);
    at::Tensor Cm = params.narrow(-1, R + N, N);
    if (s.innerNorms) { // (JambaRMSNorm: Llama's)
        dt = rmsNorm(dt, w.dtNormW, c.normEps, false, false);
        Bm = rmsNorm(Bm, w.bNormW, c.normEps, false, false);
        Cm = rmsNorm(Cm, w.cNormW, c.normEps, false, false);
    }
    // dt_proj's product in the model's dtype, its bias added in float32 inside the softplus (the
    // scan's delta_bias in transformers 5), the scan in float32
    const at::Tensor delta =
        decaySoftplus(at::linear(dt, w.dtProjW).to(at::kFloat) + w.dtProjB.to(at::kFloat));
    const at::Tensor A = -w.aLog.to(at::kFloat).exp(); // [I, N]
    const at::Tensor uf = u.to(at::kFloat), bf = Bm.to(at::kFloat), cf = Cm.to(at::kFloat);
    if (!st.recurrent.defined())
        st.recurrent = at::zeros({B, I, N}, x.options().dtype(at::kFloat));
    at::Tensor S = st.recurrent;
    std::vector<at::Tensor> ys;
    ys.reserve(static_cast<size_t>(T));
    // The decays and inputs a chunk of tokens at a time ([B, n, I, N] each), then the recurrence
    // token by token within it.
    constexpr int64_t kChunk = 64;
    for (int64_t t0 = 0; t0 < T; t0 += kChunk) {
        const int64_t n = std::min(kChunk, T - t0);
        const at::Tensor d = delta.narrow(1, t0, n).unsqueeze(-1); // [B, n, I, 1]
        const at::Tensor decay = (d * A).exp();
        const at::Tensor input = d * bf.narrow(1, t0, n).unsqueeze(2) *
                                 uf.narrow(1, t0, n).unsqueeze(-1); // dt·B·x [B, n, I, N]
        const at::Tensor cq = cf.narrow(1, t0, n).unsqueeze(-1);    // [B, n, N, 1]
        for (int64_t t = 0; t < n; ++t) {
            S = decay.select(1, t) * S + input.select(1, t);
            ys.push_back(at::matmul(S, cq.select(1, t)).squeeze(-1)); // [B, I]
        }
    }
    st.recurrent = S;
    at::Tensor y = at::stack(ys, 1) + uf * w.d.to(at::kFloat); // [B, T, I]
    record(trace, "core_out", y[0]);
    record(trace, "state", S[0]);
    y = y * at::silu(z.to(at::kFloat)); // (the scan's gate: SiLU whatever hidden_act says)
    return at::linear(y.to(x.scalar_type()), w.outW, w.outB);
}

/// LFM2's short convolution (Lfm2ShortConv.slow_forward): in_proj gives [B | C | x]; B·x through
/// the depthwise causal convolution (its bias, no activation), continuing from the last K − 1
/// values of B·x in `st.conv`; × C; out_proj. In the model's dtype throughout, as transformers.
at::Tensor shortConvForward(const LinearWeights& w, const at::Tensor& x, LinearState& st,
                            std::map<std::string, at::Tensor>* trace) {
    const int64_t h = x.size(-1);
    const at::Tensor proj = at::linear(x, w.inW, w.inB);
    const at::Tensor bx = proj.narrow(-1, 0, h) * proj.narrow(-1, 2 * h, h);
    record(trace, "conv_in", bx[0]);
    const at::Tensor y = proj.narrow(-1, h, h) * causalConv(bx, w.convW, st.conv, w.convB, false);
    return at::linear(y, w.outW, w.outB);
}

/// MiniMax-01's lightning attention (transformers' MiniMaxLightningAttention): per head h of H,
/// q, k, v = act(qkv_proj(x)) as [q | k | v] (hidden_act: SiLU in every release), and one fixed
/// decay exp(−s_h) per token with s_h = (2^(−8/H))^(h+1)·(1 − l/(L − 1 + 10⁻⁵) + 10⁻⁵) for layer l
/// of L (ALiBi's slopes, smaller with depth). o_t = Σ_{j≤t} exp(−s_h·(t − j))·(q_t·k_j)·v_j, no
/// scale, carried as S ← exp(−s_h)·S + k_t ⊗ v_t, o_t = q_t·S; computed in float32 a block of
/// c.linear.chunk tokens at a time, as the class's prefill does: within the block as decay-masked
/// attention, from the blocks before through S. Then an RMSNorm over every head's output (eps 10⁻⁶,
/// the class's default: it does not read rms_norm_eps), × σ(output_gate(x)), out_proj.
at::Tensor lightningForward(const ModelConfig& c, const LinearWeights& w, const at::Tensor& x,
                            LinearState& st, std::map<std::string, at::Tensor>* trace) {
    const int64_t B = x.size(0), T = x.size(1), H = c.linear.valueHeads, d = c.linear.valueDim;
    const at::Tensor qkv =
        activate(c, at::linear(x, w.qkvW)).view({B, T, H, 3 * d}).transpose(1, 2).to(at::kFloat);
    const at::Tensor q = qkv.narrow(-1, 0, d), k = qkv.narrow(-1, d, d),
                     v = qkv.narrow(-1, 2 * d, d); // [B, H, T, d]
    record(trace, "q", q[0]);
    record(trace, "k", k[0]);
    record(trace, "v", v[0]);
    const auto fl = x.options().dtype(at::kFloat);
    const double depth =
        1.0 - static_cast<double>(w.layer) / (static_cast<double>(c.nLayers) - 1.0 + 1e-5) + 1e-5;
    const at::Tensor slope = // [1, H, 1, 1], float32 as the class's buffer
        (at::pow(std::pow(2.0, -8.0 / static_cast<double>(H)),
                 at::arange(1, H + 1, x.options().dtype(at::kLong))) *
         depth)
            .view({1, H, 1, 1});
    record(trace, "slope", slope.view({H}));
    at::Tensor S = st.recurrent.defined() ? st.recurrent : at::zeros({B, H, d, d}, fl);
    const int64_t block = std::max<int64_t>(1, c.linear.chunk);
    std::vector<at::Tensor> outs;
    for (int64_t t0 = 0; t0 < T; t0 += block) {
        const int64_t n = std::min(block, T - t0);
        const at::Tensor qb = q.narrow(2, t0, n), kb = k.narrow(2, t0, n), vb = v.narrow(2, t0, n);
        const at::Tensor i = at::arange(1, n + 1, fl);          // 1..n
        const at::Tensor gap = i.view({n, 1}) - i.view({1, n}); // query i − key j
        const at::Tensor within = at::exp(
            (-slope * gap).masked_fill(gap.view({1, 1, n, n}) < 0, -INFINITY)); // [1, H, n, n]
        outs.push_back(at::matmul(at::matmul(qb, kb.transpose(-1, -2)) * within, vb) +
                       at::matmul(qb * at::exp(-slope * i.view({1, 1, n, 1})), S));
        S = S * at::exp(-slope * static_cast<double>(n)) +
            at::matmul((kb * at::exp(-slope * (static_cast<double>(n) - i).view({1, 1, n, 1})))
                           .transpose(-1, -2),
                       vb);
    }
    st.recurrent = S;
    const at::Tensor o = outs.size() == 1 ? outs[0] : at::cat(outs, 2); // [B, H, T, d]
    record(trace, "core_out", o[0]);
    record(trace, "state", S[0]);
    const at::Tensor merged = o.transpose(1, 2).reshape({B, T, H * d}).to(x.scalar_type());
    const at::Tensor mf = merged.to(at::kFloat);
    const at::Tensor normed =
        w.normW * (mf * at::rsqrt(mf.pow(2).mean(-1, /*keepdim=*/true) + 1e-6)).to(x.scalar_type());
    record(trace, "normed", normed[0]);
    return at::linear(at::sigmoid(at::linear(x, w.zW)) * normed, w.outW);
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
    LinearState local;
    LinearState& st = state ? *state : local;
    if (isMamba2Kind(kind))
        return mamba2Forward(c, w, x, st, trace);
    if (kind == LayerKind::ShortConv)
        return shortConvForward(w, x, st, trace);
    if (kind == LayerKind::Mamba1)
        return mamba1Forward(c, w, x, st, trace);
    if (kind == LayerKind::Lightning)
        return lightningForward(c, w, x, st, trace);
    const int64_t Hk = s.keyHeads, Hv = s.valueHeads, dk = s.keyDim, dv = s.valueDim;
    const int64_t r = Hv / Hk;
    at::Tensor q, k, v, z, g, beta;
    // q, k and v through one causal convolution each, the state keeping their inputs side by
    // side as one convolution over [q | k | v] would (KDA; OLMo Hybrid as published).
    auto convolveApart = [&] {
        const at::Tensor qp = at::linear(x, w.qW), kp = at::linear(x, w.kW),
                         vp = at::linear(x, w.vW);
        record(trace, "conv_in", at::cat({qp, kp, vp}, -1)[0]);
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
    };
    if (kind == LayerKind::GatedDeltaNet) {
        at::Tensor b, a, mixed;
        if (s.projections == GdnProjections::Separate) { // OLMo Hybrid: q, k, v, g, b, a
            if (!s.separateConvs)
                mixed =
                    at::cat({at::linear(x, w.qW), at::linear(x, w.kW), at::linear(x, w.vW)}, -1);
            z = at::linear(x, w.zW).view({B, T, Hv, dv});
            b = at::linear(x, w.bW);
            a = at::linear(x, w.aW);
        } else if (s.projections == GdnProjections::Flat) { // Qwen3.5: [q | k | v] in order
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
        if (mixed.defined()) {
            record(trace, "conv_in", mixed[0]);
            const at::Tensor conv = causalConv(mixed, w.convW, st.conv);
            q = conv.narrow(-1, 0, Hk * dk).view({B, T, Hk, dk});
            k = conv.narrow(-1, Hk * dk, Hk * dk).view({B, T, Hk, dk});
            v = conv.narrow(-1, 2 * Hk * dk, Hv * dv).view({B, T, Hv, dv});
        } else {
            convolveApart();
        }
        beta = at::sigmoid(b);
        if (s.betaScale != 1.0) // (in x's dtype, as transformers scales it)
            beta = beta * s.betaScale;
        g = -w.aLog.to(at::kFloat).exp() * decaySoftplus(a.to(at::kFloat) + w.dtBias);
        if (r > 1) { // value head h reads key head h / r
            q = q.repeat_interleave(r, 2);
            k = k.repeat_interleave(r, 2);
        }
        g = g.transpose(1, 2); // [B, Hv, T]
    } else {
        convolveApart();
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
    const double eps = s.gateNormEps > 0 ? s.gateNormEps : c.normEps;
    const at::Tensor y = gatedNorm(o.transpose(1, 2).to(x.scalar_type()), w.normW, z, eps,
                                   kind == LayerKind::KimiDelta)
                             .reshape({B, T, Hv * dv});
    record(trace, "normed", y[0]);
    return at::linear(y, w.outW);
}

} // namespace sparqlab::model
