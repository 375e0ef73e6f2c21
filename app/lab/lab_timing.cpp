// The lab's timing configuration (lab_timing.h).

#include "app/lab/lab_timing.h"

#include <algorithm>

namespace sparqlab::app {

attention::DecodeBenchConfig labBench(const model::CaptureInfo& info, int64_t S,
                                      const std::string& device) {
    return attention::modelShapeBench(info.nHeads, info.nKvHeads, info.headDim, S, device, 5);
}

std::vector<attention::AttentionConfig> engineMethods(const attention::AttentionConfig& c,
                                                      int64_t r, int64_t k) {
    std::vector<attention::AttentionConfig> out;
    for (const attention::MethodInfo& m : attention::methods()) {
        if (!m.fastDecode || m.id == attention::Method::Dense)
            continue;
        attention::AttentionConfig mc = c;
        mc.method = m.id;
        // The lab's GQA rule where the method takes it, else the method's own default.
        const std::vector<attention::GroupSelect> rules = attention::gqaRules(m.id);
        if (std::find(rules.begin(), rules.end(), mc.gqa) == rules.end())
            mc.gqa = rules.front();
        mc.r = r;
        if (mc.k != attention::AttentionConfig::kNoCap ||
            !attention::takes(m.id, attention::Param::P))
            mc.k = k;
        if (mc.calibration && mc.calibration->method != m.id)
            mc.calibration = nullptr;
        mc.softcap = 0;
        mc.slidingWindow = 0;
        out.push_back(mc);
    }
    return out;
}

std::vector<attention::AttentionConfig> curveMethods(const attention::AttentionConfig& c, int64_t r,
                                                     int64_t k,
                                                     std::optional<attention::Method> second,
                                                     bool every) {
    std::vector<attention::AttentionConfig> all = engineMethods(c, r, k);
    if (every)
        return all;
    const bool ownRuns =
        std::any_of(all.begin(), all.end(), [&](const auto& m) { return m.method == c.method; });
    const attention::Method first = ownRuns ? c.method : attention::Method::Sparq;
    std::vector<attention::AttentionConfig> out;
    for (const attention::AttentionConfig& m : all)
        if (m.method == first || (second && m.method == *second))
            out.push_back(m);
    return out;
}

std::vector<std::string> timingDevices() {
    std::vector<std::string> devices{"cpu"};
    if (attention::cudaAvailable())
        devices.push_back("cuda");
    return devices;
}

} // namespace sparqlab::app
