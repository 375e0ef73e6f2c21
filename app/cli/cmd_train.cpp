// sparqlab-cli train-demo: trains the shipped demo model (a small Llama with GQA) on the
// State of the Union addresses before 2010, with our own byte-level BPE tokenizer and the
// runtime's own transformer modules. Seeded: batch n depends only on (seed, n), so a resumed
// run draws the same data as an uninterrupted one.

#include "commands.h"

#include "capture/model_config.h"
#include "capture/safetensors.h"
#include "capture/tokenizer.h"
#include "capture/transformer.h"

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>
#include <torch/nn/utils/clip_grad.h>
#include <torch/optim/adamw.h>
#include <torch/serialize.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

namespace sparqlab::cli {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

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
    const fs::path tmp = p.string() + ".tmp";
    {
        std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
        out << text;
        if (!out)
            throw std::runtime_error(p.string() + ": cannot write");
    }
    fs::rename(tmp, p);
}

/// Fills row[0, n) with a copy sequence: natural text (a window of the stream) into which a
/// span is written twice, the repeat after a gap of 0–63 tokens. The span is 32–383 tokens
/// for a 1024-token row and scales down for shorter rows (at least 8 tokens). It is text of
/// the stream, or with randomVocab > 0 ids drawn uniformly from [0, randomVocab), which then
/// recur (after 0–15 tokens of text each time) until the row is full: many retrievals per row.
void fillCopyRow(const std::vector<int64_t>& stream, int64_t* row, int64_t n, std::mt19937_64& rng,
                 int64_t randomVocab) {
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
    const int64_t gap = static_cast<int64_t>(u(rng) * 64);
    const int64_t src = offset(n);
    int64_t k = 0;
    for (int64_t i = 0; i < lead && k < n; ++i)
        row[k++] = stream[static_cast<size_t>(src + i)];
    const int64_t spanBegin = k;
    if (randomVocab > 0) { // ids drawn uniformly: only retrieval can predict their repeat
        std::uniform_int_distribution<int64_t> id(0, randomVocab - 1);
        for (int64_t i = 0; i < spanLen && k < n; ++i)
            row[k++] = id(rng);
    } else {
        const int64_t span = offset(spanLen);
        for (int64_t i = 0; i < spanLen && k < n; ++i)
            row[k++] = stream[static_cast<size_t>(span + i)];
    }
    const int64_t written = k - spanBegin;
    for (int64_t i = 0; i < gap && k < n; ++i)
        row[k++] = stream[static_cast<size_t>(src + lead + i)];
    for (int64_t i = 0; i < written && k < n; ++i)
        row[k++] = row[spanBegin + i];
    int64_t next = src + lead + gap;
    while (randomVocab > 0 && k < n) { // random spans recur until the row is full
        const int64_t between = static_cast<int64_t>(u(rng) * 16);
        for (int64_t i = 0; i < between && k < n; ++i)
            row[k++] = stream[static_cast<size_t>(next++)];
        for (int64_t i = 0; i < written && k < n; ++i)
            row[k++] = row[spanBegin + i];
    }
    while (k < n)
        row[k++] = stream[static_cast<size_t>(next++)];
}

/// One training batch [B, T+1] for step `step`: windows of the training stream, and with
/// probability pCopy a sequence that repeats spans of itself (so the model learns to
/// retrieve from its context: the paper's Repetition task needs it). A copy sequence is made
/// of `copyBlocks` consecutive parts, each with its own span written twice (more retrieval
/// per sequence; 1 gives one span over the whole row). A fraction pRandom of the spans are
/// random ids rather than text, which teaches retrieval fastest (nothing else predicts them).
at::Tensor makeBatch(const std::vector<int64_t>& stream, int64_t B, int64_t T, uint64_t seed,
                     int64_t step, double pCopy, int64_t copyBlocks, double pRandom,
                     int64_t vocab) {
    std::mt19937_64 rng(seed * 1000003ULL + static_cast<uint64_t>(step));
    std::uniform_real_distribution<double> u(0, 1);
    const int64_t n = static_cast<int64_t>(stream.size());
    at::Tensor batch = at::empty({B, T + 1}, at::kLong);
    auto* out = batch.data_ptr<int64_t>();
    for (int64_t b = 0; b < B; ++b) {
        int64_t* row = out + b * (T + 1);
        if (u(rng) < pCopy) {
            const int64_t part = (T + 1) / copyBlocks;
            for (int64_t c = 0; c < copyBlocks; ++c) {
                const int64_t begin = c * part;
                const int64_t end = c + 1 == copyBlocks ? T + 1 : begin + part;
                const bool random = pRandom > 0 && u(rng) < pRandom;
                fillCopyRow(stream, row + begin, end - begin, rng, random ? vocab - 1 : 0);
            }
        } else {
            const int64_t src = static_cast<int64_t>(u(rng) * static_cast<double>(n - (T + 1) - 1));
            for (int64_t k = 0; k <= T; ++k)
                row[k] = stream[static_cast<size_t>(src + k)];
        }
    }
    return batch;
}

} // namespace

