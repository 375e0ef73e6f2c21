// sparqlab-cli session: show a lab session, or make one from a capture (what File → Save
// Session writes, for scripts that prepare a lecture's demos).

#include "commands.h"

#include "analysis/attend_run.h"
#include "analysis/session.h"

#include <nlohmann/json.hpp>

#include <cstdio>

namespace sparqlab::cli {

namespace att = sparqlab::attention;

int runSession(const std::vector<std::string>& argv) {
    std::set<std::string> valued = kAttnValued;
    valued.insert(
        {"capture", "out", "layer", "head", "step", "prompt-positions", "query-position"});
    const Args a(argv, valued, kAttnFlags);
    if (a.has("capture")) { // make one
        if (!a.positional().empty())
            throw UsageError("unexpected argument '" + a.positional().front() + "'");
        analysis::Session s = analysis::readSession(a.required("capture")); // a plain capture
        const std::string out = a.required("out");
        s.config = attentionConfig(a);
        if (s.config.calibration)
            throw UsageError("a session keeps no calibration file (the lab calibrates on the "
                             "prompt): leave out --basis and --channels");
        s.layer = a.integer("layer").value_or(0);
        s.head = a.integer("head").value_or(0);
        // Named as the options they came from (the file's own check names the session file).
        const auto inRange = [&](const char* option, int64_t v, int64_t n, const char* what) {
            if (v < 0 || v >= n)
                throw UsageError("--" + std::string(option) + " " + std::to_string(v) +
                                 " is outside 0.." + std::to_string(n - 1) + " (" +
                                 a.required("capture") + " has " + std::to_string(n) + " " + what +
                                 ")");
        };
        inRange("layer", s.layer, s.capture->layers(), "layers");
        inRange("head", s.head, s.capture->heads(), "query heads");
        if (const auto p = a.integer("prompt-positions"))
            s.capture->promptPositions = *p;
        s.step = a.integer("step").value_or(-1);
        s.queryPosition = a.integer("query-position").value_or(-1);
        analysis::writeSession(out, s); // checked first, then written under a temporary name
        std::printf("wrote %s (%lld positions, %s)\n", out.c_str(),
                    static_cast<long long>(s.capture->positions()),
                    att::methodName(s.config.method).c_str());
        return 0;
    }
    if (a.positional().size() != 1)
        throw UsageError("give one session file (or --capture cap.h5 --out session.h5)");
    for (const auto* options : std::initializer_list<const std::set<std::string>*>{
             &valued, &kAttnFlags}) // (they were ignored)
        for (const std::string& o : *options)
            if (a.has(o))
                throw UsageError("--" + o +
                                 " goes with --capture: a session FILE is shown as saved");
    const analysis::Session s = analysis::readSession(a.positional().front());
    const analysis::LabCapture& c = *s.capture;
    nlohmann::ordered_json j{{"model", s.model},
                             {"architecture", c.info.architecture},
                             {"n_layers", c.layers()},
                             {"n_heads", c.heads()},
                             {"n_kv_heads", c.kvHeads()},
                             {"head_dim", c.headDim()},
                             {"positions", c.positions()},
                             {"queries", c.history()},
                             {"prompt_positions", c.promptPositions},
                             {"steps", c.steps()},
                             {"step", s.step},
                             {"query_position", s.queryPosition},
                             {"prompt", s.prompt},
                             {"generated", s.generated},
                             {"method", att::methodName(s.config.method)},
                             {"params", nlohmann::ordered_json::parse(analysis::paramsJson(
                                            s.config, /*sparqV1=*/false, /*fileNames=*/true))},
                             {"layer", s.layer},
                             {"head", s.head},
                             {"view", s.view},
                             {"measure", s.measure},
                             {"compare_method", att::methodName(s.compareMethod)}};
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
}

} // namespace sparqlab::cli
