#include "calibration_file.h"

#include "attention/method_spec.h"
#include "capture/h5.h"

#include <ATen/ATen.h>

namespace sparqlab::capture {

namespace att = sparqlab::attention;

void writeCalibration(const std::string& path, const att::Calibration& cal,
                      const CalibrationInfo& info) {
    h5::File f = h5::File::create(path);
    { // (the root group closed before the file is finished: h5::File::commit)
        const h5::Group root = f.root();
        root.setAttr("format", kCalibrationFormat);
        root.setAttr("format_version", kCalibrationFormatVersion);
        root.setAttr("method", att::methodName(cal.method));
        root.setAttr("model", info.model);
        root.setAttr("n_layers", info.nLayers);
        root.setAttr("n_heads", info.nHeads);
        root.setAttr("n_kv_heads", info.nKvHeads);
        root.setAttr("head_dim", info.headDim);
        // Every tensor of the method's calibrator, in the file's dtypes (CONTRACTS.md §6).
        const att::CalibratorSpec& spec = *att::methodSpec(cal.method).calibrator;
        for (const att::CalibrationDataset& d : spec.datasets) {
            const at::Tensor t = cal.tensor(d.name);
            if (!t.defined())
                throw h5::H5Error(path + ": the calibration holds no '" + d.name + "'");
            root.write(d.name, t.to(d.indices ? at::kLong : at::kFloat).contiguous());
        }
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
        fail("method '" + method + "' has no calibration (" + att::calibratedMethodNames() + ")");
    cal->method = m->id;
    const int64_t D = info.headDim;
    // Each dataset of the method's calibrator, its shape read off the spec's letters.
    for (const att::CalibrationDataset& d : att::methodSpec(m->id).calibrator->datasets) {
        const std::string name = d.name;
        if (!root.has(name))
            fail("dataset '" + name + "' is missing");
        const std::vector<int64_t> shape = root.shape(name);
        const std::string dims = d.shape;
        bool ok = shape.size() == dims.size();
        std::string want;
        for (size_t i = 0; i < dims.size(); ++i) {
            const char c = dims[i];
            const int64_t n = c == 'L'   ? info.nLayers
                              : c == 'H' ? info.nHeads
                              : c == 'K' ? info.nKvHeads
                                         : D;
            want += std::string(want.empty() ? "" : ", ") + (c == 'c' ? "Dc" : std::to_string(n));
            if (ok && (c == 'c' ? shape[i] < 1 || shape[i] > D : shape[i] != n))
                ok = false;
        }
        if (!ok)
            fail("dataset '" + name + "' must be [" + want + "]" +
                 (dims.find('c') != std::string::npos ? " with 1 <= Dc <= head_dim" : ""));
        const at::Tensor t = root.read(name);
        if (d.indices) {
            if (t.is_floating_point())
                fail("dataset '" + name + "' must hold integers");
            const at::Tensor idx = t.to(at::kLong);
            if (idx.lt(0).any().item<bool>() || idx.ge(D).any().item<bool>())
                fail("a channel index lies outside [0, head_dim)");
            cal->tensors[name] = idx;
        } else {
            const at::Tensor f = t.to(at::kFloat);
            if (!at::isfinite(f).all().item<bool>())
                fail("dataset '" + name + "' holds NaN or infinite values");
            cal->tensors[name] = f;
        }
    }
    if (out)
        *out = info;
    return cal;
}

} // namespace sparqlab::capture
