#include "calibrate_run.h"

#include <ATen/ATen.h>

#include <functional>

namespace sparqlab::analysis {

namespace att = sparqlab::attention;

namespace {

bool everyPosition(const at::Tensor& qPositions, int64_t S) {
    return qPositions.numel() == S && qPositions.equal(at::arange(S, qPositions.options()));
}

} // namespace

std::shared_ptr<att::Calibration> calibrateLayers(att::Method method, int64_t L,
                                                  const CalibrationTokens& tokens,
                                                  att::ChannelMode mode, bool center) {
    if (!att::methodInfo(method).calibrated)
        throw att::AttentionError("--method: " + att::methodName(method) +
                                  " has no calibration (loki, double-sparsity)");
    auto cal = std::make_shared<att::Calibration>();
    cal->method = method;
    std::vector<at::Tensor> parts, values;
    for (int64_t l = 0; l < L; ++l) {
        const auto [q, k] = tokens(l);
        if (method == att::Method::Loki) {
            const att::LokiCalibration r = att::lokiCalibrate(k.unsqueeze(0), center);
            parts.push_back(r.basis.to(at::kFloat));
            values.push_back(r.eigenvalues.to(at::kFloat));
        } else {
            parts.push_back(att::dsCalibrate(q.unsqueeze(0), k.unsqueeze(0), mode).channels);
        }
    }
    if (method == att::Method::Loki) {
        cal->basis = at::stack(parts);
        cal->eigenvalues = at::stack(values);
    } else {
        cal->channels = at::stack(parts);
    }
    return cal;
}

std::shared_ptr<att::Calibration> calibrateCapture(const CalibrateOptions& o,
                                                   capture::CalibrationInfo* infoOut) {
    const capture::CaptureReader reader(o.capturePath);
    const capture::CaptureInfo& info = reader.info();
    const int64_t L = info.nLayers;
    const bool pairs = o.method == att::Method::DoubleSparsity;
    if (pairs)
        for (int64_t e = 0; e < reader.count(); ++e)
            if (reader.queryCount(e) != reader.seqLen(e))
                throw att::AttentionError(o.capturePath + ": example " + reader.name(e) +
                                          ": double-sparsity calibration pairs every position's "
                                          "query with its key (a capture made with "
                                          "--all-queries)");
    int64_t tokens = 0;
    for (int64_t e = 0; e < reader.count(); ++e)
        tokens += reader.seqLen(e);
    if (tokens < 2)
        throw att::AttentionError(o.capturePath +
                                  ": calibration needs at least 2 captured positions");
    auto layerTokens = [&](int64_t l) {
        if (o.cancel && o.cancel->load())
            throw Cancelled();
        std::vector<at::Tensor> qs, ks;
        for (int64_t e = 0; e < reader.count(); ++e) {
            const capture::CaptureExample ex = reader.readLayer(e, l);
            if (pairs && !everyPosition(ex.qPositions, ex.k.size(1)))
                throw att::AttentionError(o.capturePath + ": example " + reader.name(e) +
                                          ": the captured queries are not every position's");
            ks.push_back(ex.k);
            if (pairs)
                qs.push_back(ex.q);
        }
        if (o.progress)
            o.progress(l + 1, L);
        return std::make_pair(pairs ? at::cat(qs, 1) : at::Tensor(), at::cat(ks, 1));
    };
    std::shared_ptr<att::Calibration> cal;
    try {
        cal = calibrateLayers(o.method, L, layerTokens, o.mode, o.center);
    } catch (const att::AttentionError& err) {
        throw att::AttentionError(o.capturePath + ": " + err.what());
    }
    cal->model = info.model;
    cal->source = o.capturePath;
    if (infoOut)
        *infoOut = {info.model, info.nLayers, info.nHeads, info.nKvHeads, info.headDim};
    return cal;
}

std::shared_ptr<att::Calibration> calibrateExample(const capture::CaptureExample& e,
                                                   att::Method method, att::ChannelMode mode) {
    const int64_t S = e.k.size(2);
    const bool pairs = method == att::Method::DoubleSparsity;
    if (pairs && !everyPosition(e.qPositions, S))
        throw att::AttentionError("double-sparsity calibration needs every position's query");
    if (S < 2)
        throw att::AttentionError("calibration needs at least 2 positions");
    auto cal = calibrateLayers(
        method, e.k.size(0),
        [&](int64_t l) { return std::make_pair(pairs ? e.q[l] : at::Tensor(), e.k[l]); }, mode);
    cal->source = "the prompt itself";
    return cal;
}

} // namespace sparqlab::analysis
