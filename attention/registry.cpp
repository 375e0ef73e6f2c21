// The method registry: every unit of attention/methods/ (method_registry.inc is generated from
// that folder's listing by attention/CMakeLists.txt), checked once and ordered as the Method enum.

#include "base/unit_table.h"
#include "method_kit.h"
#include "method_spec.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <utility>

#include "method_registry.inc" // each unit's function and kAll, the list of them

namespace sparqlab::attention {

namespace {

[[noreturn]] void broken(const std::string& what) {
    throw std::logic_error("the method registry: " + what);
}

/// The table's derived columns filled in, in enum order; a method registered twice or missing
/// is a programming error, found at the first use.
void finish(std::vector<MethodSpec>& all) {
    for (MethodSpec& s : all) {
        MethodInfo& m = s.info;
        if (!m.name || !m.label || !m.summary || !m.spec || !m.transfer || !m.transferFormula ||
            !s.run)
            broken(std::string("unit '") + (m.name ? m.name : "?") + "' leaves a field unset");
        // The columns that follow from the hooks (no positional flags to keep in step).
        m.stateful = s.causal != nullptr;
        m.needsHistory = s.causal != nullptr;
        m.calibrated = s.calibrator != nullptr;
        m.fastDecode = s.decode != nullptr;
        m.positionBound =
            s.causal != nullptr || std::any_of(s.inputs.begin(), s.inputs.end(),
                                               [](const MethodInput& i) { return i.positions; });
    }
    std::sort(all.begin(), all.end(), [](const MethodSpec& a, const MethodSpec& b) {
        return static_cast<int>(a.info.id) < static_cast<int>(b.info.id);
    });
    for (size_t i = 0; i < all.size(); ++i)
        if (static_cast<size_t>(all[i].info.id) != i)
            broken("method " + std::to_string(i) + " of the enum has " +
                   (static_cast<size_t>(all[i].info.id) > i ? "no unit" : "two units"));
}

} // namespace

void setPositionScores(StepOneView& v, const at::Tensor& scores, const at::Tensor& selected) {
    const at::Tensor z = scores.to(at::kCPU, at::kDouble).contiguous(); // (a GPU's result too)
    const at::Tensor sel = selected.to(at::kCPU, at::kBool).contiguous();
    const double* zp = z.data_ptr<double>();
    const bool* sp = sel.data_ptr<bool>();
    for (int64_t j = 0; j < z.numel(); ++j) {
        const bool ranked = std::isfinite(zp[j]);
        v.values.push_back(ranked ? zp[j] : 0.0);
        v.used.push_back(ranked && sp[j] ? 1 : 0);
    }
}

namespace detail {
StepOneView positionScoresView(std::string caption, std::string yLabel, const at::Tensor& scores,
                               const at::Tensor& selected) {
    StepOneView v;
    v.caption = std::move(caption);
    v.xLabel = "position";
    v.yLabel = std::move(yLabel);
    if (scores.defined() && selected.defined())
        setPositionScores(v, scores, selected);
    return v;
}
} // namespace detail

std::vector<std::string> fitDefaults(AttentionConfig& c, int64_t S, const ModelShape& shape) {
    const FitFn fit = methodSpec(c.method).fit;
    return fit && S > 0 ? fit(c, S, shape) : std::vector<std::string>{};
}

at::Tensor transferOutput(const MethodSpec& s, const AttentionResult& r) {
    for (const MethodOutput& o : s.outputs)
        if (o.transfer)
            return r.output(o.name);
    return {};
}

const std::vector<const MethodSpec*>& methodSpecs() {
    return base::unitTable(units::kAll, finish);
}

const MethodSpec& methodSpec(Method m) {
    const std::vector<const MethodSpec*>& all = methodSpecs();
    const size_t i = static_cast<size_t>(m);
    if (i >= all.size())
        broken("a method without a unit");
    return *all[i];
}

const std::vector<MethodInfo>& methods() {
    static const std::vector<MethodInfo> all = [] {
        std::vector<MethodInfo> v;
        for (const MethodSpec* s : methodSpecs())
            v.push_back(s->info);
        return v;
    }();
    return all;
}

const MethodInfo& methodInfo(Method m) {
    return methodSpec(m).info;
}

std::string positionFreeProblem(Method m) {
    const MethodSpec& s = methodSpec(m);
    if (!s.info.positionBound)
        return {};
    std::string needs;
    for (const MethodInput& i : s.inputs)
        if (i.positions)
            needs += std::string(needs.empty() ? "" : ", ") + i.name;
    return std::string(s.info.name) + " needs the keys to be positions (" +
           (s.causal ? "it keeps state from step to step" : "it reads " + needs) +
           "): DeepSeek-V4's compressed entries are not";
}

} // namespace sparqlab::attention
