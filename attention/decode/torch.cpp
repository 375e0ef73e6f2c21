// Decode attention on a non-CPU device (CUDA): what DecodeAttention::run computes, in libtorch
// operations over the cache's storage (decode/engine.h).

#include "attention/decode/engine.h"

#include "attention/decode/kernel.h"
#include "attention/method_kit.h"
#include "attention/method_spec.h"
#include "attention/temperature.h"

#include <ATen/ATen.h>

namespace sparqlab::attention {

namespace {

at::Tensor sparqTorch(const at::Tensor& qf, const DecodeCache& c, const AttentionConfig& cfg,
                      double scale, bool defaultScale, at::Tensor* alphaOut) {
    const int64_t B = qf.size(0), Hq = qf.size(1), D = qf.size(2), H = c.kvHeads(), g = Hq / H,
                  S = c.length();
    const at::Tensor qg = qf.view({B, H, g, D});
    const at::Tensor K = c.keys().to(at::kFloat), V = c.values().to(at::kFloat);
    const at::Tensor KT = c.keysT().to(at::kFloat);
    const int64_t rEff = std::min(cfg.r, D);
    const at::Tensor comps =
        std::get<0>(at::sort(std::get<1>(at::topk(qg.abs().sum(2), rEff, -1)), -1)); // [B,H,r]
    const at::Tensor ktHat = KT.gather(2, comps.unsqueeze(-1).expand({B, H, rEff, S}));
    const at::Tensor qHat = qg.gather(-1, comps.unsqueeze(2).expand({B, H, g, rEff}));
    const at::Tensor tau =
        sparqTemperature(cfg.tau, cfg.tauValue, qHat.abs().sum(-1), qg.abs().sum(-1), D, rEff);
    at::Tensor zHat = at::matmul(qHat, ktHat) / tau.unsqueeze(-1);
    if (!defaultScale)
        zHat = zHat * (scale * std::sqrt(static_cast<double>(D)));
    const at::Tensor sHat = at::softmax(zHat, -1);
    at::Tensor G = cfg.gqa == GroupSelect::SumLogits  ? zHat.sum(2, true)
                   : cfg.gqa == GroupSelect::SumProbs ? sHat.sum(2, true)
                                                      : zHat;
    const int64_t kEff = std::min(cfg.k, S), lEff = std::min(cfg.effectiveLocal(), kEff);
    if (lEff > 0)
        G = G.narrow(-1, 0, S - lEff);
    at::Tensor idx = std::get<1>(at::topk(G, kEff - lEff, -1));
    if (lEff > 0)
        idx = at::cat({idx, at::arange(S - lEff, S, idx.options())
                                .expand({idx.size(0), idx.size(1), idx.size(2), lEff})},
                      -1);
    idx = idx.expand({B, H, g, kEff});
    const at::Tensor kSel = K.unsqueeze(2)
                                .expand({B, H, g, S, D})
                                .gather(3, idx.unsqueeze(-1).expand({B, H, g, kEff, D}));
    const at::Tensor vSel = V.unsqueeze(2)
                                .expand({B, H, g, S, D})
                                .gather(3, idx.unsqueeze(-1).expand({B, H, g, kEff, D}));
    const at::Tensor w = at::softmax(at::matmul(kSel, qg.unsqueeze(-1)).squeeze(-1) * scale, -1);
    const at::Tensor yTop = at::matmul(w.unsqueeze(-2), vSel).squeeze(-2);
    const at::Tensor alpha =
        cfg.meanValue ? sHat.gather(-1, idx).sum(-1) : at::ones({B, H, g}, qf.options());
    const at::Tensor a = alpha.unsqueeze(-1);
    const at::Tensor y = a * yTop + (1 - a) * c.meanValue().unsqueeze(2);
    if (alphaOut)
        *alphaOut = alpha.reshape({B, Hq});
    return y.reshape({B, Hq, D});
}

} // namespace

at::Tensor decodeOnDevice(const at::Tensor& qf, const DecodeCache& cache,
                          const AttentionConfig& config, double scale, at::Tensor* alphaOut) {
    const int64_t B = qf.size(0), Hq = qf.size(1);
    const at::Tensor q = qf.to(cache.device());
    if (config.method == Method::Dense) {
        if (alphaOut)
            *alphaOut = at::ones({B, Hq}, q.options());
        return denseDecodeTorch(q, cache, config.scale);
    }
    if (config.method == Method::Sparq)
        return sparqTorch(q, cache, config, scale, !config.scale.has_value(), alphaOut);
    // The other methods: attend()'s own libtorch operations on the device, over the state the
    // method's prepareCache made for this cache (its codebook, tables, kept set: what its CPU
    // kernel reads), given as attend()'s named inputs.
    AttentionInputs in;
    in.q = q;
    in.k = cache.keys().to(at::kFloat);
    in.v = cache.values().to(at::kFloat);
    if (const DecodeKernel* k = methodSpec(config.method).decode; k && k->deviceInputs)
        in.extra = k->deviceInputs(cache, config);
    AttendOptions o;
    o.diagnostics = false;
    o.validate = false;
    AttentionResult r = attend(in, config, o);
    if (alphaOut)
        *alphaOut = r.alpha;
    return r.y;
}

at::Tensor denseDecodeTorch(const at::Tensor& q, const DecodeCache& cache,
                            std::optional<double> scale) {
    const int64_t B = q.size(0), Hq = q.size(1), D = q.size(2), H = cache.kvHeads();
    const double sc = scale ? *scale : 1.0 / std::sqrt(static_cast<double>(D));
    const at::Tensor qg = q.to(at::kFloat).view({B, H, Hq / H, D});
    const at::Tensor K = cache.keys(), V = cache.values();
    const bool f32 = K.scalar_type() == at::kFloat;
    const at::Tensor z = at::matmul(qg, (f32 ? K : K.to(at::kFloat)).transpose(-1, -2)) * sc;
    const at::Tensor p = at::softmax(z, -1);
    return at::matmul(p, f32 ? V : V.to(at::kFloat)).reshape({B, Hq, D});
}

} // namespace sparqlab::attention
