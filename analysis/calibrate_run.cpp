#include "calibrate_run.h"

#include <ATen/ATen.h>

namespace sparqlab::analysis {

namespace att = sparqlab::attention;

namespace {

/// One layer's calibration from keys [Hkv, N, D] and queries [Hq, N, D] of the same tokens.
void calibrateLayer(att::Calibration& cal, int64_t layer, const at::Tensor& q, const at::Tensor& k,
                    att::ChannelMode mode, bool center) {
    if (cal.method == att::Method::Loki) {
        const att::LokiCalibration r = att::lokiCalibrate(k.unsqueeze(0), center);
        cal.basis[layer].copy_(r.basis);
        cal.eigenvalues[layer].copy_(r.eigenvalues);
    } else {
        cal.channels[layer].copy_(att::dsCalibrate(q.unsqueeze(0), k.unsqueeze(0), mode).channels);
    }
}

std::shared_ptr<att::Calibration> emptyCalibration(att::Method method, int64_t L, int64_t Hq,
                                                   int64_t Hkv, int64_t D) {
    if (!att::methodInfo(method).calibrated)
        throw att::AttentionError("--method: " + att::methodName(method) +
                                  " has no calibration (loki, double-sparsity)");
    auto cal = std::make_shared<att::Calibration>();
    cal->method = method;
    if (method == att::Method::Loki) {
        cal->basis = at::zeros({L, Hkv, D, D}, at::kFloat);
        cal->eigenvalues = at::zeros({L, Hkv, D}, at::kFloat);
    } else {
        cal->channels = at::zeros({L, Hq, D}, at::kLong);
    }
    return cal;
}

bool everyPosition(const at::Tensor& qPositions, int64_t S) {
    return qPositions.numel() == S && qPositions.equal(at::arange(S, qPositions.options()));
}

} // namespace

std::shared_ptr<att::Calibration> calibrateCapture(const CalibrateOptions& o,
                                                   capture::CalibrationInfo* infoOut) {
    const capture::CaptureReader reader(o.capturePath);
    const capture::CaptureInfo& info = reader.info();
    const int64_t L = info.nLayers;
    auto cal = emptyCalibration(o.method, L, info.nHeads, info.nKvHeads, info.headDim);
    cal->model = info.model;
    cal->source = o.capturePath;
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
    for (int64_t l = 0; l < L; ++l) {
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
        try {
            calibrateLayer(*cal, l, pairs ? at::cat(qs, 1) : at::Tensor(), at::cat(ks, 1), o.mode,
                           o.center);
        } catch (const att::AttentionError& err) {
            throw att::AttentionError(o.capturePath + ": layer " + std::to_string(l) + ": " +
                                      err.what());
        }
        if (o.progress)
            o.progress(l + 1, L);
    }
    if (infoOut)
        *infoOut = {info.model, info.nLayers, info.nHeads, info.nKvHeads, info.headDim};
    return cal;
}

std::shared_ptr<att::Calibration> calibrateExample(const capture::CaptureExample& e,
                                                   att::Method method, att::ChannelMode mode) {
    const int64_t L = e.k.size(0), Hkv = e.k.size(1), S = e.k.size(2), D = e.k.size(3);
    const int64_t Hq = e.q.size(1);
    auto cal = emptyCalibration(method, L, Hq, Hkv, D);
    cal->source = "the prompt itself";
    const bool pairs = method == att::Method::DoubleSparsity;
    if (pairs && !everyPosition(e.qPositions, S))
        throw att::AttentionError("double-sparsity calibration needs every position's query");
    if (S < 2)
        throw att::AttentionError("calibration needs at least 2 positions");
    for (int64_t l = 0; l < L; ++l)
        calibrateLayer(*cal, l, pairs ? e.q[l] : at::Tensor(), e.k[l], mode, /*center=*/true);
    return cal;
}

} // namespace sparqlab::analysis