int runTrainDemo(const std::vector<std::string>& argv) {
    const Args a(argv,
                 {"data", "out", "state", "steps", "minutes", "seed", "batch", "seq", "vocab", "lr",
                  "save-every", "copy-fraction", "copy-blocks", "random-copy", "context"},
                 {"resume"});
    if (!a.positional().empty())
        throw UsageError("unexpected argument '" + a.positional().front() + "'");
    const std::string data = a.required("data");
    const fs::path out = a.get("out").value_or("resources/demo-model");
    const fs::path state = a.get("state").value_or("build/demo-train");
    const int64_t steps = a.integer("steps").value_or(3000);
    const double minutes = a.number("minutes").value_or(1e9);
    const uint64_t seed = static_cast<uint64_t>(a.integer("seed").value_or(1234));
    const int64_t B = a.integer("batch").value_or(4);
    const int64_t T = a.integer("seq").value_or(1024);
    const int64_t vocab = a.integer("vocab").value_or(4096);
    const double lrMax = a.number("lr").value_or(2e-3);
    const int64_t saveEvery = a.integer("save-every").value_or(200);
    const double pCopy = a.number("copy-fraction").value_or(0.25);
    const int64_t copyBlocks = a.integer("copy-blocks").value_or(1);
    const double pRandom = a.number("random-copy").value_or(0.0);
    const int64_t context = a.integer("context").value_or(T);
    if (steps < 1 || B < 1 || T < 16 || vocab < 300 || saveEvery < 1)
        throw UsageError(
            "steps, batch, seq (>= 16), vocab (>= 300) and save-every must be positive");
    if (!(pCopy >= 0 && pCopy <= 1))
        throw UsageError("--copy-fraction must be in [0, 1]");
    if (!(pRandom >= 0 && pRandom <= 1))
        throw UsageError("--random-copy must be in [0, 1]");
    if (context < T)
        throw UsageError("--context must be at least --seq");
    if (copyBlocks < 1 || (T + 1) / copyBlocks < 96)
        throw UsageError("--copy-blocks must be at least 1 and leave 96 tokens per block");
    std::error_code ec;
    fs::create_directories(out, ec);
    fs::create_directories(state, ec);

    const auto start = std::chrono::steady_clock::now();
    auto elapsed = [&]() {
        return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    };
    const Corpus corpus = readCorpus(data);
    std::fprintf(stderr, "train-demo: %zu training and %zu validation addresses\n",
                 corpus.trainTexts.size(), corpus.validTexts.size());

    // 1. Tokenizer (trained once; a resumed run keeps the one its weights were trained with,
    // kept in the state folder, even when --out names a new folder).
    const fs::path tokPath = out / "tokenizer.json";
    const fs::path stateTok = state / "tokenizer.json";
    const bool resuming = a.has("resume") && fs::exists(state / "state.json");
    if (resuming && fs::exists(stateTok)) {
        if (!fs::exists(tokPath) || !fs::equivalent(stateTok, tokPath))
            writeText(tokPath, readTextFile(stateTok.string()));
    } else if (resuming && !fs::exists(tokPath)) {
        throw std::runtime_error(stateTok.string() +
                                 ": missing (the tokenizer the saved weights were trained with)");
    } else if (!resuming) {
        const std::string tj =
            capture::trainByteLevelBpe(corpus.trainTexts, vocab, {"<|endoftext|>"});
        writeText(tokPath, tj);
        std::fprintf(stderr, "train-demo: tokenizer trained (%lld ids) in %.0f s\n",
                     static_cast<long long>(vocab), elapsed());
    }
    if (!fs::exists(stateTok)) // (older state folders kept it only in --out)
        writeText(stateTok, readTextFile(tokPath.string()));
    const auto tok = capture::Tokenizer::fromFile(tokPath.string());
    const int64_t eot = tok->size() - 1;
    std::vector<int64_t> stream;
    for (const std::string& t : corpus.trainTexts) {
        const auto ids = tok->encode(t, false);
        stream.insert(stream.end(), ids.begin(), ids.end());
        stream.push_back(eot);
    }
    std::fprintf(stderr, "train-demo: %zu training tokens (%.2f characters per token)\n",
                 stream.size(), [&] {
                     double chars = 0;
                     for (const auto& t : corpus.trainTexts)
                         chars += static_cast<double>(t.size());
                     return chars / static_cast<double>(stream.size());
                 }());

    // 2. Model and optimiser.
    const json cfgJson = demoConfig(tok->size(), context);
    writeText(out / "config.json", cfgJson.dump(2));
    writeText(out / "generation_config.json",
              json{{"bos_token_id", eot}, {"eos_token_id", eot}}.dump(2));
    const capture::ModelConfig cfg =
        capture::parseModelConfig(cfgJson.dump(), (out / "config.json").string());
    capture::CausalLM net(cfg);
    net->initWeights(seed);
    torch::optim::AdamW opt(net->parameters(),
                            torch::optim::AdamWOptions(lrMax).betas({0.9, 0.95}).weight_decay(0.1));
    int64_t step = 0;
    // The trainer's state: weights-N.safetensors and optimizer-N.pt of step N, each written
    // under a temporary name and renamed, then state.json (renamed too) names them. A run
    // killed at any point leaves state.json naming a complete pair, from which it resumes.
    const fs::path statePath = state / "state.json";
    if (a.has("resume") && fs::exists(statePath)) {
        std::ifstream in(statePath);
        json st;
        try {
            st = json::parse(in);
            step = st.at("step").get<int64_t>();
        } catch (const json::exception& e) {
            throw std::runtime_error(statePath.string() + ": not a trainer state (" + e.what() +
                                     ")");
        }
        // (folders of older versions kept weights/model.safetensors and optimizer.pt)
        const fs::path weights =
            state / st.value("weights", std::string("weights/model.safetensors"));
        const fs::path optimizer = state / st.value("optimizer", std::string("optimizer.pt"));
        net->loadWeights(capture::Checkpoint::openFile(weights.string()));
        try {
            torch::load(opt, optimizer.string());
        } catch (const c10::Error&) {
            throw std::runtime_error(optimizer.string() + ": cannot read the optimizer state");
        }
        std::fprintf(stderr, "train-demo: resumed at step %lld\n", static_cast<long long>(step));
    }
    auto save = [&]() {
        std::vector<std::pair<std::string, at::Tensor>> tensors;
        for (const auto& p : net->named_parameters())
            tensors.emplace_back(p.key(), p.value().detach());
        const std::string n = std::to_string(step);
        const std::string weights = "weights-" + n + ".safetensors";
        const std::string optimizer = "optimizer-" + n + ".pt";
        capture::writeSafetensors((state / weights).string(), tensors, {{"format", "pt"}});
        const fs::path optTmp = state / (optimizer + ".tmp");
        torch::save(opt, optTmp.string());
        fs::rename(optTmp, state / optimizer);
        writeText(
            statePath,
            json{{"step", step}, {"seed", seed}, {"weights", weights}, {"optimizer", optimizer}}
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
        capture::writeSafetensors((out / "model.safetensors").string(), tensors,
                                  {{"format", "pt"}});
    };

    // 3. Training: AdamW, linear warm-up, cosine decay to 10%, gradient clipping at 1.
    constexpr int64_t kWarmup = 100;
    double tokens = 0, lossAvg = 0;
    const double t0 = elapsed();
    net->train();
    while (step < steps && elapsed() < minutes * 60) {
        const double lr =
            step < kWarmup
                ? lrMax * (step + 1) / kWarmup
                : lrMax * (0.1 + 0.45 * (1 + std::cos(M_PI * (step - kWarmup) /
                                                      std::max<int64_t>(1, steps - kWarmup))));
        for (auto& group : opt.param_groups())
            static_cast<torch::optim::AdamWOptions&>(group.options()).lr(lr);
        const at::Tensor batch =
            makeBatch(stream, B, T, seed, step, pCopy, copyBlocks, pRandom, tok->size());
        const at::Tensor logits = net->forward(batch.slice(1, 0, T), nullptr);
        const at::Tensor loss = at::nll_loss(at::log_softmax(logits.view({-1, cfg.vocabSize}), -1),
                                             batch.slice(1, 1, T + 1).reshape(-1));
        opt.zero_grad();
        loss.backward();
        torch::nn::utils::clip_grad_norm_(net->parameters(), 1.0);
        opt.step();
        ++step;
        tokens += static_cast<double>(B * T);
        const double l = loss.item<double>();
        lossAvg = lossAvg == 0 ? l : 0.98 * lossAvg + 0.02 * l;
        if (step % 25 == 0)
            std::fprintf(stderr, "step %lld  loss %.3f  lr %.2e  %.0f tokens/s  %.1f min\n",
                         static_cast<long long>(step), lossAvg, lr, tokens / (elapsed() - t0),
                         elapsed() / 60);
        if (step % saveEvery == 0)
            save();
    }
    save();
    std::printf("%s\n", json{{"steps", step},
                             {"loss", lossAvg},
                             {"minutes", elapsed() / 60},
                             {"tokens_per_s", tokens / std::max(1e-9, elapsed() - t0)}}
                            .dump()
                            .c_str());
    return 0;
}

} // namespace sparqlab::cli
