#include "calibration_file.h"

#include "capture/h5.h"

#include <ATen/ATen.h>

namespace sparqlab::capture {

namespace att = sparqlab::attention;

void writeCalibration(const std::string& path, const att::Calibration& cal,
                      const CalibrationInfo& info) {
    h5::File f = h5::File::create(path);
    const h5::Group root = f.root();
    root.setAttr("format", kCalibrationFormat);
    root.setAttr("format_version", kCalibrationFormatVersion);
    root.setAttr("method", att::methodName(cal.method));
    root.setAttr("model", info.model);
    root.setAttr("n_layers", info.nLayers);
    root.setAttr("n_heads", info.nHeads);
    root.setAttr("n_kv_heads", info.nKvHeads);
    root.setAttr("head_dim", info.headDim);
    if (cal.method == att::Method::Loki) {
        root.write("basis", cal.basis.to(at::kFloat).contiguous());
        root.write("eigenvalues", cal.eigenvalues.to(at::kFloat).contiguous());
    } else {
        root.write("channels", cal.channels.to(at::kLong).contiguous());
    }
    f.commit();
}

std::shared_ptr<att::Calibration> readCalibration(const std::string& path, CalibrationInfo* out) {
    const h5::File f = h5::File::openRead(path);
    const h5::Group root = f.root();
    auto fail = [&](const std::string& what) -> void { throw h5::H5Error(path + ": " + what); };
    if (!root.hasAttribute("format") || root.attrString("format") != kCalibrationFormat)
        fail("not a SparQ Lab calibration file (format is not '" + std::string(kCalibrationFormat) +
             "'; make one with sparqlab-cli calibrate)");
    if (!root.hasAttribute("format_version") ||
        root.attrInt("format_version") != kCalibrationFormatVersion)
        fail("unsupported calibration format_version (this SparQ Lab reads version " +
             std::to_string(kCalibrationFormatVersion) + ")");
    for (const char* a : {"method", "model", "n_layers", "n_heads", "n_kv_heads", "head_dim"})
        if (!root.hasAttribute(a))
            fail(std::string("attribute '") + a + "' is missing");
    CalibrationInfo info;
    info.model = root.attrString("model");
    info.nLayers = root.attrInt("n_layers");
    info.nHeads = root.attrInt("n_heads");
    info.nKvHeads = root.attrInt("n_kv_heads");
    info.headDim = root.attrInt("head_dim");
    constexpr int64_t kMax = int64_t{1} << 20; // layers, heads and dims a model can have
    if (info.nLayers < 1 || info.nHeads < 1 || info.nKvHeads < 1 || info.headDim < 1 ||
        info.nLayers > kMax || info.nHeads > kMax || info.headDim > kMax ||
        info.nHeads % info.nKvHeads != 0)
        fail("invalid shape attributes (n_layers, n_heads, n_kv_heads, head_dim)");
    auto cal = std::make_shared<att::Calibration>();
    cal->model = info.model;
    cal->source = path;
    const std::string method = root.attrString("method");
    const att::MethodInfo* m = att::findMethod(method);
    if (!m || !m->calibrated)
        fail("method '" + method + "' has no calibration (loki, double-sparsity)");
    cal->method = m->id;
    const int64_t L = info.nLayers, D = info.headDim;
    auto expect = [&](const char* name, std::vector<int64_t> shape) {
        if (!root.has(name))
            fail(std::string("dataset '") + name + "' is missing");
        if (root.shape(name) != shape) {
            std::string want;
            for (int64_t s : shape)
                want += (want.empty() ? "" : ", ") + std::to_string(s);
            fail(std::string("dataset '") + name + "' must be [" + want + "]");
        }
        return root.read(name);
    };
    if (cal->method == att::Method::Loki) {
        cal->basis = expect("basis", {L, info.nKvHeads, D, D}).to(at::kFloat);
        cal->eigenvalues = expect("eigenvalues", {L, info.nKvHeads, D}).to(at::kFloat);
        if (!at::isfinite(cal->basis).all().item<bool>() ||
            !at::isfinite(cal->eigenvalues).all().item<bool>())
            fail("the basis or eigenvalues hold NaN or infinite values");
    } else {
        if (!root.has("channels"))
            fail("dataset 'channels' is missing");
        const std::vector<int64_t> s = root.shape("channels");
        if (s.size() != 3 || s[0] != L || s[1] != info.nHeads || s[2] < 1 || s[2] > D)
            fail("dataset 'channels' must be [n_layers, n_heads, Dc] with 1 <= Dc <= head_dim");
        const at::Tensor c = root.read("channels");
        if (c.is_floating_point())
            fail("dataset 'channels' must hold integers");
        cal->channels = c.to(at::kLong);
        if (cal->channels.lt(0).any().item<bool>() || cal->channels.ge(D).any().item<bool>())
            fail("a channel index lies outside [0, head_dim)");
    }
    if (out)
        *out = info;
    return cal;
}

} // namespace sparqlab::capture
