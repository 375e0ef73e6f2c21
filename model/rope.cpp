// Rotary position embeddings (rope.h): transformers 5.x's inverse frequencies and the three
// rotation layouts.

#include "rope.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>

namespace sparqlab::model {

namespace {

/// base^(2i/rot) for i < rot/2, in float32 (HF: base ** (arange(0, rot, 2).float() / rot)).
at::Tensor basePowers(double base, int64_t rot) {
    const at::Tensor exponent =
        at::arange(0, rot, 2, at::kLong).to(at::kFloat) / static_cast<double>(rot);
    return at::pow(at::scalar_tensor(base, at::kFloat), exponent);
}

/// YaRN's ramp over the frequency pairs (HF's find_correction_range and linear_ramp_factor):
/// 0 up to `low`, 1 from `high`, linear between; float32.
at::Tensor yarnRamp(const RopeSpec& r, int64_t rot) {
    const double logBase = std::log(r.theta);
    const double original = static_cast<double>(r.originalMax);
    auto correctionDim = [&](double rotations) {
        return static_cast<double>(rot) * std::log(original / (rotations * 2 * M_PI)) /
               (2 * logBase);
    };
    double low = correctionDim(r.betaFast), high = correctionDim(r.betaSlow);
    if (r.truncate) {
        low = std::floor(low);
        high = std::ceil(high);
    }
    low = std::max(low, 0.0);
    high = std::min(high, static_cast<double>(rot - 1));
    if (low == high)
        high += 0.001; // HF: prevents a division by zero
    return ((at::arange(rot / 2, at::kFloat) - low) / (high - low)).clamp(0, 1);
}

} // namespace

double yarnMscale(double scale, double m) {
    return scale <= 1 ? 1.0 : 0.1 * m * std::log(scale) + 1.0;
}

double yarnAttentionFactor(double factor, double mscale, double mscaleAllDim) {
    if (mscale != 0 && mscaleAllDim != 0)
        return yarnMscale(factor, mscale) / yarnMscale(factor, mscaleAllDim);
    return yarnMscale(factor, 1.0);
}

at::Tensor ropeInverseFrequencies(const RopeSpec& rope, int64_t rot, bool longFactors) {
    at::Tensor invFreq = 1.0 / basePowers(rope.theta, rot);
    if (rope.scaling == "llama3") {
        const double lowWavelen = static_cast<double>(rope.originalMax) / rope.lowFreqFactor;
        const double highWavelen = static_cast<double>(rope.originalMax) / rope.highFreqFactor;
        const at::Tensor wavelen = 2 * M_PI / invFreq;
        const at::Tensor scaled = invFreq / rope.factor;
        const at::Tensor smooth =
            (static_cast<double>(rope.originalMax) / wavelen - rope.lowFreqFactor) /
            (rope.highFreqFactor - rope.lowFreqFactor);
        const at::Tensor mid = (1 - smooth) * scaled + smooth * invFreq;
        invFreq = at::where(wavelen.lt(highWavelen), invFreq,
                            at::where(wavelen.gt(lowWavelen), scaled, mid));
    } else if (rope.scaling == "linear") {
        invFreq = invFreq / rope.factor;
    } else if (rope.scaling == "longrope") {
        // 1 / (ext_factors · base^(2i/dim))
        const at::Tensor ext =
            at::tensor(longFactors ? rope.longFactor : rope.shortFactor, at::kDouble)
                .to(at::kFloat);
        invFreq = 1.0 / (ext * basePowers(rope.theta, rot));
    } else if (rope.scaling == "yarn") {
        // Interpolated (÷ factor) below the ramp, extrapolated (unchanged) above it.
        const at::Tensor powers = basePowers(rope.theta, rot);
        const at::Tensor extrapolation = 1.0 / powers;
        const at::Tensor interpolation = 1.0 / (rope.factor * powers);
        const at::Tensor keep = 1 - yarnRamp(rope, rot); // the extrapolation's share
        invFreq = interpolation * (1 - keep) + extrapolation * keep;
    }
    return invFreq;
}

RopeAngles ropeAngles(const at::Tensor& invFreq, int64_t firstPos, int64_t T,
                      double attentionFactor) {
    const at::Tensor pos =
        at::arange(firstPos, firstPos + T, invFreq.options().dtype(at::kLong)).to(at::kFloat);
    const at::Tensor freqs = at::outer(pos, invFreq); // [T, rot/2], float32
    RopeAngles a{freqs.cos(), freqs.sin(), {}, {}};
    if (attentionFactor != 1.0) {
        a.cos = a.cos * attentionFactor;
        a.sin = a.sin * attentionFactor;
    }
    return a;
}

at::Tensor applyRope(const at::Tensor& x, const at::Tensor& invFreq, int64_t firstPos, int64_t rot,
                     RopeLayout layout, double attentionFactor) {
    return applyRope(x, ropeAngles(invFreq, firstPos, x.size(2), attentionFactor), rot, layout);
}

void ropeHalfTables(const RopeAngles& angles, at::ScalarType dtype) {
    if (!angles.halfCos.defined() || angles.halfCos.scalar_type() != dtype) {
        angles.halfCos = at::cat({angles.cos, angles.cos}, -1).to(dtype);
        angles.halfSin = at::cat({angles.sin, angles.sin}, -1).to(dtype);
    }
}

at::Tensor applyRope(const at::Tensor& x, const RopeAngles& angles, int64_t rot,
                     RopeLayout layout) {
    const int64_t D = x.size(-1);
    const at::Tensor &cos = angles.cos, &sin = angles.sin;
    const at::Tensor xr = x.narrow(-1, 0, rot);
    at::Tensor out;
    switch (layout) {
    case RopeLayout::Half: {
        // HF: cos, sin cast to x's dtype; dim i pairs with i + rot/2 (rotate_half).
        ropeHalfTables(angles, x.scalar_type());
        const at::Tensor rotated =
            at::cat({xr.narrow(-1, rot / 2, rot / 2).neg(), xr.narrow(-1, 0, rot / 2)}, -1);
        out = xr * angles.halfCos + rotated * angles.halfSin;
        break;
    }
    case RopeLayout::Interleaved:
    case RopeLayout::InterleavedToHalf: {
        // Pairs (2i, 2i + 1) rotate by frequency i, in float32 (Cohere, Llama 4's complex
        // product); DeepSeek writes the rotated pairs out as [evens | odds].
        const at::Tensor pairs = xr.to(at::kFloat).unflatten(-1, {rot / 2, 2});
        const at::Tensor a = pairs.select(-1, 0), b = pairs.select(-1, 1);
        const at::Tensor ra = a * cos - b * sin, rb = b * cos + a * sin;
        out = (layout == RopeLayout::Interleaved ? at::stack({ra, rb}, -1).flatten(-2)
                                                 : at::cat({ra, rb}, -1))
                  .to(x.scalar_type());
        break;
    }
    }
    return rot == D ? out : at::cat({out, x.narrow(-1, rot, D - rot)}, -1);
}

} // namespace sparqlab::model
