// Loki (METHODS.md §4): approximate scores in the first r principal directions of calibration
// keys, then the score-then-select template (§2.1); and its calibration (§4.1).

#include "attention/method_kit.h"

#include <ATen/ATen.h>

namespace sparqlab::attention {

namespace detail {

/// The unit's decode kernel (decode.cpp beside this file).
const DecodeKernel& lokiDecodeKernel();

at::Tensor lokiLayerBasis(const AttentionConfig& c, int64_t Hkv, int64_t D) {
    if (c.r < 1 || c.r > D)
        fail("loki needs 1 <= r <= D = " + std::to_string(D) + ", got r = " + std::to_string(c.r));
    const at::Tensor all = c.calibration ? c.calibration->tensor("basis") : at::Tensor();
    if (!all.defined())
        fail("loki needs a basis (--basis F.h5, from sparqlab-cli calibrate --method loki)");
    if (all.dim() == 4 && (c.layer < 0 || c.layer >= all.size(0)))
        fail("the loki basis holds " + std::to_string(all.size(0)) + " layers, not layer " +
             std::to_string(c.layer));
    at::Tensor b = all.dim() == 4 ? all.select(0, c.layer) : all;
    if (b.dim() != 3 || b.size(0) != Hkv || b.size(1) != D || b.size(2) != D)
        fail("the loki basis must be [Hkv, D, D] = [" + std::to_string(Hkv) + ", " +
             std::to_string(D) + ", " + std::to_string(D) + "], got " + shapeOf(b));
    if (!at::isfinite(b).all().item<bool>())
        throw NonFiniteInputError("the loki basis has non-finite entries");
    return b.to(at::kFloat);
}

namespace {

AttentionResult runLoki(const Prepared& p, const AttentionInputs&, const AttentionConfig& c,
                        const AttendOptions& o) {
    const at::Tensor Pr =
        lokiLayerBasis(c, p.Hkv, p.D)
            .to(p.qg.device(), p.qg.scalar_type()) // the basis is read on the CPU (issue 34)
            .narrow(2, 0, c.r);                    // [Hkv, D, r]
    // ẑ = (q P_r)·(K_j P_r) / sqrt(D): neither keys nor queries are centred (§13.4).
    const at::Tensor qp = at::matmul(p.qg.reshape({p.B, p.Hkv, p.g * p.T, p.D}), Pr);
    const at::Tensor kp = at::matmul(p.k, Pr); // [B, Hkv, S, r]
    const at::Tensor raw = at::matmul(qp, kp.transpose(-1, -2)).view({p.B, p.Hkv, p.g, p.T, p.S});
    AttentionResult out;
    scoreSelectAttend(p, approxLogits(p, raw / std::sqrt(static_cast<double>(p.D))), c, o, out);
    return out;
}

StepOneView lokiStepOne(const StepOneInputs& in) {
    const int64_t D = in.q.size(0);
    const at::Tensor basis = lokiLayerBasis(*in.config, in.kvHeads, D)
                                 .select(0, in.head / std::max<int64_t>(1, in.heads / in.kvHeads));
    const at::Tensor qp = at::matmul(in.q.to(at::kFloat), basis).abs().to(at::kDouble).contiguous();
    StepOneView v;
    v.caption = "<b>Step 1</b> — the query in the keys' principal directions, |q·P<sub>i</sub>| "
                "(Loki's basis, calibrated on " +
                (in.config->calibration ? in.config->calibration->source : std::string("?")) +
                "); the first r = " + std::to_string(in.config->r) +
                " directions (orange) score the positions";
    v.xLabel = "principal direction i (largest key variance first)";
    v.yLabel = "|q·P[i]|"; // (axis labels are plain text: the head view's |q[i]|)
    v.values.assign(qp.data_ptr<double>(), qp.data_ptr<double>() + qp.numel());
    for (int64_t i = 0; i < D; ++i)
        v.used.push_back(i < in.config->r ? 1 : 0);
    return v;
}

/// One layer's basis and eigenvalues from its keys (METHODS.md §4.1).
std::vector<at::Tensor> lokiLayer(const at::Tensor&, const at::Tensor& k,
                                  const CalibrationOptions& o) {
    const LokiCalibration r = lokiCalibrate(k.unsqueeze(0), o.center);
    return {r.basis.to(at::kFloat), r.eigenvalues.to(at::kFloat)};
}

const CalibratorSpec kLokiCalibrator{
    .option = "basis",
    .datasets = {{"basis", "LKDD", false}, {"eigenvalues", "LKD", false}},
    .layer = lokiLayer};

} // namespace
} // namespace detail

using detail::fail;

LokiCalibration lokiCalibrate(const at::Tensor& kCal, bool center) {
    if (!kCal.defined() || kCal.dim() < 3)
        fail("loki calibration keys must be [..., Hkv, N, D]");
    const int64_t Hkv = kCal.size(-3), N = kCal.size(-2), D = kCal.size(-1);
    const at::Tensor X = kCal.to(at::kDouble)
                             .reshape({-1, Hkv, N, D})
                             .permute({1, 0, 2, 3})
                             .reshape({Hkv, -1, D}); // [Hkv, n, D]
    const int64_t n = X.size(1);
    if (n < 2)
        fail("loki calibration needs at least 2 calibration keys per head, got " +
             std::to_string(n));
    if (!at::isfinite(X).all().item<bool>())
        throw NonFiniteInputError("the calibration keys have non-finite entries");
    const at::Tensor mu = X.mean(1);
    at::Tensor C;
    if (center) { // sklearn PCA: covariance of the centred keys, divided by n − 1
        const at::Tensor Xc = X - mu.unsqueeze(1);
        C = at::matmul(Xc.transpose(1, 2), Xc) / static_cast<double>(n - 1);
    } else { // second-moment matrix
        C = at::matmul(X.transpose(1, 2), X) / static_cast<double>(n);
    }
    C = 0.5 * (C + C.transpose(1, 2));
    auto [evals, evecs] = at::linalg_eigh(C);
    evals = evals.flip(-1);
    evecs = evecs.flip(-1);
    // Sign rule: each column's entry of largest |·| is positive (first such row on ties).
    const at::Tensor am = evecs.abs().argmax(1); // [Hkv, D]
    at::Tensor sgn = at::sign(evecs.gather(1, am.unsqueeze(1)));
    sgn = at::where(sgn.eq(0), at::ones_like(sgn), sgn);
    LokiCalibration r;
    r.basis = evecs * sgn;
    r.eigenvalues = evals;
    r.mean = mu;
    const at::Tensor total = evals.sum(-1, /*keepdim=*/true);
    r.explainedVarianceRatio = evals / at::where(total.ne(0), total, at::ones_like(total));
    return r;
}

} // namespace sparqlab::attention

SPARQLAB_METHOD(loki) {
    return {
        .info =
            {.id = Method::Loki,
             .name = "loki",
             .label = "Loki",
             .summary =
                 "scores in the first r principal directions of calibration keys (Singhania et al. "
                 "2024)",
             .spec = "METHODS.md §4",
             .params = {Param::R, Param::K, Param::Local, Param::Gqa, Param::Basis},
             .transfer = transfer::lowRank,
             .transferFormula = "S·r + 2·k·d + 2·d",
             .evalGrid = "r=8,16,32,64 k=128 local=k/4"},
        .run = detail::runLoki,
        .calibrator = &detail::kLokiCalibrator,
        .decode = &detail::lokiDecodeKernel(),
        .stepOne = detail::lokiStepOne};
}
