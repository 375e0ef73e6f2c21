#pragma once
// The fused operations of a decode step (attention/cuda/step.h) against the libtorch formulas
// their callers would otherwise run (model/transformer_forward.cpp's rmsNorm and linear layers,
// model/rope.cpp's rotate-half layout, attention/decode/cache.cpp's append), on random inputs in
// each storage dtype: run by test_cuda_step under the host emulation (CI) and by test_cuda_decode
// on a GPU, through the same checks.

#include "attention/cuda/step.h"
#include "attention/decode/engine.h"
#include "check.h"

#include <ATen/ATen.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

namespace sparqlab::test::step {

inline const char* nameOf(at::ScalarType t) {
    return t == at::kHalf ? "f16" : t == at::kBFloat16 ? "bf16" : "f32";
}
/// Within `ulps` units in the last place of the dtype of each expected value (float32: 2^-23).
inline bool withinUlps(const at::Tensor& got, const at::Tensor& want, double ulps) {
    const int bits = want.scalar_type() == at::kHalf       ? 10
                     : want.scalar_type() == at::kBFloat16 ? 7
                                                           : 23;
    const at::Tensor g = got.cpu().to(at::kDouble), w = want.cpu().to(at::kDouble);
    const at::Tensor ulp = at::exp2(at::floor(at::log2(w.abs().clamp_min(1e-30))) - bits);
    return (g - w).abs().le(ulp * ulps + 1e-30).all().item<bool>();
}

/// RMSNorm with and without the residual add, against HF's formula in libtorch on the host.
inline void rmsNormCases(const attention::cuda::StepOps& ops, at::Device dev) {
    for (const at::ScalarType dt : {at::kFloat, at::kHalf, at::kBFloat16})
        for (const int64_t width : {96, 4100})
            for (const int64_t rows : {1, 3})
                for (const bool residual : {false, true}) {
                    const std::string what = std::string("rmsNorm ") + nameOf(dt) + " width " +
                                             std::to_string(width) + " rows " +
                                             std::to_string(rows) + (residual ? " +residual" : "");
                    at::manual_seed(static_cast<uint64_t>(width * 10 + rows + residual));
                    const at::Tensor x = (at::randn({rows, width}) * 3).to(dt);
                    const at::Tensor r = at::randn({rows, width}).to(dt);
                    const at::Tensor w = (at::rand({width}) + 0.5).to(dt);
                    const double eps = 1e-5;
                    const at::Tensor s = residual ? x + r : x; // rounded to dt, as HF's x + a
                    const at::Tensor sf = s.to(at::kFloat);
                    const at::Tensor want =
                        w * (sf * at::rsqrt(sf.pow(2).mean(-1, true) + eps)).to(dt);
                    const at::Tensor xd = x.to(dev), rd = r.to(dev), wd = w.to(dev);
                    at::Tensor y = at::full({rows, width}, NAN, x.options().device(dev));
                    at::Tensor sum = at::full({rows, width}, NAN, x.options().device(dev));
                    attention::cuda::RmsNormStep p;
                    p.storage = attention::cuda::storageOf(dt);
                    p.x = xd.data_ptr();
                    p.residual = residual ? rd.data_ptr() : nullptr;
                    p.sum = residual ? sum.data_ptr() : nullptr;
                    p.w = wd.data_ptr();
                    p.y = y.data_ptr();
                    p.rows = rows;
                    p.width = width;
                    p.eps = static_cast<float>(eps);
                    ops.rmsNorm(p, nullptr);
                    // The normaliser's sum runs in another order: one unit in the last place of
                    // the stored dtype (float32: a few, the normaliser's error carried through).
                    const double ulps = dt == at::kFloat ? 4.0 : 1.0;
                    if (!withinUlps(y, want, ulps))
                        std::fprintf(stderr, "%s: largest difference %g\n", what.c_str(),
                                     (y.cpu().to(at::kDouble) - want.to(at::kDouble))
                                         .abs()
                                         .max()
                                         .item<double>());
                    check(withinUlps(y, want, ulps), what + ": y within the dtype's ulps of HF's");
                    if (residual)
                        check(at::equal(sum.cpu(), s), what + ": the residual sum exactly");
                }
}

/// RoPE of q and k in one launch (strided, as the projections' views are), full and partial.
inline void ropeCases(const attention::cuda::StepOps& ops, at::Device dev) {
    for (const at::ScalarType dt : {at::kFloat, at::kHalf, at::kBFloat16})
        for (const auto& [D, rot] : {std::pair<int64_t, int64_t>{64, 64}, {128, 32}})
            for (const bool both : {true, false}) {
                const std::string what = std::string("rope ") + nameOf(dt) + " D " +
                                         std::to_string(D) + " rot " + std::to_string(rot) +
                                         (both ? " q and k" : " q alone");
                const int64_t B = 2, T = 3, Hq = 4, Hkv = 2;
                at::manual_seed(static_cast<uint64_t>(D + rot));
                // [B, T, H, D] as a projection writes them, viewed [B, H, T, D].
                const at::Tensor q = at::randn({B, T, Hq, D}).to(dt).transpose(1, 2);
                const at::Tensor k = at::randn({B, T, Hkv, D}).to(dt).transpose(1, 2);
                const at::Tensor pos = at::arange(40, 40 + T).to(at::kFloat);
                const at::Tensor inv =
                    1.0 / at::pow(10000.0, at::arange(0, rot, 2).to(at::kFloat) / double(rot));
                const at::Tensor freqs = at::outer(pos, inv);
                const at::Tensor c = at::cat({freqs.cos(), freqs.cos()}, -1).to(dt);
                const at::Tensor s = at::cat({freqs.sin(), freqs.sin()}, -1).to(dt);
                auto hf = [&](const at::Tensor& x) {
                    const at::Tensor xr = x.narrow(-1, 0, rot);
                    const at::Tensor rotated = at::cat(
                        {xr.narrow(-1, rot / 2, rot / 2).neg(), xr.narrow(-1, 0, rot / 2)}, -1);
                    const at::Tensor out = xr * c + rotated * s;
                    return rot == D ? out : at::cat({out, x.narrow(-1, rot, D - rot)}, -1);
                };
                const at::Tensor qd = q.to(dev), kd = k.to(dev), cd = c.to(dev), sd = s.to(dev);
                // (q.to(dev) keeps the transposed strides where it copies to a device; the
                // emulation's host tensors are the same tensors.)
                at::Tensor qo = at::full({B, Hq, T, D}, NAN, q.options().device(dev));
                at::Tensor ko = at::full({B, Hkv, T, D}, NAN, q.options().device(dev));
                attention::cuda::RopeStep p;
                p.storage = attention::cuda::storageOf(dt);
                p.a = {qd.data_ptr(), qo.data_ptr(), Hq, qd.stride(0), qd.stride(1), qd.stride(2)};
                if (both)
                    p.b = {kd.data_ptr(), ko.data_ptr(), Hkv,
                           kd.stride(0),  kd.stride(1),  kd.stride(2)};
                p.cos = cd.data_ptr();
                p.sin = sd.data_ptr();
                p.B = B;
                p.T = T;
                p.D = D;
                p.rot = rot;
                check(qd.stride(3) == 1, what + ": the input's last dimension is contiguous");
                ops.rope(p, nullptr);
                // Every dtype exactly: each product and the sum rounded on their own.
                const double ulps = 0.0;
                check(withinUlps(qo, hf(q), ulps), what + ": q as HF rotates it");
                if (both)
                    check(withinUlps(ko, hf(k), ulps), what + ": k as HF rotates it");
                else
                    check(at::isnan(ko.cpu().to(at::kFloat)).all().item<bool>(),
                          what + ": k untouched");
            }
}

/// A decode cache's append of one position: K, V, the dimension-major K and the value sum.
inline void appendCases(const attention::cuda::StepOps& ops, at::Device dev) {
    for (const at::ScalarType dt : {at::kFloat, at::kHalf, at::kBFloat16})
        for (const bool dimensionMajor : {true, false}) {
            const std::string what = std::string("append ") + nameOf(dt) +
                                     (dimensionMajor ? " with K dimension-major" : "");
            const int64_t B = 2, H = 3, D = 64, cap = 10, pos = 4;
            at::manual_seed(7);
            const at::Tensor k = at::randn({B, H, D}).to(dt), v = at::randn({B, H, D}).to(dt);
            const at::TensorOptions o = k.options().device(dev);
            at::Tensor K = at::full({B, H, cap, D}, 7.0, o), V = at::full({B, H, cap, D}, 7.0, o);
            at::Tensor Kt = at::full({B, H, D, cap}, 7.0, o);
            const at::Tensor before = at::randn({B, H, D}, at::kDouble);
            at::Tensor vsum = before.to(dev).clone(); // (to() of a host tensor to the host aliases)
            const at::Tensor kd = k.to(dev), vd = v.to(dev);
            attention::cuda::AppendStep p;
            p.storage = attention::cuda::storageOf(dt);
            p.k = kd.data_ptr();
            p.v = vd.data_ptr();
            p.K = K.data_ptr();
            p.V = V.data_ptr();
            p.Kt = dimensionMajor ? Kt.data_ptr() : nullptr;
            p.vsum = vsum.data_ptr<double>();
            p.B = B;
            p.H = H;
            p.D = D;
            p.cap = cap;
            p.pos = pos;
            ops.appendStep(p, nullptr);
            const at::Tensor Kc = K.cpu(), Vc = V.cpu(), Ktc = Kt.cpu();
            check(at::equal(Kc.select(2, pos), k) && at::equal(Vc.select(2, pos), v),
                  what + ": K and V at the position");
            const at::Tensor others =
                at::cat({Kc.narrow(2, 0, pos), Kc.narrow(2, pos + 1, cap - pos - 1),
                         Vc.narrow(2, 0, pos), Vc.narrow(2, pos + 1, cap - pos - 1)},
                        2);
            check(others.eq(7.0).all().item<bool>(), what + ": the other positions untouched");
            if (dimensionMajor)
                check(at::equal(Ktc.select(3, pos), k), what + ": the dimension-major K");
            else
                check(Ktc.eq(7.0).all().item<bool>(), what + ": no dimension-major K written");
            check(at::equal(vsum.cpu(), before + v.to(at::kDouble)), what + ": the value sum");
        }
}

/// Whether `got` lies within `ulps` roundings to dtype of `exact` (float64), beside the float32
/// sum's own error over K products of magnitude `scale` (K·2^-24 of it); prints the worst.
inline bool withinRounding(const at::Tensor& got, const at::Tensor& exact, const at::Tensor& scale,
                           int64_t K, at::ScalarType dt, double ulps, const std::string& what) {
    const int bits = dt == at::kHalf ? 10 : dt == at::kBFloat16 ? 7 : 23;
    const at::Tensor bound = exact.abs() * (ulps * std::exp2(-bits)) +
                             scale * (static_cast<double>(K) * std::exp2(-24)) + 1e-30;
    const double worst = ((got.cpu().to(at::kDouble) - exact).abs() / bound).max().item<double>();
    if (!(worst <= 1.0))
        std::fprintf(stderr, "%s: worst error %g of the bound\n", what.c_str(), worst);
    return worst <= 1.0;
}

/// The linear layers at one to four rows: one output with and without a bias; three outputs of
/// one x (q, k, v: their own N and biases) in one launch; an MLP's gate and up with SiLU and the
/// product in one launch. Against float64 sums of the stored values: within one rounding
/// (SiLU·up: three, its three roundings).
inline void gemvCases(const attention::cuda::StepOps& ops, at::Device dev) {
    for (const at::ScalarType dt : {at::kFloat, at::kHalf, at::kBFloat16})
        for (const int64_t K : {64, 1032})
            for (const int64_t rows : {1, 2, 4})
                for (const int kind : {0, 1, 2, 3}) { // one, one with bias, three, SiLU·up
                    const char* names[] = {"", " +bias", " q k v", " silu(gate)*up"};
                    const std::string what = std::string("gemv ") + nameOf(dt) + " " +
                                             std::to_string(rows) + "x" + std::to_string(K) +
                                             names[kind];
                    at::manual_seed(static_cast<uint64_t>(K + 10 * rows + kind));
                    const at::Tensor x = at::randn({rows, K}).to(dt);
                    const std::vector<int64_t> Ns = kind == 2   ? std::vector<int64_t>{40, 17, 9}
                                                    : kind == 3 ? std::vector<int64_t>{37, 37}
                                                                : std::vector<int64_t>{300};
                    std::vector<at::Tensor> w, b, y, wd, bd;
                    attention::cuda::GemvStep p;
                    p.storage = attention::cuda::storageOf(dt);
                    const at::Tensor xd = x.to(dev);
                    p.x = xd.data_ptr();
                    p.rows = rows;
                    p.K = K;
                    p.outputs = static_cast<int>(Ns.size());
                    p.siluMul = kind == 3;
                    for (size_t o = 0; o < Ns.size(); ++o) {
                        w.push_back((at::randn({Ns[o], K}) / std::sqrt(double(K))).to(dt));
                        b.push_back(at::randn({Ns[o]}).to(dt));
                        wd.push_back(w[o].to(dev));
                        bd.push_back(b[o].to(dev));
                        y.push_back(at::full({rows, Ns[o]}, NAN, x.options().device(dev)));
                        const bool withBias =
                            kind == 1 || (kind == 2 && o != 1) || (kind == 3 && o == 0);
                        p.out[o] = {wd[o].data_ptr(), withBias ? bd[o].data_ptr() : nullptr,
                                    y[o].data_ptr(), Ns[o]};
                        if (!withBias)
                            b[o] = at::zeros({Ns[o]}).to(dt);
                    }
                    ops.gemv(p, nullptr);
                    auto exactOf = [&](size_t o) {
                        return at::matmul(x.to(at::kDouble), w[o].to(at::kDouble).t()) +
                               b[o].to(at::kDouble);
                    };
                    auto scaleOf = [&](size_t o) {
                        return at::matmul(x.to(at::kDouble).abs(), w[o].to(at::kDouble).abs().t()) +
                               b[o].to(at::kDouble).abs();
                    };
                    if (kind != 3) {
                        for (size_t o = 0; o < Ns.size(); ++o)
                            check(withinRounding(y[o], exactOf(o), scaleOf(o), K, dt, 1.0,
                                                 what + " output " + std::to_string(o)),
                                  what + ": output " + std::to_string(o) +
                                      " within one rounding of the exact sum");
                        continue;
                    }
                    // HF: act(gate) rounded, times up rounded, rounded; from the exact sums.
                    const at::Tensor g = exactOf(0).to(dt).to(at::kDouble);
                    const at::Tensor u = exactOf(1).to(dt).to(at::kDouble);
                    const at::Tensor silu = g * at::sigmoid(g), want = silu * u;
                    // Two roundings of the result (SiLU's, the product's); g or u rounded a
                    // unit the other way where their float32 sums straddle a boundary (|SiLU'|
                    // ≤ 1.1); the float32 sums' own error carried through.
                    const int bits = dt == at::kHalf ? 10 : dt == at::kBFloat16 ? 7 : 23;
                    const double ulp = std::exp2(-bits), sumErr = double(K) * std::exp2(-24);
                    const at::Tensor bound = want.abs() * (2 * ulp) +
                                             (g.abs() * u.abs() * 1.1 + want.abs()) * ulp +
                                             scaleOf(0) * sumErr * 1.1 * u.abs() +
                                             scaleOf(1) * sumErr * silu.abs() + 1e-30;
                    const double worst =
                        ((y[0].cpu().to(at::kDouble) - want).abs() / bound).max().item<double>();
                    if (!(worst <= 1.0))
                        std::fprintf(stderr, "%s: worst error %g of the bound\n", what.c_str(),
                                     worst);
                    check(worst <= 1.0, what + ": silu(gate)·up within its roundings of HF's");
                    check(at::isnan(y[1].cpu().to(at::kFloat)).all().item<bool>(),
                          what + ": up not written");
                }
    // What the kernel refuses: more rows than it takes; a SiLU pair of unequal N.
    attention::cuda::GemvStep bad;
    bad.rows = 5;
    bad.K = 8;
    bad.out[0].N = 1;
    bool threw = false;
    try {
        ops.gemv(bad, nullptr);
    } catch (const std::exception&) {
        threw = true;
    }
    check(threw, "gemv refuses five rows");
    bad.rows = 1;
    bad.outputs = 2;
    bad.siluMul = true;
    bad.out[1].N = 2;
    threw = false;
    try {
        ops.gemv(bad, nullptr);
    } catch (const std::exception&) {
        threw = true;
    }
    check(threw, "gemv refuses a SiLU pair of unequal widths");
}

inline void all(const attention::cuda::StepOps& ops, at::Device dev) {
    rmsNormCases(ops, dev);
    ropeCases(ops, dev);
    appendCases(ops, dev);
    gemvCases(ops, dev);
}

} // namespace sparqlab::test::step
