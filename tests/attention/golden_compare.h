#pragma once
// What the golden tests of SPARQ.md and METHODS.md, METHODS2.md and METHODS3.md share: every
// golden file of a kind (the shown one and any kept-back file beside it), a case's inputs, index
// sets compared as sets with the specs' near-tie rule, tolerant comparisons where a mask allows
// them, the parameter sets of a method.

#include "test_support.h"

#include "attention/attention.h"
#include "capture/h5.h"

#include <ATen/ATen.h>
#include <QtTest>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

namespace sparqlab::test {

/// Every golden file of a spec (refs/`dir`/`stem`*.h5: the one shown and any kept back beside it,
/// or in its place) into `files`; none: says what is missing (`shown`), and ends the run. Fails
/// where they hold no case.
inline void openGoldenFiles(std::vector<std::shared_ptr<h5::File>>& files, const QString& dir,
                            const QString& stem, const QString& shown) {
    const QStringList found = goldenFiles(dir, stem);
    if (found.isEmpty())
        requireReference(shown);
    size_t cases = 0;
    for (const QString& f : found) {
        files.push_back(std::make_shared<h5::File>(h5::File::openRead(f.toStdString())));
        cases += files.back()->root().group("cases").children().size();
    }
    QVERIFY2(cases > 0,
             qPrintable(QStringLiteral("the golden files %1/%2*.h5 hold no case").arg(dir, stem)));
}

/// What every golden case holds, in the dtype under test: its group, q, K, V and the valid
/// positions, the scale of y's tolerance, and whether its exact ties follow the tie rule.
struct GoldenInputs {
    std::string name;
    std::unique_ptr<h5::Group> group;
    at::Tensor q, k, v, valid;
    at::ScalarType dtype = at::kDouble;
    double vScale = 1;      // max(1, max|V| over valid positions)
    bool dyadic = false;    // a ties case (tiesCase): its exact ties follow the tie rule
    bool exactTies = false; // a ties case whose ties stay exact in this dtype (exactScale)
    QString what;           // "name f32" or "name f64", for messages
    bool float64() const { return dtype == at::kDouble; }
    /// cases/`name`/inputs of `file` (the rest of its inputs are the caller's: in.group("inputs")).
    void load(const h5::File& file, const std::string& caseName, at::ScalarType type);
};

/// The rows of a golden test: every case of every file, in float32 and float64 (columns
/// file, caseName, dtype).
inline void addGoldenCaseRows(const std::vector<std::shared_ptr<h5::File>>& files) {
    QTest::addColumn<int>("file");
    QTest::addColumn<QString>("caseName");
    QTest::addColumn<int>("dtype");
    for (size_t f = 0; f < files.size(); ++f)
        for (const std::string& n : files[f]->root().group("cases").children())
            for (const auto dt : {at::kFloat, at::kDouble}) {
                const std::string row =
                    std::to_string(f) + "/" + n + (dt == at::kDouble ? "/f64" : "/f32");
                QTest::newRow(row.c_str())
                    << static_cast<int>(f) << QString::fromStdString(n) << int(dt);
            }
}

/// A row of indices, −1 padding dropped, sorted.
inline std::vector<int64_t> asSet(const at::Tensor& row) {
    std::vector<int64_t> s;
    for (int64_t x : toVector(row))
        if (x >= 0)
            s.push_back(x);
    std::sort(s.begin(), s.end());
    return s;
}

/// Empty if |got − want| ≤ atol + rtol·|want| where `ok` (broadcast from the leading axes) is
/// true and `want` is finite; infinite entries must be equal, and NaN where `want` is NaN.
inline QString closeOn(const at::Tensor& got, const at::Tensor& want, const at::Tensor& ok,
                       double atol, double rtol, const QString& what) {
    if (!got.defined())
        return what + QStringLiteral(": not computed");
    if (got.sizes() != want.sizes())
        return what + QStringLiteral(": shape differs");
    at::Tensor mask = ok;
    while (mask.dim() < want.dim())
        mask = mask.unsqueeze(-1);
    mask = mask.expand_as(want);
    const at::Tensor w = want.to(at::kDouble), g = got.to(at::kDouble);
    const at::Tensor infinite = at::isinf(w).logical_and(mask);
    if (!g.masked_select(infinite).eq(w.masked_select(infinite)).all().item<bool>())
        return what + QStringLiteral(": an infinite entry differs");
    const at::Tensor undefinedThere = at::isnan(w).logical_and(mask);
    if (!at::isnan(g.masked_select(undefinedThere)).all().item<bool>())
        return what + QStringLiteral(": a value where the reference has none (NaN)");
    const at::Tensor use = mask.logical_and(at::isfinite(w));
    return compareClose(at::where(use, g, w), w, atol, rtol, what);
}

/// Index sets [B, H, W] per (b, h): equal, or (where 0 < margin_rel < nearTie, a near-tie that
/// may flip) skipped; an exact tie (margin_rel = 0) must match. Returns the entries whose
/// dependent values are comparable, or an undefined tensor with `error` set.
inline at::Tensor compareSets(const at::Tensor& got, const at::Tensor& want,
                              const at::Tensor& marginRel, double nearTie, const QString& what,
                              QString& error) {
    const int64_t B = want.size(0), H = want.size(1);
    at::Tensor ok = at::ones({B, H}, at::kBool);
    if (!got.defined()) {
        error = what + QStringLiteral(": not computed");
        return {};
    }
    for (int64_t b = 0; b < B; ++b)
        for (int64_t h = 0; h < H; ++h) {
            if (asSet(got[b][h]) == asSet(want[b][h]))
                continue;
            const double mr = marginRel.defined() ? marginRel[b][h].item<double>() : INFINITY;
            if (mr > 0 && mr < nearTie) {
                ok[b][h] = false;
                continue;
            }
            error = QStringLiteral("%1: index set differs at b=%2 h=%3 (margin_rel %4)")
                        .arg(what)
                        .arg(b)
                        .arg(h)
                        .arg(mr);
            return {};
        }
    return ok;
}

/// Index lists [B, H, W] (any widths, −1 padded) equal as sets where `ok` [B, H]; empty if so.
inline QString sameLists(const at::Tensor& got, const at::Tensor& want, const at::Tensor& ok,
                         const QString& what) {
    if (!got.defined())
        return what + QStringLiteral(": not computed");
    for (int64_t b = 0; b < want.size(0); ++b)
        for (int64_t h = 0; h < want.size(1); ++h)
            if (ok[b][h].item<bool>() && asSet(got[b][h]) != asSet(want[b][h]))
                return QStringLiteral("%1 differs at b=%2 h=%3").arg(what).arg(b).arg(h);
    return {};
}

/// The value of a stored enumeration (its dataset's `codes` attribute).
inline std::string codeName(const h5::Group& params, const std::string& name, int64_t value) {
    const QStringList codes =
        QString::fromStdString(params.datasetAttrString(name, "codes")).split(QLatin1Char(','));
    return codes.value(static_cast<int>(value)).toStdString();
}

/// max(1, max |V|) over the valid positions: the scale of y's tolerance.
inline double valueScale(const at::Tensor& v, const at::Tensor& valid) {
    const at::Tensor vm = valid.view({valid.size(0), 1, valid.size(1), 1});
    const at::Tensor a =
        at::where(vm, v.to(at::kDouble).abs(), at::scalar_tensor(0.0, at::kDouble));
    return std::max(1.0, a.max().item<double>());
}

inline void GoldenInputs::load(const h5::File& file, const std::string& caseName,
                               at::ScalarType type) {
    name = caseName;
    dtype = type;
    group = std::make_unique<h5::Group>(file.root().group("cases/" + name));
    const h5::Group in = group->group("inputs");
    q = in.read("q").to(dtype);
    k = in.read("K").to(dtype);
    v = in.read("V").to(dtype);
    valid = in.read("valid").to(at::kBool);
    vScale = valueScale(v, valid);
    dyadic = tiesCase(name, group->hasAttribute("spec_json") ? group->attrString("spec_json") : "");
    exactTies = dyadic && (float64() || exactScale(q.size(-1)));
    what = QString::fromStdString(name) + (float64() ? " f64" : " f32");
}

} // namespace sparqlab::test

/// Fails the calling test with `e` unless it is empty.
#define GOLDEN_CHECK(e)                                                                            \
    do {                                                                                           \
        const QString _m = (e);                                                                    \
        QVERIFY2(_m.isEmpty(), qPrintable(_m));                                                    \
    } while (0)
