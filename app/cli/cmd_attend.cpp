// sparqlab-cli attend (CONTRACTS.md §2, result file §3b).

#include "commands.h"

#include "analysis/attend_run.h"

#include <cstdio>

namespace sparqlab::cli {

int runAttend(const std::vector<std::string>& argv) {
    std::set<std::string> valued = kAttnValued;
    valued.insert({"capture", "out"});
    std::set<std::string> flags = kAttnFlags;
    flags.insert("json");
    const Args args(argv, valued, flags);
    if (!args.positional().empty())
        throw UsageError("unexpected argument '" + args.positional().front() + "'");
    analysis::AttendRunOptions o;
    o.capturePath = args.required("capture");
    o.outPath = args.required("out");
    if (!args.has("method"))
        throw UsageError("missing required option --method");
    o.config = attentionConfig(args);
    ProgressBar bar("attend");
    o.progress = [&bar](int64_t done, int64_t total) { bar.update(done, total); };
    const analysis::AttendSummary s = analysis::runAttend(o);
    if (args.has("json")) {
        std::printf("%s\n", analysis::attendSummaryJson(s, o.config).c_str());
    } else {
        std::printf("%s: %lld examples, %lld queries per head; mean relative error %.4g, "
                    "top-k agreement %.4f, compression ratio %.4f; wrote %s\n",
                    attention::methodName(o.config.method).c_str(),
                    static_cast<long long>(s.examples), static_cast<long long>(s.queries),
                    s.relError, s.agreement, s.compressionRatio, o.outPath.c_str());
    }
    return 0;
}

} // namespace sparqlab::cli
