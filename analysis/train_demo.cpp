// The demo trainer (train_demo.h): trains the shipped demo model (a small Llama with GQA) on the
// State of the Union addresses before 2010, with our own byte-level BPE tokenizer and the
// runtime's own transformer modules. Seeded: batch n depends only on (seed, n), so a resumed
// run draws the same data as an uninterrupted one.

#include "train_demo.h"
#include "base/json_number.h"

#include "base/atomic_file.h"

#include "analysis/induction.h"
#include "analysis/repetition.h"
#include "model/model.h"
#include "model/model_config.h"
#include "model/safetensors.h"
#include "model/transformer.h"
#include "text/tokenizer.h"

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>
#include <torch/nn/utils/clip_grad.h>
#include <torch/optim/adamw.h>
#include <torch/serialize.h>

#include <chrono>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <sstream>

namespace sparqlab::analysis {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

/// A progress line to the options' log (standard error by default).
__attribute__((format(printf, 2, 3))) void logf(const TrainDemoOptions& o, const char* fmt, ...) {
    char line[1024];
    va_list args;
    va_start(args, fmt);
    std::vsnprintf(line, sizeof line, fmt, args);
    va_end(args);
    if (o.log)
        o.log(line);
    else
        std::fputs(line, stderr);
}

std::string readText(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in)
        throw std::runtime_error(path + ": cannot read");
    std::ostringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

constexpr int kValidationYear = 2010; // addresses from this year on are held out

struct Corpus {
    std::vector<std::string> trainTexts, validTexts;
    std::vector<std::string> validNames;
};

Corpus readCorpus(const std::string& dir) {
    Corpus c;
    std::vector<fs::path> files;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(dir, ec))
        if (e.path().extension() == ".txt")
            files.push_back(e.path());
    if (ec || files.empty())
        throw std::runtime_error(dir + ": no .txt addresses (run scripts/fetch-sotu.sh first)");
    std::sort(files.begin(), files.end());
    for (const fs::path& f : files) {
        std::ifstream in(f, std::ios::binary);
        std::ostringstream ss;
        ss << in.rdbuf();
        const int year = std::atoi(f.filename().string().substr(0, 4).c_str());
        if (year >= kValidationYear) {
            c.validTexts.push_back(ss.str());
            c.validNames.push_back(f.filename().string());
        } else {
            c.trainTexts.push_back(ss.str());
        }
    }
    return c;
}

json demoConfig(int64_t vocab, int64_t context) {
    return json{{"architectures", {"LlamaForCausalLM"}},
                {"model_type", "llama"},
                {"hidden_size", 256},
                {"intermediate_size", 704},
                {"num_hidden_layers", 4},
                {"num_attention_heads", 4},
                {"num_key_value_heads", 2},
                {"head_dim", 64},
                {"hidden_act", "silu"},
                {"max_position_embeddings", context},
                {"rms_norm_eps", 1e-5},
                {"rope_theta", 10000.0},
                {"tie_word_embeddings", false},
                {"attention_bias", false},
                {"vocab_size", vocab},
                {"bos_token_id", vocab - 1},
                {"eos_token_id", vocab - 1},
                {"torch_dtype", "float32"}};
}

void writeText(const fs::path& p, const std::string& text) {
    base::writeFileAtomically(p.string(), text);
}

/// One training row's supervision besides the next token: where an induction head should
/// look from each position (−1: nowhere), and which next-token losses count.
struct RowTargets {
    int64_t* induction; ///< the position after the earlier occurrence of the current token
    uint8_t* lmMask;    ///< 0 where the next token is a random id seen for the first time
};

/// How copy sequences are made (see makeBatch).
struct CopyRecipe {
    double pCopy = 0;       ///< fraction of rows that are copy sequences
    int64_t blocks = 1;     ///< spans per copy sequence
    double pRandom = 0;     ///< fraction of spans of random ids
    int64_t randomIds = 0;  ///< random ids are drawn from [0, randomIds)
    double pRetokenize = 0; ///< fraction of text spans repeated with fresh token boundaries
    const text::Tokenizer* tok = nullptr;
    int64_t gapMax = 64; ///< text between a span and its repeat: 0 … gapMax − 1 tokens
};

