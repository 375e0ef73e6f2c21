#include "lab.h"

#include "analysis/statistics.h"
#include "attention/select.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>

namespace sparqlab::analysis {

namespace att = sparqlab::attention;

namespace {

[[noreturn]] void fail(const std::string& what) {
    throw att::AttentionError(what);
}

template <typename T> std::vector<T> toVec(const at::Tensor& t) {
    const at::Tensor c = t.contiguous().to(std::is_same_v<T, float> ? at::kFloat : at::kLong);
    const T* p = c.data_ptr<T>();
    return std::vector<T>(p, p + c.numel());
}

std::vector<int64_t> validIndices(const at::Tensor& padded) {
    std::vector<int64_t> out;
    for (const int64_t i : toVec<int64_t>(padded))
        if (i >= 0)
            out.push_back(i);
    return out;
}

void checkLayer(const LabCapture& c, int64_t layer) {
    if (c.layers() == 0)
        fail("no capture yet: run a prompt first");
    if (layer < 0 || layer >= c.layers())
        fail("layer " + std::to_string(layer) + " is outside 0.." + std::to_string(c.layers() - 1));
}

} // namespace

HeadState headState(const LabCapture& c, int64_t layer, int64_t head,
                    const att::AttentionConfig& config) {
    checkLayer(c, layer);
    if (head < 0 || head >= c.heads())
        fail("head " + std::to_string(head) + " is outside 0.." + std::to_string(c.heads() - 1));
    const int64_t S = c.positions(), D = c.headDim();
    config.validateFor(D);
    if (config.method != att::Method::Dense && config.k > S)
        fail("k = " + std::to_string(config.k) + " exceeds the " + std::to_string(S) +
             " positions of the prompt");
    if (config.method == att::Method::H2O)
        fail("H2O needs the attention of every earlier query: use the command line's attend");

    att::AttentionInputs in;
    in.q = c.q[static_cast<size_t>(layer)].unsqueeze(0);
    in.k = c.k[static_cast<size_t>(layer)].unsqueeze(0);
    in.v = c.v[static_cast<size_t>(layer)].unsqueeze(0);
    att::AttendOptions opts;
    opts.keepScores = true;
    const att::AttentionResult res = att::attend(in, config, opts);
    att::AttentionConfig denseCfg = config;
    denseCfg.method = att::Method::Dense;
    const att::AttentionResult dense = att::attend(in, denseCfg, opts);

    HeadState h;
    h.kEff = std::min(config.k, S);
    h.qAbs = toVec<float>(in.q[0][head].abs());
    h.exact = toVec<float>(dense.probs[0][head]);
    if (res.sHat.defined())
        h.approx = toVec<float>(res.sHat[0][head]);
    if (res.compIdx.defined())
        h.components = toVec<int64_t>(res.compIdx[0][head]);
    h.chosen = validIndices(res.indices[0][head]);
    h.trueTopK = toVec<int64_t>(att::topnIndices(dense.probs[0][head], h.kEff));
    const int64_t l =
        config.method == att::Method::Dense ? 0 : std::min(config.effectiveLocal(), h.kEff);
    h.localFrom = S - l;
    h.alpha = res.alpha.defined() ? res.alpha[0][head].item<double>() : 1.0;
    h.tau = res.tau.defined() ? res.tau[0][head].item<double>() : 0.0;
    double trueMass = 0, chosenMass = 0;
    for (const int64_t j : h.trueTopK)
        trueMass += h.exact[static_cast<size_t>(j)];
    for (const int64_t j : h.chosen)
        chosenMass += h.exact[static_cast<size_t>(j)];
    h.trueMass = trueMass;
    h.chosenMass = chosenMass;
    int64_t common = 0;
    for (const int64_t j : h.chosen)
        common += std::binary_search(h.trueTopK.begin(), h.trueTopK.end(), j) ? 1 : 0;
    h.topkAgreement =
        static_cast<double>(common) / static_cast<double>(std::max<int64_t>(h.kEff, 1));
    const at::Tensor yd = dense.y[0][head], y = res.y[0][head];
    const double norm = yd.norm().item<double>();
    h.outputError = norm > 0 ? (y - yd).norm().item<double>() / norm : 0.0;
    return h;
}

Overview overview(const LabCapture& c, const att::AttentionConfig& config) {
    if (c.layers() == 0)
        fail("no capture yet: run a prompt first");
    const int64_t S = c.positions(), D = c.headDim();
    if (config.r < 1 || config.r > D)
        fail("r = " + std::to_string(config.r) + " must lie in 1..head_dim = " + std::to_string(D));
    if (config.k < 1 || config.k > S)
        fail("k = " + std::to_string(config.k) + " must lie in 1..S = " + std::to_string(S));
    Overview o;
    o.layers = c.layers();
    o.heads = c.heads();
    const at::Tensor valid = at::ones({1, S}, at::kBool);
    for (int64_t l = 0; l < c.layers(); ++l) {
        const at::Tensor q = c.q[static_cast<size_t>(l)].unsqueeze(0);
        const at::Tensor k = c.k[static_cast<size_t>(l)].unsqueeze(0);
        const auto cov = toVec<float>(coverage(q, k, valid, config.k)[0]);
        const auto kur = toVec<float>(kurtosis(q));
        const auto agr =
            toVec<float>(topkAgreement(q, k, valid, config.r, config.k, AgreementMethod::TopR)[0]);
        o.coverage.insert(o.coverage.end(), cov.begin(), cov.end());
        o.kurtosis.insert(o.kurtosis.end(), kur.begin(), kur.end());
        o.agreement.insert(o.agreement.end(), agr.begin(), agr.end());
    }
    return o;
}

} // namespace sparqlab::analysis
