#include "commands.h"

#include "attention/method_spec.h"
#ifdef SPARQLAB_HAVE_HDF5
#include "capture/calibration_file.h"
#endif

#include "base/atomic_file.h"
#include <cstdio>
#include <map>
#include <sstream>
#include <stdexcept>
#include <unistd.h>

namespace sparqlab::cli {

namespace att = sparqlab::attention;

namespace {
/// The ATTN options, from the parameter table (method_table.h).
std::set<std::string> attnOptions(bool flags) {
    std::set<std::string> s;
    if (!flags)
        s.insert("method");
    for (const att::ParamInfo& p : att::parameters())
        if ((p.kind == att::ParamKind::Flag) == flags)
            s.insert(p.option);
    return s;
}
} // namespace

const std::set<std::string> kAttnValued = attnOptions(false);
const std::set<std::string> kAttnFlags = attnOptions(true);

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
        {"logits", "--model M IDS --out F.h5 [--compute auto|f32|stored] [--device cpu|cuda]",
         "the model's logits for every input position", SPARQLAB_HDF5_COMMAND(runLogits)},
        {"generate",
         "--model M (--prompt T | --prompt-file F | --messages F.json | IDS) --max-new-tokens N "
         "[--chat] [--system T] [ATTN] [--json] [--no-token-healing] [--compute auto|f32|stored] "
         "[--device cpu|cuda]",
         "greedy decoding with any attention method (a text prompt's last word is healed: "
         "regenerated so that a cut word continues as the model would; --chat: the prompt is a "
         "user turn of the model's chat template)",
         SPARQLAB_HDF5_COMMAND(runGenerate)},
        {"capture",
         "--model M (--prompt-file F | --prompts-file F.jsonl | IDS) --out cap.h5 [--generate N] "
         "[--chat] [--system T] [--all-queries] [--float16] [--compute auto|f32|stored] [--device "
         "cpu|cuda]",
         "run the model and write q, K, V of every layer and head",
         SPARQLAB_HDF5_COMMAND(runCapture)},
        {"calibrate",
         "--capture cal.h5 --method loki|double-sparsity --out F.h5 [--mode qk|q|k] "
         "[--uncentered]",
         "Loki's basis or Double Sparsity's channels from a capture (CONTRACTS.md §6)",
         SPARQLAB_HDF5_COMMAND(runCalibrate)},
        {"stats",
         "--capture cap.h5 --json out.json [--coverage-k K] [--alpha-r R] [--alpha-k K] [--seed S] "
         "[--methods M,M,...] [--recall-k K,K,...] [ATTN except --method --k]",
         "the paper's statistics (coverage, kurtosis, z-mass, top-k and alpha agreement, eta), "
         "k_mass and every method's recall@k",
         SPARQLAB_HDF5_COMMAND(runStats)},
        {"overlap",
         "--capture cap.h5 --json out.json [--methods M,M,...] [--ks K,K,...] [--queries N] "
         "[ATTN except --method --k]",
         "which keys the methods choose, per layer: overlap with the model's own indexer (DSA, "
         "MiniMax-M3, DeepSeek-V4's compressed entries), "
         "recall of the exact top-k, mass, output error, transfer, overlap with the previous "
         "layer's set",
         SPARQLAB_HDF5_COMMAND(runOverlap)},
        {"traffic",
         "--model M --length N [--batch B] [ATTN] [--bytes B] [--state-bytes B] [--json]",
         "what one decode step reads at a length, by layer kind (attention KV cache, linear "
         "layers' state, weights), and what a method saves of it",
         SPARQLAB_HDF5_COMMAND(runTraffic)},
        {"attend",
         "--capture cap.h5 --method METHOD [ATTN] --out res.h5 [--inputs F.h5] [--probs] "
         "[--json]",
         "run one attention method on captured q, K, V and compare it with dense",
         SPARQLAB_HDF5_COMMAND(runAttend)},
        {"figures",
         "(--capture cap.h5 [--layer L] | --bench bench.jsonl | --eval results.jsonl) --out DIR "
         "[--format png,svg,pdf] [--width W] [--height H]",
         "the paper's figures from a capture, Fig. 8/F1 from a benchmark, or the trade-off "
         "curves and Table 2 from eval",
#ifdef SPARQLAB_HAVE_GUI
         runFigures
#else
         [](const std::vector<std::string>&) -> int {
             throw std::runtime_error(
                 "figures needs the GUI libraries: this build has SPARQLAB_GUI=OFF");
         }
#endif
        },
        {"bpc",
         "--model M --text-file F [ATTN] [--json] [--compute auto|f32|stored] [--device cpu|cuda]",
         "bits per character of a text", SPARQLAB_HDF5_COMMAND(runBpc)},
        {"heads",
         "--model M [--length R] [--sequences N] [--seed S] [--json] [--compute auto|f32|stored] "
         "[--device cpu|cuda]",
         "the induction diagnostic: previous-token and induction scores per layer and head on "
         "random tokens shown twice",
         SPARQLAB_HDF5_COMMAND(runHeads)},
        {"session",
         "FILE | --capture cap.h5 --out session.h5 [ATTN except --basis --channels] [--layer L] "
         "[--head H] "
         "[--prompt-positions P --step T] [--query-position P]",
         "show a lab session (File > Save Session) as JSON, or make one from a capture of one "
         "prompt",
         SPARQLAB_HDF5_COMMAND(runSession)},
        {"methods", "[--markdown]",
         "the attention methods: parameters, state, calibration, transfer formula", runMethods},
        {"families", "[--markdown]",
         "the model families: config.json architecture names and the models they cover",
         SPARQLAB_HDF5_COMMAND(runFamilies)},
        {"tasks", "[--markdown]", "the evaluation tasks: metric and data files",
         SPARQLAB_HDF5_COMMAND(runTasks)},
        {"bench",
         "[--batch B --heads H --kv-heads G --seq S --head-dim D --r R --k K --dtype "
         "f32|f16|bf16 --device cpu|cuda] [--methods dense,sparq,… (those with a fast decode in "
         "`sparqlab-cli methods`) --page-size P --p P and the methods' own options] [--repeats "
         "N] [--warmup N] [--seed S] [--bandwidth-mib N] [--sweep] [--out F.jsonl] [--json]",
         "time dense against SparQ (or each of --methods) decode attention (lists: --seq "
         "1024,4096; --sweep: the paper's grid)",
         runBench},
        {"bench-generate",
         "--model M [--device cpu|cuda] [--compute auto|f32|stored] [--seq 4096,8192,…] "
         "[--batch B] [--methods dense,sparq,…] [--compression C (SparQ's k for C of dense "
         "transfers)] [ATTN except --method] [--steps N] [--warmup N] [--seed S] [--no-graphs (no "
         "CUDA "
         "graphs)] [--json]",
         "end-to-end greedy generation speed after a prefill of S random tokens, each method "
         "against the limit the measured copy bandwidth sets (the paper's Fig. 10)",
         SPARQLAB_HDF5_COMMAND(runBenchGenerate)},
        {"eval",
         "--model M --task TASK (sparqlab-cli tasks) [--data F] --out F.jsonl "
         "[--methods dense,sparq,h2o,lminf,flexgen,oracle] [--r LIST --k LIST --local k/4|N and "
         "other ATTN lists; ATTN except --method] [--limit N] [--seed S] [--resume] [--shard i/n] "
         "[--prefill dense|method] [--context-chars N --prompt-chars N --reference-chars N] "
         "[--confusion N] "
         "[--shots N] [--depths LIST] [--lengths LIST (or --length)] [--samples N] [--words F] "
         "[--measure-speed [--speed-device cpu|cuda]] "
         "[--chat] [--system T] "
         "[--compute auto|f32|stored] [--device cpu|cuda]",
         "the paper's task-level study: every example under every method and parameter set, "
         "one JSON line each (CONTRACTS.md §8)",
         SPARQLAB_HDF5_COMMAND(runEval)},
        {"chat-template",
         "(--template FILE --context FILE.json | --model M --messages F.json "
         "[--add-generation-prompt]) [--now ISO-8601]",
         "a chat template rendered byte for byte, as transformers' apply_chat_template does",
         SPARQLAB_HDF5_COMMAND(runChatTemplate)},
        {"init-model",
         "--config config.json --out DIR [--seed N] [--dtype f32|f16|bf16] [--tokenizer F] "
         "[--shard-gb G]",
         "write a randomly initialised model folder (for tests and benchmarks)",
         SPARQLAB_HDF5_COMMAND(runInitModel)},
        {"train-demo",
         "--data DIR [--out DIR] [--state DIR] [--steps N] [--minutes M] [--seed S] [--batch B] "
         "[--seq T] [--vocab V] [--lr LR] [--save-every N] [--copy-fraction F] [--copy-blocks N] "
         "[--random-copy F] [--retokenize F] [--copy-loss-weight W] [--copy-gap N] [--context N] "
         "[--init DIR] "
         "[--warmup N] "
         "[--exempt-norms] [--probes N] "
         "[--aux-weight W --induction-heads L.H,... --prev-heads L.H,... --aux-hold N "
         "--aux-until N] [--random-ids-start N --random-ids-steps N] [--eval-every N] [--resume]",
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

std::FILE* writeJsonResult(const std::string& path, const std::string& json) {
    if (path != "-") {
        base::writeFileAtomically(path, json + "\n");
        return stdout;
    }
    std::fwrite(json.data(), 1, json.size(), stdout);
    std::fputc('\n', stdout);
    std::fflush(stdout);
    return stderr;
}

void noteIgnoredOptions(const Args& a, const std::vector<att::Method>& methods) {
    if (methods.empty())
        return;
    for (const att::ParamInfo& p : att::parameters()) {
        if (!a.has(p.option))
            continue;
        bool taken = false;
        for (att::Method m : methods)
            taken = taken || att::takes(m, p.id);
        if (!taken)
            std::fprintf(stderr, "note: %s\n", att::notTakenNote(p.id, methods).c_str());
    }
}

namespace {
/// The calibration files given (--basis, --channels), each read once, by its parameter.
using Calibrations = std::map<att::Param, std::shared_ptr<const att::Calibration>>;

Calibrations calibrationOptions(const Args& a) {
    Calibrations out;
    for (const att::ParamInfo& p : att::parameters()) {
        if (p.kind != att::ParamKind::File || !a.has(p.option))
            continue;
#ifdef SPARQLAB_HAVE_HDF5
        out[p.id] = capture::readCalibration(*a.get(p.option));
#else
        throw std::runtime_error(std::string("--") + p.option +
                                 " needs HDF5: this build has SPARQLAB_HDF5=OFF");
#endif
    }
    return out;
}

/// Method `m` with its own defaults (applyDefaults), then the ATTN options given, and the
/// calibration file of its own option (Loki's --basis, Double Sparsity's --channels): what the
/// options mean for each method they are given to, one method or a list.
att::AttentionConfig configOf(const Args& a, att::Method m, const Calibrations& calibrations) {
    att::AttentionConfig c;
    c.method = m;
    att::applyDefaults(c); // the method's own defaults, then the options given
    for (const auto& [param, calibration] : calibrations)
        if (att::takes(m, param))
            c.calibration = calibration;
    for (const att::ParamInfo& p : att::parameters()) {
        if (!a.has(p.option) || p.kind == att::ParamKind::File)
            continue;
        try {
            att::setParamValue(c, p.id, a.get(p.option).value_or(""));
        } catch (const att::AttentionError& e) {
            // "--k must be at least 1, got 0"; "--tau: unknown temperature …"
            throw UsageError("--" + std::string(p.option) +
                             (p.kind == att::ParamKind::Choice ? ": " : " ") + e.what());
        }
    }
    // The top-p methods' --k is a cap, none when omitted (CONTRACTS.md §6).
    if (!a.has("k") && att::takes(c.method, att::Param::P))
        c.k = att::AttentionConfig::kNoCap;
    const att::MethodInfo& info = att::methodInfo(c.method);
    if (c.calibration && info.calibrated && c.calibration->method != c.method)
        throw UsageError(std::string("--") + att::methodSpec(c.method).calibrator->option + ": " +
                         c.calibration->source + " is a " + att::methodName(c.calibration->method) +
                         " calibration, not a " + info.name + " one");
    return c;
}
} // namespace

std::string fitDefaultR(const Args& args, att::AttentionConfig& config, int64_t headDim) {
    if (args.has("r") || !att::takes(config.method, att::Param::R) || config.r <= headDim)
        return "";
    const std::string note = "note: r = " + std::to_string(headDim) +
                             ", the head dimension (the default " + std::to_string(config.r) +
                             " is more)\n";
    config.r = headDim;
    return note;
}

att::AttentionConfig attentionConfig(const Args& a) {
    att::Method m = att::Method::Dense;
    if (const auto v = a.get("method")) {
        try {
            m = att::parseMethod(*v);
        } catch (const att::AttentionError& e) {
            throw UsageError(std::string("--method: ") + e.what());
        }
    }
    const att::AttentionConfig c = configOf(a, m, calibrationOptions(a));
    noteIgnoredOptions(a, {c.method});
    return c;
}

std::function<att::AttentionConfig(att::Method)> attentionConfigs(const Args& args) {
    const Calibrations calibrations = calibrationOptions(args);
    configOf(args, att::Method::Dense, calibrations); // the values' errors before any method runs
    return [&args, calibrations](att::Method m) { return configOf(args, m, calibrations); };
}

std::vector<att::AttentionConfig> methodList(const Args& args, const std::string& list) {
    std::vector<att::AttentionConfig> out;
    std::stringstream ss(list);
    std::string item;
    const auto configFor = attentionConfigs(args);
    std::vector<att::Method> ms;
    while (std::getline(ss, item, ',')) {
        att::Method m;
        try {
            m = att::parseMethod(item);
        } catch (const att::AttentionError& e) {
            throw UsageError(std::string("--methods: ") + e.what());
        }
        out.push_back(configFor(m));
        ms.push_back(m);
    }
    noteIgnoredOptions(args, ms);
    return out;
}

int runMethods(const std::vector<std::string>& argv) {
    const Args a(argv, {}, {"markdown"});
    if (!a.positional().empty())
        throw UsageError("unexpected argument '" + a.positional().front() + "'");
    if (a.has("markdown")) {
        std::printf("%s", att::methodsMarkdown().c_str());
        return 0;
    }
    for (const att::MethodInfo& m : att::methods()) {
        std::string params;
        for (att::Param p : m.params)
            params += std::string(params.empty() ? "" : " ") + "--" + att::paramInfo(p).option;
        std::printf("%-16s %s\n%16s parameters: %s; transfer %s%s%s\n", m.name, m.summary, "",
                    params.empty() ? "none" : params.c_str(), m.transferFormula,
                    m.stateful ? "; stateful" : "", m.calibrated ? "; calibrated" : "");
    }
    return 0;
}

ProgressBar::ProgressBar(std::string label) : m_label(std::move(label)), m_tty(::isatty(2)) {}

ProgressBar::~ProgressBar() {
    if (m_tty && m_lastPercent >= 0)
        std::fprintf(stderr, "\n");
}

base::Job ProgressBar::job() {
    base::Job j;
    j.progress = [this](int64_t done, int64_t total, const std::string&) { update(done, total); };
    return j;
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
    // The time left at the pace so far.
    const double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - m_start).count();
    char eta[32] = "";
    if (done > 0 && done < total) {
        const auto left = static_cast<long long>(elapsed * static_cast<double>(total - done) /
                                                 static_cast<double>(done));
        std::snprintf(eta, sizeof eta, "  ETA %lld:%02lld:%02lld", left / 3600, left / 60 % 60,
                      left % 60);
    }
    std::fprintf(stderr, "\r%s [%.*s%*s] %3d%%%-16s", m_label.c_str(), filled,
                 "########################################", kWidth - filled, "", percent, eta);
    std::fflush(stderr);
}

} // namespace sparqlab::cli