/// The repeat of a text span `ids` re-tokenized in pieces cut at random characters (as a
/// prompt that repeats a passage's first characters cuts a word), and for each of its tokens
/// the index of the span token holding the character after it (−1: none). Empty when the
/// span's tokens do not decode piece by piece (a character split across tokens).
std::pair<std::vector<int64_t>, std::vector<int64_t>>
retokenized(const std::vector<int64_t>& ids, const text::Tokenizer& tok, std::mt19937_64& rng) {
    std::vector<size_t> end; // end[i]: bytes of the span's first i+1 tokens
    std::string text;
    for (int64_t id : ids) {
        text += tok.decode({id});
        end.push_back(text.size());
    }
    if (text != tok.decode(ids) || text.size() < 2)
        return {};
    std::uniform_int_distribution<size_t> at(1, text.size() - 1);
    std::vector<size_t> cuts{0, text.size()};
    const size_t n = 1 + text.size() / 80;
    for (size_t i = 0; i < n; ++i)
        cuts.push_back(at(rng));
    std::sort(cuts.begin(), cuts.end());
    cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
    std::vector<int64_t> out, source;
    for (size_t c = 0; c + 1 < cuts.size(); ++c) {
        size_t pos = cuts[c];
        for (int64_t id : tok.encode(text.substr(cuts[c], cuts[c + 1] - cuts[c]), false)) {
            pos += tok.decode({id}).size();
            out.push_back(id);
            // The span token holding byte `pos`: what comes next in the first showing.
            const auto it = std::upper_bound(end.begin(), end.end(), pos);
            source.push_back(pos < text.size() ? static_cast<int64_t>(it - end.begin()) : -1);
        }
    }
    return {out, source};
}

/// Fills row[0, n) with a copy sequence: natural text (a window of the stream) into which a
/// span is written twice, the repeat after a gap of 0–63 tokens (--copy-gap: longer, as far as
/// the repeat still fits the row: retrieval from far back). The span is 32–383 tokens
/// for a 1024-token row and scales down for shorter rows (at least 8 tokens). It is text of
/// the stream, or with randomVocab > 0 ids drawn uniformly from [0, randomVocab), which then
/// recur (after 0–15 tokens of text each time) until the row is full: many retrievals per row.
/// For every repeated token the induction target is the position after its previous showing;
/// a random span's first showing is left out of the next-token loss (nothing predicts it).
void fillCopyRow(const std::vector<int64_t>& stream, int64_t* row, int64_t n, std::mt19937_64& rng,
                 int64_t randomVocab, bool retokenize, const CopyRecipe& recipe, int64_t rowBegin,
                 const RowTargets& out) {
    std::uniform_real_distribution<double> u(0, 1);
    const int64_t size = static_cast<int64_t>(stream.size());
    auto offset = [&](int64_t len) {
        return static_cast<int64_t>(u(rng) * static_cast<double>(size - len - 1));
    };
    const int64_t spanMin = std::min<int64_t>(32, std::max<int64_t>(8, n / 8));
    const int64_t spanMax = std::max<int64_t>(spanMin, std::min<int64_t>(384, (n - 64) / 2));
    const int64_t spanLen = spanMin + static_cast<int64_t>(u(rng) * (spanMax - spanMin));
    const int64_t lead = static_cast<int64_t>(
        u(rng) * static_cast<double>(std::max<int64_t>(0, n - 2 * spanLen)) * 0.5);
    int64_t gap = static_cast<int64_t>(u(rng) * static_cast<double>(recipe.gapMax));
    if (recipe.gapMax > 64) // the repeat must still fit after the gap
        gap = std::min(gap, std::max<int64_t>(0, n - lead - 2 * spanLen));
    const int64_t src = offset(n);
    int64_t k = 0;
    for (int64_t i = 0; i < lead && k < n; ++i)
        row[k++] = stream[static_cast<size_t>(src + i)];
    const int64_t spanBegin = k;
    if (randomVocab > 0) { // ids drawn uniformly: only retrieval can predict their repeat
        std::uniform_int_distribution<int64_t> id(0, randomVocab - 1);
        for (int64_t i = 0; i < spanLen && k < n; ++i) {
            if (k > 0) // row[k] is the next token of position k − 1
                out.lmMask[rowBegin + k - 1] = 0;
            row[k++] = id(rng);
        }
    } else {
        const int64_t span = offset(spanLen);
        for (int64_t i = 0; i < spanLen && k < n; ++i)
            row[k++] = stream[static_cast<size_t>(span + i)];
    }
    const int64_t written = k - spanBegin;
    for (int64_t i = 0; i < gap && k < n; ++i)
        row[k++] = stream[static_cast<size_t>(src + lead + i)];
    // A showing of the span at k, whose previous showing began at `previous`.
    auto repeat = [&](int64_t previous) {
        for (int64_t i = 0; i < written && k < n; ++i) {
            if (i + 1 < written)
                out.induction[rowBegin + k] = rowBegin + previous + i + 1;
            row[k++] = row[spanBegin + i];
        }
    };
    int64_t previous = spanBegin;
    int64_t showing = k;
    std::pair<std::vector<int64_t>, std::vector<int64_t>> fresh;
    if (retokenize && randomVocab == 0 && recipe.tok)
        fresh = retokenized(std::vector<int64_t>(row + spanBegin, row + spanBegin + written),
                            *recipe.tok, rng);
    if (!fresh.first.empty()) { // the repeat with other token boundaries
        for (size_t i = 0; i < fresh.first.size() && k < n; ++i) {
            if (fresh.second[i] >= 0)
                out.induction[rowBegin + k] = rowBegin + spanBegin + fresh.second[i];
            row[k++] = fresh.first[i];
        }
    } else {
        repeat(previous);
    }
    int64_t next = src + lead + gap;
    while (randomVocab > 0 && k < n) { // random spans recur until the row is full
        const int64_t between = static_cast<int64_t>(u(rng) * 16);
        for (int64_t i = 0; i < between && k < n; ++i)
            row[k++] = stream[static_cast<size_t>(next++)];
        previous = showing;
        showing = k;
        repeat(previous);
    }
    while (k < n)
        row[k++] = stream[static_cast<size_t>(next++)];
}

