#include "commands.h"

#include <cstdio>
#include <stdexcept>
#include <unistd.h>

namespace sparqlab::cli {

namespace att = sparqlab::attention;

const std::set<std::string> kAttnValued{"method", "r", "k", "local", "tau", "gqa"};
const std::set<std::string> kAttnFlags{"no-mean-value"};

#ifdef SPARQLAB_HAVE_HDF5
#define SPARQLAB_HDF5_COMMAND(fn) fn
#else
// Commands that read or write models and HDF5 files are not built without HDF5.
#define SPARQLAB_HDF5_COMMAND(fn)                                                                  \
    [](const std::vector<std::string>&) -> int {                                                   \
        throw std::runtime_error("this build has SPARQLAB_HDF5=OFF: only bench is available");     \
    }
#endif

const std::vector<Command>& commands() {
    static const std::vector<Command> all{
        {"info", "--model M", "the model's architecture and shape as JSON",
         SPARQLAB_HDF5_COMMAND(runInfo)},
        {"tokenize", "--model M (--text T | --text-file F | --jsonl F) [--no-special]",
         "token ids and token texts of a text", SPARQLAB_HDF5_COMMAND(runTokenize)},
        {"detokenize", "--model M (IDS | --jsonl F) [--skip-special]", "text of token ids",
         SPARQLAB_HDF5_COMMAND(runDetokenize)},
        {"logits", "--model M IDS --out F.h5", "the model's logits for every input position",
         SPARQLAB_HDF5_COMMAND(runLogits)},
        {"generate",
         "--model M (--prompt T | --prompt-file F | IDS) --max-new-tokens N [ATTN] [--json]",
         "greedy decoding with any attention method", SPARQLAB_HDF5_COMMAND(runGenerate)},
        {"capture",
         "--model M (--prompt-file F | --prompts-file F.jsonl | IDS) --out cap.h5 [--generate N] "
         "[--all-queries] [--float16]",
         "run the model and write q, K, V of every layer and head",
         SPARQLAB_HDF5_COMMAND(runCapture)},
        {"stats",
         "--capture cap.h5 --json out.json [--coverage-k K] [--alpha-r R] [--alpha-k K] [--seed S]",
         "the paper's statistics (coverage, kurtosis, z-mass, top-k and alpha agreement, eta)",
         SPARQLAB_HDF5_COMMAND(runStats)},
        {"attend", "--capture cap.h5 --method METHOD [ATTN] --out res.h5 [--json]",
         "run one attention method on captured q, K, V and compare it with dense",
         SPARQLAB_HDF5_COMMAND(runAttend)},
        {"figures",
         "(--capture cap.h5 | --bench bench.jsonl) --out DIR [--format png,svg,pdf] [--layer L] "
         "[--width W --height H]",
         "the paper's figures from a capture, or Fig. 8/F1 from a benchmark",
#ifdef SPARQLAB_HAVE_GUI
         runFigures
#else
         [](const std::vector<std::string>&) -> int {
             throw std::runtime_error(
                 "figures needs the GUI libraries: this build has SPARQLAB_GUI=OFF");
         }
#endif
        },
        {"bpc", "--model M --text-file F [ATTN] [--json]", "bits per character of a text",
         SPARQLAB_HDF5_COMMAND(runBpc)},
        {"bench",
         "[--batch B --heads H --kv-heads G --seq S --head-dim D --r R --k K --dtype f32|f16|bf16 "
         "--device cpu|cuda] [--repeats N] [--warmup N] [--sweep] [--out F.jsonl] [--json]",
         "time dense against SparQ decode attention (lists: --seq 1024,4096; --sweep: the paper's "
         "grid)",
         runBench},
        {"init-model",
         "--config config.json --out DIR [--seed N] [--dtype f32|f16|bf16] [--tokenizer F]",
         "write a randomly initialised model folder (for tests and benchmarks)",
         SPARQLAB_HDF5_COMMAND(runInitModel)},
        {"train-demo",
         "--data DIR [--out DIR] [--state DIR] [--steps N] [--minutes M] [--seed S] [--batch B] "
         "[--seq T] [--vocab V] [--lr LR] [--save-every N] [--copy-fraction F] [--copy-blocks N] "
         "[--random-copy F] [--context N] [--resume]",
         "train the demo model (tokenizer and weights) on State of the Union addresses",
         SPARQLAB_HDF5_COMMAND(runTrainDemo)},
    };
    return all;
}

const Command* findCommand(const std::string& name) {
    for (const Command& c : commands())
        if (name == c.name)
            return &c;
    return nullptr;
}

att::AttentionConfig attentionConfig(const Args& a) {
    att::AttentionConfig c;
    // Each value's error names its option.
    auto parse = [&](const char* option, auto&& fn) {
        if (const auto v = a.get(option)) {
            try {
                fn(*v);
            } catch (const att::AttentionError& e) {
                throw UsageError(std::string("--") + option + ": " + e.what());
            }
        }
    };
    parse("method", [&](const std::string& v) { c.method = att::parseMethod(v); });
    parse("tau", [&](const std::string& v) { c.tau = att::parseTauMode(v, &c.tauValue); });
    parse("gqa", [&](const std::string& v) { c.gqa = att::parseGroupSelect(v); });
    if (const auto r = a.integer("r"))
        c.r = *r;
    if (const auto k = a.integer("k"))
        c.k = *k;
    if (const auto l = a.integer("local"))
        c.local = *l;
    c.meanValue = !a.has("no-mean-value");
    return c;
}

ProgressBar::ProgressBar(std::string label) : m_label(std::move(label)), m_tty(::isatty(2)) {}

ProgressBar::~ProgressBar() {
    if (m_tty && m_lastPercent >= 0)
        std::fprintf(stderr, "\n");
}

void ProgressBar::update(int64_t done, int64_t total) {
    if (!m_tty || total <= 0)
        return;
    const int percent = static_cast<int>(100 * done / total);
    if (percent == m_lastPercent)
        return;
    m_lastPercent = percent;
    constexpr int kWidth = 40; // characters of the bar
    const int filled = percent * kWidth / 100;
    std::fprintf(stderr, "\r%s [%.*s%*s] %3d%%", m_label.c_str(), filled,
                 "########################################", kWidth - filled, "", percent);
    std::fflush(stderr);
}

} // namespace sparqlab::cli
