#pragma once
/// \file temperature.h
/// SparQ's softmax temperature τ (SPARQ.md §3.2, Eq. 9), written once for every path that
/// computes it: the kernels over captured q, K, V and the statistics (tensors), and the decode
/// engine (one head at a time, in double).

#include "attention/attention.h"

#include <ATen/ATen.h>

#include <cmath>

namespace sparqlab::attention {

namespace tau_ops { // the few operations τ needs, on numbers and on tensors alike
inline double like(double, double x) {
    return x;
}
inline at::Tensor like(const at::Tensor& t, double x) {
    return at::full_like(t, x);
}
inline bool gtZero(double x) {
    return x > 0;
}
inline at::Tensor gtZero(const at::Tensor& x) {
    return x.gt(0);
}
inline double choose(bool c, double a, double b) {
    return c ? a : b;
}
inline at::Tensor choose(const at::Tensor& c, const at::Tensor& a, const at::Tensor& b) {
    return at::where(c, a, b);
}
inline double root(double x) {
    return std::sqrt(x);
}
inline at::Tensor root(const at::Tensor& x) {
    return at::sqrt(x);
}
} // namespace tau_ops

/// τ for `mode` (Fixed: `value`) from ‖q̂‖₁ and ‖q‖₁ of each head (double or tensors of any
/// shape), head dimension D and the r_eff components used. Adaptive is Eq. 9,
/// τ = sqrt(D·‖q̂‖₁/‖q‖₁), with ρ = 1 when ‖q̂‖₁ = 0.
template <typename T>
T sparqTemperature(TauMode mode, double value, const T& qHatL1, const T& qL1, int64_t D,
                   int64_t rEff) {
    using namespace tau_ops;
    switch (mode) {
    case TauMode::Adaptive: {
        const T one = like(qL1, 1.0);
        const T ratio = choose(gtZero(qHatL1), qHatL1 / choose(gtZero(qL1), qL1, one), one);
        return root(ratio * static_cast<double>(D));
    }
    case TauMode::SqrtDh:
        return like(qL1, std::sqrt(static_cast<double>(D)));
    case TauMode::SqrtR:
        return like(qL1, std::sqrt(static_cast<double>(rEff)));
    case TauMode::One:
        break;
    case TauMode::Fixed:
        return like(qL1, value);
    }
    return like(qL1, 1.0);
}

} // namespace sparqlab::attention