/// One training batch for step `step`: windows of the training stream, and with probability
/// pCopy a sequence that repeats spans of itself (so the model learns to retrieve from its
/// context: the paper's Repetition task needs it). A copy sequence is made of `copyBlocks`
/// consecutive parts, each with its own span written twice (more retrieval per sequence; 1
/// gives one span over the whole row). A fraction pRandom of the spans are random ids from
/// [0, randomIds) rather than text, which teaches retrieval fastest (nothing else predicts them).
struct Batch {
    at::Tensor ids;       ///< [B, T+1]
    at::Tensor induction; ///< [B, T+1] induction targets, −1 where none
    at::Tensor lmMask;    ///< [B, T+1] uint8: 1 where position i's next-token loss counts
};

Batch makeBatch(const std::vector<int64_t>& stream, int64_t B, int64_t T, uint64_t seed,
                int64_t step, const CopyRecipe& recipe) {
    std::mt19937_64 rng(seed * 1000003ULL + static_cast<uint64_t>(step));
    std::uniform_real_distribution<double> u(0, 1);
    const int64_t n = static_cast<int64_t>(stream.size());
    Batch batch{at::empty({B, T + 1}, at::kLong), at::full({B, T + 1}, -1, at::kLong),
                at::ones({B, T + 1}, at::kByte)};
    auto* out = batch.ids.data_ptr<int64_t>();
    for (int64_t b = 0; b < B; ++b) {
        int64_t* row = out + b * (T + 1);
        const RowTargets targets{batch.induction.data_ptr<int64_t>() + b * (T + 1),
                                 batch.lmMask.data_ptr<uint8_t>() + b * (T + 1)};
        if (u(rng) < recipe.pCopy) {
            const int64_t part = (T + 1) / recipe.blocks;
            for (int64_t c = 0; c < recipe.blocks; ++c) {
                const int64_t begin = c * part;
                const int64_t end = c + 1 == recipe.blocks ? T + 1 : begin + part;
                const bool random = recipe.pRandom > 0 && u(rng) < recipe.pRandom;
                // (drawn only when asked for, so that older recipes draw the same batches)
                const bool retok = !random && recipe.pRetokenize > 0 && u(rng) < recipe.pRetokenize;
                fillCopyRow(stream, row + begin, end - begin, rng, random ? recipe.randomIds : 0,
                            retok, recipe, begin, targets);
            }
        } else {
            const int64_t src = static_cast<int64_t>(u(rng) * static_cast<double>(n - (T + 1) - 1));
            for (int64_t k = 0; k <= T; ++k)
                row[k] = stream[static_cast<size_t>(src + k)];
        }
    }
    return batch;
}

