#include "calibrate_run.h"

#include "attention/method_spec.h"

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
    const att::CalibratorSpec* spec = att::methodSpec(method).calibrator;
    if (!spec)
        throw att::AttentionError("--method: " + att::methodName(method) + " has no calibration (" +
                                  att::calibratedMethodNames() + ")");
    auto cal = std::make_shared<att::Calibration>();
    cal->method = method;
    att::CalibrationOptions opts;
    opts.mode = mode;
    opts.center = center;
    std::vector<std::vector<at::Tensor>> parts(spec->datasets.size());
    for (int64_t l = 0; l < L; ++l) {
        const auto [q, k] = tokens(l);
        const std::vector<at::Tensor> t = spec->layer(q, k, opts);
        for (size_t i = 0; i < t.size(); ++i)
            parts[i].push_back(t[i]);
    }
    for (size_t i = 0; i < parts.size(); ++i)
        cal->tensors[spec->datasets[i].name] = at::stack(parts[i]);
    return cal;
}

std::shared_ptr<att::Calibration> calibrateCapture(const CalibrateOptions& o,
                                                   capture::CalibrationInfo* infoOut) {
    const capture::CaptureReader reader(o.capturePath);
    const model::CaptureInfo& info = reader.info();
    const int64_t L = info.nLayers;
    const att::CalibratorSpec* spec = att::methodSpec(o.method).calibrator;
    const bool pairs = spec && spec->needsQueries;
    if (pairs)
        for (int64_t e = 0; e < reader.count(); ++e)
            if (reader.queryCount(e) != reader.seqLen(e))
                throw att::AttentionError(o.capturePath + ": example " + reader.name(e) + ": " +
                                          att::methodName(o.method) +
                                          " calibration pairs every position's query with its "
                                          "key (a capture made with --all-queries)");
    int64_t tokens = 0;
    for (int64_t e = 0; e < reader.count(); ++e)
        tokens += reader.seqLen(e);
    if (tokens < 2)
        throw att::AttentionError(o.capturePath +
                                  ": calibration needs at least 2 captured positions");
    auto layerTokens = [&](int64_t l) {
        o.job.check();
        std::vector<at::Tensor> qs, ks;
        for (int64_t e = 0; e < reader.count(); ++e) {
            const model::CaptureExample ex = reader.readLayer(e, l);
            if (pairs && !everyPosition(ex.qPositions, ex.k.size(1)))
                throw att::AttentionError(o.capturePath + ": example " + reader.name(e) +
                                          ": the captured queries are not every position's");
            ks.push_back(ex.k);
            if (pairs)
                qs.push_back(ex.q);
        }
        o.job.step(l + 1, L, "layer " + std::to_string(l));
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

std::shared_ptr<att::Calibration> calibrateExample(const model::CaptureExample& e,
                                                   att::Method method, att::ChannelMode mode) {
    const int64_t S = e.k.size(2);
    const att::CalibratorSpec* spec = att::methodSpec(method).calibrator;
    const bool pairs = spec && spec->needsQueries;
    if (pairs && !everyPosition(e.qPositions, S))
        throw att::AttentionError(att::methodName(method) +
                                  " calibration needs every position's query");
    if (S < 2)
        throw att::AttentionError("calibration needs at least 2 positions");
    auto cal = calibrateLayers(
        method, e.k.size(0),
        [&](int64_t l) { return std::make_pair(pairs ? e.q[l] : at::Tensor(), e.k[l]); }, mode);
    cal->source = "the prompt itself";
    return cal;
}

std::shared_ptr<att::Calibration>
calibrateOnTokens(model::Model& model, const std::vector<int64_t>& ids, att::Method method) {
    const att::CalibratorSpec* spec = att::methodSpec(method).calibrator;
    return calibrateExample(model.capture(ids, /*allQueries=*/spec && spec->needsQueries), method);
}

std::string calibrationOption(att::Method method) {
    const att::CalibratorSpec* spec = att::methodSpec(method).calibrator;
    return spec ? std::string("--") + spec->option : std::string();
}

} // namespace sparqlab::analysis
