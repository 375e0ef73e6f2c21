// sparqlab-cli train-demo: the command line of the demo trainer (analysis/train_demo.h).

#include "commands.h"

#include "analysis/train_demo.h"

#include <nlohmann/json.hpp>

#include <cstdio>

namespace sparqlab::cli {

int runTrainDemo(const std::vector<std::string>& argv) {
    const Args a(argv,
                 {"data",
                  "out",
                  "state",
                  "steps",
                  "minutes",
                  "seed",
                  "batch",
                  "seq",
                  "vocab",
                  "lr",
                  "save-every",
                  "copy-fraction",
                  "copy-blocks",
                  "random-copy",
                  "context",
                  "init",
                  "warmup",
                  "induction-heads",
                  "prev-heads",
                  "aux-weight",
                  "aux-hold",
                  "aux-until",
                  "random-ids-start",
                  "random-ids-steps",
                  "eval-every",
                  "retokenize",
                  "copy-loss-weight",
                  "copy-gap",
                  "probes"},
                 {"resume", "exempt-norms"});
    if (!a.positional().empty())
        throw UsageError("unexpected argument '" + a.positional().front() + "'");
    analysis::TrainDemoOptions o;
    o.data = a.required("data");
    auto text = [&](const char* option, std::string& field) {
        if (const auto v = a.get(option))
            field = *v;
    };
    auto whole = [&](const char* option, auto& field) {
        if (const auto v = a.integer(option))
            field = static_cast<std::remove_reference_t<decltype(field)>>(*v);
    };
    auto number = [&](const char* option, double& field) {
        if (const auto v = a.number(option))
            field = *v;
    };
    text("out", o.out);
    text("state", o.state);
    whole("steps", o.steps);
    number("minutes", o.minutes);
    whole("seed", o.seed);
    whole("batch", o.batch);
    whole("seq", o.seq);
    whole("vocab", o.vocab);
    number("lr", o.lr);
    whole("save-every", o.saveEvery);
    number("copy-fraction", o.copyFraction);
    whole("copy-blocks", o.copyBlocks);
    number("random-copy", o.randomCopy);
    whole("context", o.context);
    whole("warmup", o.warmup);
    number("aux-weight", o.auxWeight);
    whole("aux-hold", o.auxHold);
    whole("aux-until", o.auxUntil);
    whole("random-ids-start", o.randomIdsStart);
    whole("random-ids-steps", o.randomIdsSteps);
    whole("eval-every", o.evalEvery);
    number("retokenize", o.retokenize);
    number("copy-loss-weight", o.copyLossWeight);
    whole("copy-gap", o.copyGap);
    whole("probes", o.probes);
    text("init", o.init);
    text("induction-heads", o.inductionHeads);
    text("prev-heads", o.prevHeads);
    o.resume = a.has("resume");
    o.exemptNorms = a.has("exempt-norms");
    analysis::TrainDemoResult r;
    try {
        analysis::checkTrainDemoOptions(o);
        r = analysis::trainDemo(o);
    } catch (const analysis::TrainOptionError& e) {
        throw UsageError(e.what());
    }
    std::printf("%s\n", nlohmann::json{{"steps", r.steps},
                                       {"loss", r.loss},
                                       {"minutes", r.minutes},
                                       {"tokens_per_s", r.tokensPerSecond}}
                            .dump()
                            .c_str());
    return 0;
}

} // namespace sparqlab::cli