/// "L.H,L.H": heads an auxiliary attention loss supervises.
std::vector<std::pair<int64_t, int64_t>>
headList(const std::string& value, const std::string& option, const model::ModelConfig& c) {
    std::vector<std::pair<int64_t, int64_t>> heads;
    if (value.empty())
        return heads;
    std::stringstream ss(value);
    std::string item;
    while (std::getline(ss, item, ',')) {
        const size_t dot = item.find('.');
        char* e1 = nullptr;
        char* e2 = nullptr;
        const long l = dot == std::string::npos ? -1 : std::strtol(item.c_str(), &e1, 10);
        const long h = dot == std::string::npos ? -1 : std::strtol(item.c_str() + dot + 1, &e2, 10);
        if (dot == std::string::npos || e1 != item.c_str() + dot || *e2 != '\0' || l < 0 ||
            l >= c.nLayers || h < 0 || h >= c.nHeads)
            throw TrainOptionError(
                "--" + option + ": '" + item + "' is not LAYER.HEAD of this model (" +
                std::to_string(c.nLayers) + " layers, " + std::to_string(c.nHeads) + " heads)");
        heads.emplace_back(l, h);
    }
    return heads;
}

} // namespace

void checkTrainDemoOptions(const TrainDemoOptions& o) {
    const int64_t T = o.seq, context = o.context > 0 ? o.context : o.seq;
    const int64_t auxUntil = o.auxUntil >= 0 ? o.auxUntil : o.auxHold;
    if (o.data.empty())
        throw TrainOptionError("--data: the corpus folder is missing");
    if (o.copyGap < 1)
        throw TrainOptionError("--copy-gap must be at least 1");
    if (!(o.copyLossWeight > 0))
        throw TrainOptionError("--copy-loss-weight must be positive");
    if (!(o.retokenize >= 0 && o.retokenize <= 1))
        throw TrainOptionError("--retokenize must be in [0, 1]");
    if (o.warmup < 0 || o.auxWeight < 0 || o.auxHold < 0 || auxUntil < o.auxHold ||
        o.randomIdsStart < 0 || o.randomIdsSteps < 0 || o.evalEvery < 0)
        throw TrainOptionError("--warmup, --aux-weight, --aux-hold, --random-ids-start, "
                               "--random-ids-steps and --eval-every must be >= 0, --aux-until >= "
                               "--aux-hold");
    if (o.steps < 1 || o.batch < 1 || T < 16 || o.vocab < 300 || o.saveEvery < 1)
        throw TrainOptionError(
            "steps, batch, seq (>= 16), vocab (>= 300) and save-every must be positive");
    if (!(o.copyFraction >= 0 && o.copyFraction <= 1))
        throw TrainOptionError("--copy-fraction must be in [0, 1]");
    if (!(o.randomCopy >= 0 && o.randomCopy <= 1))
        throw TrainOptionError("--random-copy must be in [0, 1]");
    if (context < T)
        throw TrainOptionError("--context must be at least --seq");
    if (o.copyBlocks < 1 || (T + 1) / o.copyBlocks < 96)
        throw TrainOptionError("--copy-blocks must be at least 1 and leave 96 tokens per block");
}

