// Double Sparsity (METHODS.md §5): approximate scores from r calibrated channels per query
// head, then the score-then-select template (§2.1); and its calibration (§5.1).

#include "attention/method_kit.h"

#include <ATen/ATen.h>

namespace sparqlab::attention {

namespace detail {

/// The unit's decode kernel (decode.cpp beside this file).
const DecodeKernel& dsDecodeKernel();

at::Tensor dsLayerChannels(const AttentionConfig& c, int64_t Hq, int64_t D) {
    if (c.r < 1 || c.r > D)
        fail("double-sparsity needs 1 <= r <= D = " + std::to_string(D) +
             ", got r = " + std::to_string(c.r));
    const at::Tensor all = c.calibration ? c.calibration->tensor("channels") : at::Tensor();
    if (!all.defined())
        fail("double-sparsity needs channels (--channels F.h5, from sparqlab-cli calibrate "
             "--method double-sparsity)");
    if (all.dim() == 3 && (c.layer < 0 || c.layer >= all.size(0)))
        fail("the channel file holds " + std::to_string(all.size(0)) + " layers, not layer " +
             std::to_string(c.layer));
    const at::Tensor ch = (all.dim() == 3 ? all.select(0, c.layer) : all).to(at::kLong);
    if (ch.dim() != 2 || ch.size(0) != Hq)
        fail("the channels must be [Hq, Dc] with Hq = " + std::to_string(Hq) + ", got " +
             shapeOf(ch));
    if (c.r > ch.size(1))
        fail("r = " + std::to_string(c.r) + " exceeds the " + std::to_string(ch.size(1)) +
             " ranked channels per head");
    const at::Tensor first = ch.narrow(1, 0, c.r).contiguous();
    if (first.lt(0).any().item<bool>() || first.ge(D).any().item<bool>())
        fail("a channel index lies outside [0, " + std::to_string(D) + ")");
    if (c.r > 1 && std::get<0>(at::sort(first, -1)).diff(1, -1).eq(0).any().item<bool>())
        fail("the first r channels of a head must be distinct");
    return first;
}

namespace {

AttentionResult runDoubleSparsity(const Prepared& p, const AttentionInputs&,
                                  const AttentionConfig& c, const AttendOptions& o) {
    const at::Tensor first = dsLayerChannels(c, p.Hq, p.D);
    // ẑ_h = Σ_{c∈C_h} q_h[c]·K_u[j,c] / sqrt(D): q_h with its other channels zeroed.
    // (the channels are read on the CPU: the index goes where the queries are, issue 34)
    const at::Tensor keep = at::zeros({p.Hq, p.D}, p.options())
                                .scatter_(1, first.to(p.qg.device()), 1.0)
                                .view({1, p.Hkv, p.g, 1, p.D});
    const at::Tensor raw =
        at::matmul((p.qg * keep).reshape({p.B, p.Hkv, p.g * p.T, p.D}), p.k.transpose(-1, -2))
            .view({p.B, p.Hkv, p.g, p.T, p.S});
    AttentionResult out;
    scoreSelectAttend(p, approxLogits(p, raw / std::sqrt(static_cast<double>(p.D))), c, o, out);
    return out;
}

StepOneView dsStepOne(const StepOneInputs& in) {
    const int64_t D = in.q.size(0);
    const at::Tensor ch = dsLayerChannels(*in.config, in.heads, D)[in.head].contiguous();
    const at::Tensor qa = in.q.abs().to(at::kDouble).contiguous();
    StepOneView v;
    v.caption = "<b>Step 1</b> — the query's components |q<sub>i</sub>|; Double Sparsity scores "
                "positions with this head's r = " +
                std::to_string(in.config->r) + " calibrated channels (orange, chosen on " +
                (in.config->calibration ? in.config->calibration->source : std::string("?")) +
                ", the same for every query), not the query's largest";
    v.xLabel = "component i of q";
    v.yLabel = "|q[i]|"; // (as the head view labels SparQ's)
    v.values.assign(qa.data_ptr<double>(), qa.data_ptr<double>() + qa.numel());
    v.used.assign(static_cast<size_t>(D), 0);
    for (int64_t i = 0; i < ch.numel(); ++i)
        v.used[static_cast<size_t>(ch.data_ptr<int64_t>()[i])] = 1;
    return v;
}

/// One layer's ranked channels from its queries and keys (METHODS.md §5.1).
std::vector<at::Tensor> dsLayer(const at::Tensor& q, const at::Tensor& k,
                                const CalibrationOptions& o) {
    return {dsCalibrate(q.unsqueeze(0), k.unsqueeze(0), o.mode).channels};
}

void dsCheck(const Calibration& cal, const AttentionConfig& c, const ModelShape&,
             const std::string& where) {
    const int64_t ranked = cal.tensor("channels").size(-1);
    if (ranked < c.r)
        fail(where + "ranks " + std::to_string(ranked) +
             " channels per head, fewer than r = " + std::to_string(c.r));
}

const CalibratorSpec kDsCalibrator{.option = "channels",
                                   .datasets = {{"channels", "LHc", true}},
                                   .needsQueries = true,
                                   .takesMode = true,
                                   .layer = dsLayer,
                                   .check = dsCheck};

} // namespace
} // namespace detail

using detail::fail;

ChannelCalibration dsCalibrate(const at::Tensor& qCal, const at::Tensor& kCal, ChannelMode mode) {
    const bool needQ = mode != ChannelMode::K, needK = mode != ChannelMode::Q;
    if ((needQ && (!qCal.defined() || qCal.dim() < 3)) ||
        (needK && (!kCal.defined() || kCal.dim() < 3)))
        fail("channel calibration needs queries [..., Hq, N, D] and keys [..., Hkv, N, D]");
    for (const at::Tensor& t : {qCal, kCal})
        if (t.defined() && !at::isfinite(t).all().item<bool>())
            throw NonFiniteInputError("the calibration tensors have non-finite entries");
    const at::Tensor& ref = needK ? kCal : qCal;
    if (ref.numel() / (ref.size(-3) * std::max<int64_t>(1, ref.size(-1))) < 2)
        fail("channel calibration needs at least 2 calibration tokens");
    const at::Tensor q = qCal.defined() ? qCal.to(at::kDouble) : at::Tensor();
    const at::Tensor k = kCal.defined() ? kCal.to(at::kDouble) : at::Tensor();
    at::Tensor score;
    if (mode == ChannelMode::Q) {
        const int64_t Hq = q.size(-3), N = q.size(-2), D = q.size(-1);
        score = q.abs().reshape({-1, Hq, N, D}).mean(at::IntArrayRef{0, 2});
    } else {
        const int64_t Hkv = k.size(-3), N = k.size(-2), D = k.size(-1);
        const at::Tensor kf = k.reshape({-1, Hkv, N, D});
        if (!q.defined() || q.size(-3) % Hkv != 0 || q.size(-2) != N || q.size(-1) != D ||
            q.numel() / (q.size(-3) * N * D) != kf.size(0))
            fail("the calibration queries and keys do not match (same tokens, Hq a multiple of "
                 "Hkv)");
        const int64_t g = q.size(-3) / Hkv;
        if (mode == ChannelMode::K) {
            score = kf.abs().mean(at::IntArrayRef{0, 2}).repeat_interleave(g, 0);
        } else { // qk: each token's query with its own key
            const at::Tensor qf = q.reshape({-1, Hkv, g, N, D});
            score = (qf * kf.unsqueeze(2)).abs().mean(at::IntArrayRef{0, 3}).reshape({Hkv * g, D});
        }
    }
    return {rankOrder(score), score};
}

} // namespace sparqlab::attention

SPARQLAB_METHOD(double_sparsity) {
    return {.info = {.id = Method::DoubleSparsity,
                     .name = "double-sparsity",
                     .label = "Double Sparsity",
                     .summary = "scores from r calibrated channels per head (Yang et al. 2024)",
                     .spec = "METHODS.md §5",
                     .params = {Param::R, Param::K, Param::Local, Param::Gqa, Param::Channels},
                     .transfer = transfer::lowRank,
                     .transferFormula = "S·r + 2·k·d + 2·d",
                     .evalGrid = "r=8,16,32,64 k=128 local=k/4"},
            .run = detail::runDoubleSparsity,
            .calibrator = &detail::kDsCalibrator,
            .decode = &detail::dsDecodeKernel(),
            .stepOne = detail::dsStepOne};
}