TrainDemoResult trainDemo(const TrainDemoOptions& o, const base::Job& job) {
    checkTrainDemoOptions(o);
    const std::string data = o.data;
    const fs::path out = o.out;
    const fs::path state = o.state;
    const int64_t steps = o.steps;
    const double minutes = o.minutes;
    const uint64_t seed = o.seed;
    const int64_t B = o.batch;
    const int64_t T = o.seq;
    const int64_t vocab = o.vocab;
    const double lrMax = o.lr;
    const int64_t saveEvery = o.saveEvery;
    const double pCopy = o.copyFraction;
    const int64_t copyBlocks = o.copyBlocks;
    const double pRandom = o.randomCopy;
    const int64_t context = o.context > 0 ? o.context : T;
    const int64_t warmup = o.warmup;
    const double auxWeight = o.auxWeight;
    const int64_t auxHold = o.auxHold;
    const int64_t auxUntil = o.auxUntil >= 0 ? o.auxUntil : auxHold;
    const int64_t idsStart = o.randomIdsStart;
    const int64_t idsSteps = o.randomIdsSteps;
    const int64_t evalEvery = o.evalEvery;
    const double pRetokenize = o.retokenize;
    const int64_t probeCount = o.probes;
    // The next-token loss of a repeated token (one with an induction target) counts this many
    // times: retrieval is what the copy rows teach, against the language prior.
    const double copyLossWeight = o.copyLossWeight;
    const int64_t copyGap = o.copyGap;
    const std::optional<std::string> init =
        o.init.empty() ? std::optional<std::string>() : std::optional<std::string>(o.init);
    std::error_code ec;
    fs::create_directories(out, ec);
    fs::create_directories(state, ec);

    const auto start = std::chrono::steady_clock::now();
    auto elapsed = [&]() {
        return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    };
    const Corpus corpus = readCorpus(data);
    logf(o, "train-demo: %zu training and %zu validation addresses\n", corpus.trainTexts.size(),
         corpus.validTexts.size());

    // 1. Tokenizer (trained once; a resumed run keeps the one its weights were trained with,
    // kept in the state folder, even when --out names a new folder).
    const fs::path tokPath = out / "tokenizer.json";
    const fs::path stateTok = state / "tokenizer.json";
    const bool resuming = o.resume && fs::exists(state / "state.json");
    if (resuming && fs::exists(stateTok)) {
        if (!fs::exists(tokPath) || !fs::equivalent(stateTok, tokPath))
            writeText(tokPath, readText(stateTok.string()));
    } else if (resuming && !fs::exists(tokPath)) {
        throw std::runtime_error(stateTok.string() +
                                 ": missing (the tokenizer the saved weights were trained with)");
    } else if (!resuming && init) {
        // Continued training from a model folder: its tokenizer, so its weights keep their
        // vocabulary.
        writeText(tokPath, readText((fs::path(*init) / "tokenizer.json").string()));
        logf(o, "train-demo: tokenizer of %s\n", init->c_str());
    } else if (!resuming) {
        const std::string tj = text::trainByteLevelBpe(corpus.trainTexts, vocab, {"<|endoftext|>"});
        writeText(tokPath, tj);
        logf(o, "train-demo: tokenizer trained (%lld ids) in %.0f s\n",
             static_cast<long long>(vocab), elapsed());
    }
    if (!fs::exists(stateTok)) // (older state folders kept it only in --out)
        writeText(stateTok, readText(tokPath.string()));
    const auto tok = text::Tokenizer::fromFile(tokPath.string());
    const int64_t eot = tok->size() - 1;
    std::vector<int64_t> stream;
    for (const std::string& t : corpus.trainTexts) {
        const auto ids = tok->encode(t, false);
        stream.insert(stream.end(), ids.begin(), ids.end());
        stream.push_back(eot);
    }
    logf(o, "train-demo: %zu training tokens (%.2f characters per token)\n", stream.size(), [&] {
        double chars = 0;
        for (const auto& t : corpus.trainTexts)
            chars += static_cast<double>(t.size());
        return chars / static_cast<double>(stream.size());
    }());

    std::string validText;
    for (const std::string& t : corpus.validTexts)
        validText += t + "\n\n";
    const auto probes = analysis::repetitionProbes(validText, probeCount);
    std::vector<std::string> tokenTexts; // each token's text, for the healed probes

    // 2. Model and optimiser.
    const json cfgJson = demoConfig(tok->size(), context);
    writeText(out / "config.json", cfgJson.dump(2));
    writeText(out / "generation_config.json",
              json{{"bos_token_id", eot}, {"eos_token_id", eot}}.dump(2));
    const model::ModelConfig cfg =
        model::parseModelConfig(cfgJson.dump(), (out / "config.json").string());
    model::CausalLM net(cfg);
    net->initWeights(seed);
    const fs::path statePath = state / "state.json";
    // Weight decay exempting norms and embeddings (--exempt-norms) is part of the optimizer's
    // layout, so a resumed run keeps what its state was saved with.
    bool exemptNorms = o.exemptNorms;
    if (resuming) {
        std::ifstream in(statePath);
        const json st = json::parse(in, nullptr, /*allow_exceptions=*/false);
        if (st.is_object() && st.contains("exempt_norms") && st["exempt_norms"].is_boolean())
            exemptNorms = st["exempt_norms"].get<bool>();
    }
    std::vector<at::Tensor> decayed, exempt;
    for (const auto& p : net->named_parameters()) {
        const bool isExempt = exemptNorms && (p.key().find("norm") != std::string::npos ||
                                              p.key().find("embed_tokens") != std::string::npos);
        (isExempt ? exempt : decayed).push_back(p.value());
    }
    std::vector<torch::optim::OptimizerParamGroup> groups;
    groups.emplace_back(
        decayed, std::make_unique<torch::optim::AdamWOptions>(
                     torch::optim::AdamWOptions(lrMax).betas({0.9, 0.95}).weight_decay(0.1)));
    if (!exempt.empty())
        groups.emplace_back(
            exempt, std::make_unique<torch::optim::AdamWOptions>(
                        torch::optim::AdamWOptions(lrMax).betas({0.9, 0.95}).weight_decay(0.0)));
    torch::optim::AdamW opt(groups,
                            torch::optim::AdamWOptions(lrMax).betas({0.9, 0.95}).weight_decay(0.1));
    if (init && !resuming) {
        net->loadWeights(model::Checkpoint(*init));
        logf(o, "train-demo: weights of %s\n", init->c_str());
    }
    int64_t step = 0;
    // The trainer's state: weights-N.safetensors and optimizer-N.pt of step N, each written
    // under a temporary name and renamed, then state.json (renamed too) names them. A run
    // killed at any point leaves state.json naming a complete pair, from which it resumes.
    if (resuming) {
        std::ifstream in(statePath);
        json st;
        try {
            st = json::parse(in);
            step = base::requireWholeNumber<std::runtime_error>(st.at("step"), statePath.string(),
                                                                "step", 0, int64_t{1} << 40);
        } catch (const json::exception& e) {
            throw std::runtime_error(statePath.string() + ": not a trainer state (" + e.what() +
                                     ")");
        }
        // (folders of older versions kept weights/model.safetensors and optimizer.pt)
        const fs::path weights =
            state / st.value("weights", std::string("weights/model.safetensors"));
        const fs::path optimizer = state / st.value("optimizer", std::string("optimizer.pt"));
        net->loadWeights(model::Checkpoint::openFile(weights.string()));
        try {
            torch::load(opt, optimizer.string());
        } catch (const c10::Error&) {
            throw std::runtime_error(optimizer.string() + ": cannot read the optimizer state");
        }
        logf(o, "train-demo: resumed at step %lld\n", static_cast<long long>(step));
    }
    auto save = [&]() {
        std::vector<std::pair<std::string, at::Tensor>> tensors;
        for (const auto& p : net->named_parameters())
            tensors.emplace_back(p.key(), p.value().detach());
        const std::string n = std::to_string(step);
        const std::string weights = "weights-" + n + ".safetensors";
        const std::string optimizer = "optimizer-" + n + ".pt";
        model::writeSafetensors((state / weights).string(), tensors, {{"format", "pt"}});
        base::writeAtomically((state / optimizer).string(),
                              [&](const std::string& tmp) { torch::save(opt, tmp); });
        writeText(statePath, json{{"step", step},
                                  {"seed", seed},
                                  {"weights", weights},
                                  {"optimizer", optimizer},
                                  {"exempt_norms", exemptNorms}}
                                 .dump());
        std::vector<fs::path> stale; // earlier steps' pairs and leftovers of killed runs
        for (const auto& e : fs::directory_iterator(state, ec)) {
            const std::string f = e.path().filename().string();
            if ((f.rfind("weights-", 0) == 0 || f.rfind("optimizer-", 0) == 0) && f != weights &&
                f != optimizer)
                stale.push_back(e.path());
        }
        for (const fs::path& f : stale)
            fs::remove(f, ec);
        model::writeSafetensors((out / "model.safetensors").string(), tensors, {{"format", "pt"}});
    };

    // 3. Training: AdamW, linear warm-up, cosine decay to 10%, gradient clipping at 1.
    // With --aux-weight, an attention loss pulls the --induction-heads towards the position
    // after the previous showing of the current token on repeated spans, and the --prev-heads
    // towards the previous token; its weight holds until --aux-hold, then falls linearly to 0
    // at --aux-until, so the final model stands on the next-token loss alone.
    const auto inductionHeads = headList(o.inductionHeads, "induction-heads", cfg);
    const auto prevHeads = headList(o.prevHeads, "prev-heads", cfg);
    const int64_t g = cfg.nHeads / cfg.nKvHeads;
    auto auxWeightAt = [&](int64_t s) {
        if (auxWeight <= 0 || s >= auxUntil)
            return 0.0;
        if (s < auxHold)
            return auxWeight;
        return auxWeight * static_cast<double>(auxUntil - s) /
               static_cast<double>(auxUntil - auxHold);
    };
    // Random copy spans draw from a range of ids that widens geometrically from
    // --random-ids-start to the whole vocabulary over --random-ids-steps (a curriculum).
    auto randomIdsAt = [&](int64_t s) {
        const int64_t full = tok->size() - 1;
        if (idsStart <= 0 || idsStart >= full || s >= idsSteps)
            return full;
        const double f =
            static_cast<double>(s) / static_cast<double>(std::max<int64_t>(1, idsSteps));
        return std::min<int64_t>(
            full, static_cast<int64_t>(idsStart * std::pow(double(full) / idsStart, f)));
    };
    double tokens = 0, lossAvg = 0, auxAvg = 0;
    const double t0 = elapsed();
    net->train();
    while (step < steps && elapsed() < minutes * 60) {
        job.step(step, steps, "step " + std::to_string(step));
        const double lr =
            step < warmup
                ? lrMax * (step + 1) / std::max<int64_t>(1, warmup)
                : lrMax * (0.1 + 0.45 * (1 + std::cos(M_PI * (step - warmup) /
                                                      std::max<int64_t>(1, steps - warmup))));
        for (auto& group : opt.param_groups())
            static_cast<torch::optim::AdamWOptions&>(group.options()).lr(lr);
        CopyRecipe recipe{pCopy,       copyBlocks, pRandom, randomIdsAt(step),
                          pRetokenize, tok.get(),  copyGap};
        const Batch batch = makeBatch(stream, B, T, seed, step, recipe);
        const double w = auxWeightAt(step);
        at::Tensor aux = at::zeros({}, at::kFloat);
        int64_t auxTerms = 0;
        model::CaptureHook hook;
        const at::Tensor indTarget = batch.induction.slice(1, 0, T);
        const at::Tensor prevTarget = at::arange(-1, T - 1, at::kLong).unsqueeze(0).expand({B, T});
        if (w > 0 && (!inductionHeads.empty() || !prevHeads.empty())) {
            hook = [&](int64_t layer, const at::Tensor& q, const at::Tensor& k, const at::Tensor&) {
                // −mean ln p(target) of one head over the positions that have a target
                auto term = [&](int64_t head, const at::Tensor& target) {
                    const at::Tensor valid = target.ge(0);
                    const int64_t n = valid.sum().item<int64_t>();
                    if (n == 0)
                        return;
                    const at::Tensor logp =
                        at::log_softmax(attention::causalLogits(q.narrow(1, head, 1),
                                                                k.narrow(1, head / g, 1), 0,
                                                                net->layerAttention(layer)),
                                        -1)
                            .squeeze(1); // [B, T, T]
                    const at::Tensor picked =
                        logp.gather(2, target.clamp_min(0).unsqueeze(2)).squeeze(2);
                    aux = aux - picked.masked_select(valid).sum() / static_cast<double>(n);
                    ++auxTerms;
                };
                for (const auto& [l, h] : inductionHeads)
                    if (l == layer)
                        term(h, indTarget);
                for (const auto& [l, h] : prevHeads)
                    if (l == layer)
                        term(h, prevTarget);
            };
        }
        const at::Tensor logits = net->forward(batch.ids.slice(1, 0, T), nullptr, {}, hook);
        const at::Tensor nll = at::nll_loss(at::log_softmax(logits.view({-1, cfg.vocabSize}), -1),
                                            batch.ids.slice(1, 1, T + 1).reshape(-1),
                                            /*weight=*/{}, at::Reduction::None);
        at::Tensor mask = batch.lmMask.slice(1, 0, T).reshape(-1).to(at::kFloat);
        if (copyLossWeight != 1.0) // position i has an induction target: its next token repeats
            mask = mask * at::where(batch.induction.slice(1, 0, T).reshape(-1).ge(0),
                                    at::scalar_tensor(copyLossWeight), at::scalar_tensor(1.0));
        const at::Tensor lmLoss = (nll * mask).sum() / mask.sum().clamp_min(1);
        const at::Tensor loss =
            auxTerms > 0 ? lmLoss + w * aux / static_cast<double>(auxTerms) : lmLoss;
        opt.zero_grad();
        loss.backward();
        torch::nn::utils::clip_grad_norm_(net->parameters(), 1.0);
        opt.step();
        ++step;
        tokens += static_cast<double>(B * T);
        const double l = lmLoss.item<double>();
        lossAvg = lossAvg == 0 ? l : 0.98 * lossAvg + 0.02 * l;
        if (auxTerms > 0) {
            const double x = aux.item<double>() / static_cast<double>(auxTerms);
            auxAvg = auxAvg == 0 ? x : 0.98 * auxAvg + 0.02 * x;
        }
        if (step % 25 == 0)
            logf(o,
                 "step %lld  loss %.3f  aux %.3f (weight %.3g)  lr %.2e  ids %lld  "
                 "%.0f tokens/s  %.1f min\n",
                 static_cast<long long>(step), lossAvg, auxAvg, w, lr,
                 static_cast<long long>(randomIdsAt(step)), tokens / (elapsed() - t0),
                 elapsed() / 60);
        if (evalEvery > 0 && step % evalEvery == 0) {
            net->eval();
            analysis::InductionOptions io;
            io.length = std::min<int64_t>(128, (cfg.maxPositions - 1) / 2);
            io.sequences = 2;
            io.seed = 7;
            const analysis::InductionReport r = analysis::inductionReport(*net, io);
            logf(o,
                 "eval %lld  induction best %.3f (L%lld H%lld)  prev-token max %.3f  "
                 "loss first %.3f second %.3f\n",
                 static_cast<long long>(step), r.bestInduction, static_cast<long long>(r.bestLayer),
                 static_cast<long long>(r.bestHead), r.prevToken.max().item<double>(), r.lossFirst,
                 r.lossSecond);
            // Copy probes on held-out text: a passage, its first 64 characters again, and
            // the next 64 characters to reproduce; plain greedy decoding and with token healing
            // (what `generate` does with a text prompt).
            if (tokenTexts.empty())
                for (int64_t id = 0; id < cfg.vocabSize; ++id)
                    tokenTexts.push_back(tok->decode({id}));
            int64_t passed = 0, healed = 0, tried = 0;
            for (const auto& probe : probes) {
                const auto ids = tok->encode(probe.prompt, true);
                if (static_cast<int64_t>(ids.size()) + 48 > cfg.maxPositions)
                    continue;
                const auto gen = model::greedyDecode(*net, ids, 40, {}, {eot});
                passed +=
                    analysis::reproducedChars(tok->decode(gen.newIds, true), probe.expected) >= 64;
                const model::HealedPrompt h = model::healPrompt(ids, tokenTexts);
                const auto hg = model::greedyDecodeHealed(
                    *net, h, tokenTexts, 40 + static_cast<int64_t>(ids.size() - h.ids.size()), {},
                    {eot});
                std::string text = tok->decode(hg.newIds, true);
                if (text.compare(0, h.removed.size(), h.removed) == 0)
                    text = text.substr(h.removed.size());
                healed += analysis::reproducedChars(text, probe.expected) >= 64;
                ++tried;
            }
            logf(o, "eval %lld  copy probes %lld of %lld (%lld with token healing)\n",
                 static_cast<long long>(step), static_cast<long long>(passed),
                 static_cast<long long>(tried), static_cast<long long>(healed));
            net->train();
        }
        if (step % saveEvery == 0)
            save();
    }
    save();
    TrainDemoResult r;
    r.steps = step;
    r.loss = lossAvg;
    r.minutes = elapsed() / 60;
    r.tokensPerSecond = tokens / std::max(1e-9, elapsed() - t0);
    return r;
}

} // namespace sparqlab::analysis
