// The model subcommands of sparqlab-cli (CONTRACTS.md §2): info, tokenize, detokenize,
// logits, generate, capture, bpc; and init-model, which writes a randomly initialised model.

#include "commands.h"
#include "model_args.h"

#include "analysis/calibrate_run.h"
#include "analysis/induction.h"
#include "attention/runtime_info.h"
#include "base/atomic_file.h"
#include "capture/capture_file.h"
#include "capture/h5.h"
#include "model/input_error.h"
#include "model/model.h"
#include "model/model_family.h"
#include "model/safetensors.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace sparqlab::cli {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

std::vector<int64_t> idsFromJson(const json& j, const std::string& where) {
    if (!j.is_array())
        throw std::runtime_error(where + ": expected a JSON array of token ids");
    std::vector<int64_t> ids;
    for (const json& x : j) {
        if (!x.is_number_integer())
            throw std::runtime_error(where + ": token ids must be integers");
        ids.push_back(x.get<int64_t>());
    }
    return ids;
}

json parseJson(const std::string& text, const std::string& where) {
    try {
        return json::parse(text);
    } catch (const json::exception& e) {
        throw std::runtime_error(where + ": malformed JSON: " + e.what());
    }
}

/// At most one of `options` (the alternatives of a usage's "(A | B)"): a second one would be
/// ignored unseen.
void atMostOne(const Args& a, const std::vector<std::string>& options) {
    std::string given;
    for (const std::string& o : options)
        if (a.has(o)) {
            if (!given.empty())
                throw UsageError("give --" + given + " or --" + o + ", not both");
            given = o;
        }
}

/// IDS: --ids 1,2,3 or --ids-file F.json (one of them). Empty optional when neither is given.
std::optional<std::vector<int64_t>> idsOption(const Args& a) {
    atMostOne(a, {"ids", "ids-file"}); // (--ids won silently)
    if (auto ids = a.integerList("ids"))
        return ids;
    if (const auto f = a.get("ids-file"))
        return idsFromJson(parseJson(readTextFile(*f), *f), *f);
    return std::nullopt;
}

std::vector<std::string> lines(const std::string& path) {
    std::vector<std::string> out;
    std::istringstream in(readTextFile(path));
    std::string line;
    while (std::getline(in, line))
        if (!line.empty() && line != "\r")
            out.push_back(line);
    return out;
}

const std::set<std::string> kChatValued{"system", "messages"};
const std::set<std::string> kChatFlags{"chat"};

/// --chat (or --system/--messages): the model's chat template, which text prompts go through.
std::optional<text::ChatTemplate> chatOption(const Args& a, const model::Model& model) {
    if (!a.has("chat") && !a.has("system") && !a.has("messages"))
        return std::nullopt;
    if (a.has("ids") || a.has("ids-file"))
        throw UsageError("--chat renders a text prompt; --ids and --ids-file are ids already");
    return text::requireChatTemplate(model.folder());
}

/// A text prompt's ids: as it is (with the tokenizer's special tokens), or as a user turn
/// (after --system's) of the chat template with the generation prompt, tokenized without
/// added special tokens as apply_chat_template(tokenize=True) does.
std::vector<int64_t> textIds(const Args& a, const std::optional<text::ChatTemplate>& chat,
                             const model::Model& model, const std::string& text) {
    if (!chat)
        return model.tokenizer().encode(text, true);
    const auto messages = text::userConversation(text, a.get("system").value_or(""));
    return text::chatIds(model.tokenizer(), chat->render(messages, true));
}

const std::vector<std::string> kPromptSources{"prompt", "prompt-file", "messages", "ids",
                                              "ids-file"};

std::vector<int64_t> promptIds(const Args& a, model::Model& model) {
    atMostOne(a, kPromptSources);
    const auto chat = chatOption(a, model);
    if (auto ids = idsOption(a))
        return *ids;
    if (const auto f = a.get("messages")) {
        const auto messages = text::parseMessages(readTextFile(*f), *f);
        return text::chatIds(model.tokenizer(), chat->render(messages, true));
    }
    if (const auto p = a.get("prompt"))
        return textIds(a, chat, model, *p);
    if (const auto f = a.get("prompt-file"))
        return textIds(a, chat, model, readTextFile(*f));
    throw UsageError(
        "give the prompt with --prompt, --prompt-file, --messages, --ids or --ids-file");
}

void noPositional(const Args& a) {
    if (!a.positional().empty())
        throw UsageError("unexpected argument '" + a.positional().front() + "'");
}

const std::set<std::string> kIdsValued{"ids", "ids-file"};

std::set<std::string> join(std::set<std::string> a, const std::set<std::string>& b) {
    a.insert(b.begin(), b.end());
    return a;
}

/// Checks `attn` against the model (the default r fitted to its head dimension: the note to
/// say after the run is returned); Loki and Double Sparsity without a calibration file
/// calibrate on `ids` (the prompt, or the text's first window) and say so on stderr.
std::string prepareAttention(const Args& a, attention::AttentionConfig& attn, model::Model& model,
                             const std::vector<int64_t>& ids, const char* command) {
    const model::ModelConfig& c = model.config();
    const std::string rNote = fitDefaultR(a, attn, c.headDim);
    attn.validateFor(c.headDim, c.nLayers, c.nHeads, c.nKvHeads);
    if (!attention::methodInfo(attn.method).calibrated || attn.calibration)
        return rNote;
    const int64_t n = std::min<int64_t>(static_cast<int64_t>(ids.size()), c.maxPositions);
    const std::vector<int64_t> head(ids.begin(), ids.begin() + n);
    attn.calibration = analysis::calibrateOnTokens(model, head, attn.method);
    std::fprintf(stderr,
                 "%s: %s calibrated on the %s itself (%lld tokens); give %s F.h5 "
                 "(sparqlab-cli calibrate) to use a calibration file\n",
                 command, attention::methodName(attn.method).c_str(),
                 std::string(command) == "bpc" ? "text" : "prompt", static_cast<long long>(n),
                 analysis::calibrationOption(attn.method).c_str());
    return rNote;
}

double secondsSince(std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

} // namespace

/// Opens --model with the weights in the dtype --compute asks for (auto: float32 when it fits,
/// else a half-precision checkpoint's own dtype), with a progress bar while they load.
std::unique_ptr<model::Model> openModel(const Args& a, model::ModelOpenOptions o) {
    const std::string compute = a.get("compute").value_or("auto");
    if (compute == "f32")
        o.compute = model::ComputeDtype::Float32;
    else if (compute == "stored")
        o.compute = model::ComputeDtype::Stored;
    else if (compute != "auto")
        throw UsageError("--compute takes auto, f32 or stored, got '" + compute + "'");
    if (const auto device = a.get("device")) {
        try {
            o.device = attention::requireDevice(*device);
        } catch (const std::invalid_argument& e) {
            throw UsageError(e.what());
        }
    }
    ProgressBar bar("load");
    o.job = bar.job();
    return model::Model::open(a.required("model"), o);
}

int runInfo(const std::vector<std::string>& argv) {
    const Args a(argv, {"model"}, {});
    noPositional(a);
    model::ModelOpenOptions o;
    o.loadWeights = false;
    o.loadTokenizer = false;
    const auto model = openModel(a, o);
    const model::ModelConfig& c = model->config();
    const model::Checkpoint ck(model->folder());
    json j{{"architecture", c.architectureName},
           {"family", c.family},
           {"n_layers", c.nLayers},
           {"n_heads", c.nHeads},
           {"n_kv_heads", c.nKvHeads},
           {"head_dim", c.headDim},
           {"hidden_size", c.hiddenSize},
           {"vocab_size", c.vocabSize},
           {"max_positions", c.maxPositions},
           {"dtype", model::torchDtypeName(ck.floatDtype())},
           {"parameters", ck.parameterCount()},
           {"folder", model->folder()}};
    if (!c.quantization.method.empty()) // the stored form of the weights "dtype" names
        j["quantization"] = c.quantization.describe();
    // The attention modifiers (CONTRACTS.md §7), only where the model has them.
    const double defaultScale = 1.0 / std::sqrt(static_cast<double>(c.headDim));
    if (std::abs(c.attnScale - defaultScale) > 1e-12 * defaultScale)
        j["attn_scale"] = c.attnScale;
    if (c.attnSoftcap > 0)
        j["attn_softcap"] = c.attnSoftcap;
    if (c.finalSoftcap > 0)
        j["final_logit_softcap"] = c.finalSoftcap;
    if (!c.layerWindow.empty())
        j["layer_sliding_window"] = c.layerWindow;
    j["attention"] = json::parse(model::attentionFeaturesJson(c));
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
}

int runTokenize(const std::vector<std::string>& argv) {
    const Args a(argv, {"model", "text", "text-file", "jsonl"}, {"no-special"});
    noPositional(a);
    atMostOne(a, {"text", "text-file", "jsonl"}); // (one was used, the rest ignored)
    const auto tok = text::Tokenizer::fromFolder(model::resolveModelFolder(a.required("model")));
    const bool special = !a.has("no-special");
    auto one = [&](const std::string& text) {
        const std::vector<int64_t> ids = tok->encode(text, special);
        return json{{"ids", ids}, {"tokens", tok->tokens(ids)}}.dump();
    };
    if (const auto t = a.get("text"))
        std::printf("%s\n", one(*t).c_str());
    else if (const auto f = a.get("text-file"))
        std::printf("%s\n", one(readTextFile(*f)).c_str());
    else if (const auto jl = a.get("jsonl")) {
        const auto ls = lines(*jl);
        for (size_t i = 0; i < ls.size(); ++i) {
            const json j = parseJson(ls[i], *jl + " line " + std::to_string(i + 1));
            if (!j.is_string())
                throw std::runtime_error(*jl + " line " + std::to_string(i + 1) +
                                         ": expected a JSON string");
            std::printf("%s\n", one(j.get<std::string>()).c_str());
        }
    } else
        throw UsageError("give the text with --text, --text-file or --jsonl");
    return 0;
}

int runDetokenize(const std::vector<std::string>& argv) {
    const Args a(argv, {"model", "ids", "ids-file", "jsonl"}, {"skip-special"});
    noPositional(a);
    atMostOne(a, {"ids", "ids-file", "jsonl"});
    const auto tok = text::Tokenizer::fromFolder(model::resolveModelFolder(a.required("model")));
    const bool skip = a.has("skip-special");
    if (const auto jl = a.get("jsonl")) {
        const auto ls = lines(*jl);
        for (size_t i = 0; i < ls.size(); ++i) {
            const std::string where = *jl + " line " + std::to_string(i + 1);
            std::printf(
                "%s\n",
                json{{"text", tok->decode(idsFromJson(parseJson(ls[i], where), where), skip)}}
                    .dump()
                    .c_str());
        }
        return 0;
    }
    const auto ids = idsOption(a);
    if (!ids)
        throw UsageError("give the ids with --ids, --ids-file or --jsonl");
    std::printf("%s\n", json{{"text", tok->decode(*ids, skip)}}.dump().c_str());
    return 0;
}

int runLogits(const std::vector<std::string>& argv) {
    const Args a(argv, join({"model", "out", "compute", "device"}, kIdsValued), {});
    noPositional(a);
    const auto ids = idsOption(a);
    if (!ids)
        throw UsageError("give the ids with --ids or --ids-file");
    const std::string out = a.required("out");
    model::ModelOpenOptions o;
    o.loadTokenizer = false;
    const auto model = openModel(a, o);
    const at::Tensor logits = model->logits(*ids);
    h5::File f = h5::File::create(out);
    f.root().setAttr("model", model->spec());
    f.root().write("logits", logits.contiguous());
    f.commit();
    return 0;
}

int runGenerate(const std::vector<std::string>& argv) {
    const Args a(
        argv,
        join(join(join({"model", "prompt", "prompt-file", "max-new-tokens", "compute", "device"},
                       kIdsValued),
                  kAttnValued),
             kChatValued),
        join(join({"json", "token-healing", "no-token-healing"}, kAttnFlags), kChatFlags));
    noPositional(a);
    atMostOne(a, kPromptSources); // before the model loads
    const int64_t n = a.integer("max-new-tokens").value_or(-1);
    if (n < 0)
        throw UsageError("--max-new-tokens N (N >= 0) is required");
    attention::AttentionConfig attn = attentionConfig(a);
    const auto model = openModel(a);
    const std::vector<int64_t> prompt = promptIds(a, *model);
    const std::string rNote = prepareAttention(a, attn, *model, prompt, "generate");
    // Token healing is on for a text prompt (its last word may be cut, as a copy probe's
    // 64 characters cut one), off for ids given as they are.
    if (a.has("token-healing") && a.has("no-token-healing"))
        throw UsageError("give --token-healing or --no-token-healing, not both");
    // A chat prompt ends in the template's generation prompt: nothing to heal.
    const bool textPrompt = (a.has("prompt") || a.has("prompt-file")) && !a.has("chat") &&
                            !a.has("system") && !a.has("messages");
    const bool heal = a.has("token-healing") || (textPrompt && !a.has("no-token-healing"));
    if (heal && !model->hasTokenizer())
        throw UsageError("--token-healing needs the model's tokenizer");
    ProgressBar bar("generate");
    const model::Generation g = heal ? model->generateHealed(prompt, n, attn, true, bar.job())
                                     : model->generate(prompt, n, attn, true, bar.job());
    const std::string text = model->hasTokenizer() ? model->continuationText(g) : "";
    if (a.has("json")) {
        json j{{"prompt_ids", g.promptIds}, {"new_ids", g.newIds}, {"text", text}};
        if (heal)
            j["healed"] = g.healed;
        std::printf("%s\n", j.dump().c_str());
    } else if (model->hasTokenizer())
        std::printf("%s\n", text.c_str());
    else
        std::printf("%s\n", json(g.newIds).dump().c_str());
    std::fputs(rNote.c_str(), stderr);
    return 0;
}

int runCapture(const std::vector<std::string>& argv) {
    const Args a(
        argv,
        join(join({"model", "prompt-file", "prompts-file", "out", "generate", "compute", "device"},
                  kIdsValued),
             {"system"}),
        join({"all-queries", "float16"}, kChatFlags));
    noPositional(a);
    atMostOne(a, {"prompt-file", "prompts-file", "ids", "ids-file"});
    const std::string out = a.required("out");
    const int64_t generate = a.integer("generate").value_or(0);
    if (generate < 0)
        throw UsageError("--generate needs N >= 0");
    const auto t0 = std::chrono::steady_clock::now();
    const auto model = openModel(a);
    const double loadSeconds = secondsSince(t0);
    const auto chat = chatOption(a, *model);
    std::vector<std::vector<int64_t>> prompts;
    if (auto ids = idsOption(a)) {
        prompts.push_back(*ids);
    } else if (const auto f = a.get("prompt-file")) {
        prompts.push_back(textIds(a, chat, *model, readTextFile(*f)));
    } else if (const auto jl = a.get("prompts-file")) {
        const auto ls = lines(*jl);
        for (size_t i = 0; i < ls.size(); ++i) {
            const std::string where = *jl + " line " + std::to_string(i + 1);
            const json j = parseJson(ls[i], where);
            if (j.is_object() && j.contains("ids"))
                prompts.push_back(idsFromJson(j["ids"], where));
            else if (j.is_object() && j.contains("text") && j["text"].is_string())
                prompts.push_back(textIds(a, chat, *model, j["text"].get<std::string>()));
            else
                throw std::runtime_error(where + ": expected {\"text\": …} or {\"ids\": […]}");
        }
        if (prompts.empty())
            throw std::runtime_error(*jl + ": no prompts");
    } else {
        throw UsageError("give prompts with --prompt-file, --prompts-file, --ids or --ids-file");
    }
    for (const auto& p : prompts) // check everything before writing anything
        model->checkIds(p, generate);

    capture::CaptureWriter w(out, model->captureInfo(), a.has("float16"));
    ProgressBar bar("capture");
    double forwardSeconds = 0;
    int64_t tokens = 0;
    for (size_t i = 0; i < prompts.size(); ++i) {
        std::vector<int64_t> ids = prompts[i];
        const int64_t lastPrompt = static_cast<int64_t>(ids.size()) - 1;
        if (generate > 0) {
            const model::Generation g = model->generate(ids, generate, {}, false);
            ids.insert(ids.end(), g.newIds.begin(), g.newIds.end());
        }
        const auto t1 = std::chrono::steady_clock::now();
        model::CaptureExample e = model->capture(ids, a.has("all-queries"), lastPrompt);
        forwardSeconds += secondsSince(t1);
        tokens += static_cast<int64_t>(ids.size());
        w.add(e);
        bar.update(static_cast<int64_t>(i + 1), static_cast<int64_t>(prompts.size()));
    }
    w.finish();
    if (generate > 0 && !a.has("all-queries")) // (CONTRACTS.md §3: q_positions)
        std::fprintf(stderr, "note: the capture keeps the query of each prompt's last position "
                             "only; --all-queries keeps the generated tokens' queries too\n");
    // What it cost: loading, the forward passes that captured, the file.
    std::error_code ec;
    const auto bytes = std::filesystem::file_size(out, ec);
    std::printf("captured %zu prompt%s (%lld tokens) with %s weights computed in %s: load %.1f s, "
                "forward %.1f s (%.0f tokens/s); wrote %s (%.1f MB)\n",
                prompts.size(), prompts.size() == 1 ? "" : "s", static_cast<long long>(tokens),
                model->weightsDtype().c_str(), model::torchDtypeName(model->computeDtype()).c_str(),
                loadSeconds, forwardSeconds,
                forwardSeconds > 0 ? static_cast<double>(tokens) / forwardSeconds : 0.0,
                out.c_str(), ec ? 0.0 : static_cast<double>(bytes) / 1e6);
    return 0;
}

int runBpc(const std::vector<std::string>& argv) {
    const Args a(argv, join({"model", "text-file", "compute", "device"}, kAttnValued),
                 join({"json"}, kAttnFlags));
    noPositional(a);
    attention::AttentionConfig attn = attentionConfig(a);
    const std::string file = a.required("text-file");
    const std::string text = readTextFile(file);
    const auto model = openModel(a);
    const std::string rNote =
        attention::methodInfo(attn.method).calibrated && !attn.calibration
            ? prepareAttention(a, attn, *model, model->tokenizer().encode(text, true), "bpc")
            : prepareAttention(a, attn, *model, {}, "bpc");
    ProgressBar bar("bpc");
    model::BpcResult r;
    try {
        r = model->bitsPerCharacter(text, attn, bar.job());
    } catch (const sparqlab::model::InputError& e) { // the text's fault: name its file
        throw sparqlab::model::InputError(file + ": " + e.what());
    }
    if (a.has("json"))
        std::printf("%s\n", json{{"bpc", r.bpc()},
                                 {"chars", r.chars},
                                 {"tokens", r.tokens},
                                 {"scored_tokens", r.scored},
                                 {"window", r.window},
                                 {"stride", r.stride},
                                 {"method", attention::methodName(attn.method)}}
                                .dump()
                                .c_str());
    else
        std::printf("%.4f bits per character (%lld characters, %lld tokens, windows of %lld with "
                    "stride %lld)\n",
                    r.bpc(), static_cast<long long>(r.chars), static_cast<long long>(r.tokens),
                    static_cast<long long>(r.window), static_cast<long long>(r.stride));
    std::fputs(rNote.c_str(), stderr);
    return 0;
}

int runHeads(const std::vector<std::string>& argv) {
    const Args a(argv, {"model", "length", "sequences", "seed", "compute", "device"}, {"json"});
    noPositional(a);
    analysis::InductionOptions o;
    o.length = a.integer("length").value_or(o.length);
    o.sequences = a.integer("sequences").value_or(o.sequences);
    o.seed = static_cast<uint64_t>(a.integer("seed").value_or(0));
    if (o.length < 2 || o.sequences < 1)
        throw UsageError("--length must be at least 2 and --sequences at least 1");
    model::ModelOpenOptions mo;
    mo.loadTokenizer = false;
    const auto model = openModel(a, mo);
    const analysis::InductionReport r = analysis::inductionReport(*model->net(), o);
    if (a.has("json")) {
        std::printf("%s\n", analysis::inductionJson(r).c_str());
        return 0;
    }
    std::printf("%lld random tokens shown twice (%lld sequences): loss %.3f nats on the first "
                "showing, %.3f on the second\n",
                static_cast<long long>(r.length), static_cast<long long>(r.sequences), r.lossFirst,
                r.lossSecond);
    std::printf("layer head  prev-token  induction\n");
    for (int64_t l = 0; l < r.layers; ++l)
        for (int64_t h = 0; h < r.heads; ++h)
            std::printf("%5lld %4lld  %10.3f  %9.3f\n", static_cast<long long>(l),
                        static_cast<long long>(h), r.prevToken[l][h].item<double>(),
                        r.induction[l][h].item<double>());
    return 0;
}

int runInitModel(const std::vector<std::string>& argv) {
    const Args a(argv, {"config", "out", "seed", "dtype", "tokenizer", "shard-gb"}, {});
    noPositional(a);
    const std::string configPath = a.required("config");
    const std::string out = a.required("out");
    const model::ModelConfig c = model::readModelConfig(configPath);
    // A size the config leaves out takes Hugging Face's default, which may be a 7B model's: said
    // once the model is written (a tiny config without hidden_size wrote 562 MB without a word).
    // A vision-language folder keeps its language model's sizes under text_config.
    std::string sizeNotes;
    {
        const json file =
            json::parse(model::pythonLiteralsAsStrings(readTextFile(configPath)), nullptr, false);
        const json& given =
            file.is_object() && file.contains("text_config") && file["text_config"].is_object()
                ? file["text_config"]
                : file;
        const auto has = [&](std::initializer_list<const char*> keys) {
            for (const char* k : keys)
                if (given.is_object() && given.contains(k))
                    return true;
            return false;
        };
        const struct {
            std::initializer_list<const char*> keys;
            int64_t value;
        } sizes[] = {{{"hidden_size", "n_embd", "d_model"}, c.hiddenSize},
                     // (Nemotron-H counts its layers from its pattern)
                     {{"num_hidden_layers", "n_layer", "num_layers", "hybrid_override_pattern",
                       "layers_block_type"},
                      c.nLayers},
                     {{"num_attention_heads", "n_head"}, c.nHeads},
                     // (DeepSeek-V4: its experts' width, of which intermediate_size is an alias)
                     {{c.compressed.active() ? "moe_intermediate_size" : "intermediate_size",
                       "intermediate_size", "n_inner", "ffn_dim", "block_ff_dim"},
                      c.intermediateSize},
                     {{"vocab_size"}, c.vocabSize}};
        for (const auto& size : sizes)
            if (!has(size.keys))
                sizeNotes += "note: " + configPath + " gives no " + *size.keys.begin() +
                             ": Hugging Face's default " + std::to_string(size.value) +
                             " is used\n";
    }
    const std::string dtype = a.get("dtype").value_or("f32");
    if (dtype != "f32" && dtype != "bf16" && dtype != "f16")
        throw UsageError("--dtype must be f32, f16 or bf16");
    const at::ScalarType st = dtype == "bf16"  ? at::kBFloat16
                              : dtype == "f16" ? at::kHalf
                                               : at::kFloat;
    const double shardGb = a.number("shard-gb").value_or(5.0);
    if (!(shardGb > 0))
        throw UsageError("--shard-gb must be positive");
    const int64_t shardBytes = static_cast<int64_t>(shardGb * 1e9);
    // The module's parameters are only allocated, never touched: values are made one tensor
    // at a time, converted and written, so a checkpoint larger than memory can be made.
    model::CausalLM net(c);
    std::error_code ec;
    fs::create_directories(out, ec);
    if (ec)
        throw std::runtime_error(out + ": cannot create the folder: " + ec.message());
    // Shards of at most --shard-gb, in parameter order, as HF names them.
    std::vector<int> shardOf;
    std::vector<int64_t> shardSize{0};
    int64_t total = 0;
    // A table of expert ids (DeepSeek-V4's tid2eid) is written as transformers saves it: int64.
    const auto dtypeOf = [st](const std::string& name) {
        return name.size() > 8 && name.compare(name.size() - 8, 8, ".tid2eid") == 0 ? at::kLong
                                                                                    : st;
    };
    for (const auto& p : net->named_parameters()) {
        const int64_t bytes =
            p.value().numel() * static_cast<int64_t>(at::elementSize(dtypeOf(p.key())));
        if (shardSize.back() > 0 && shardSize.back() + bytes > shardBytes)
            shardSize.push_back(0);
        shardSize.back() += bytes;
        shardOf.push_back(static_cast<int>(shardSize.size()) - 1);
        total += bytes;
    }
    const int shards = static_cast<int>(shardSize.size());
    auto shardName = [shards](int i) {
        if (shards == 1)
            return std::string("model.safetensors");
        char buf[64];
        std::snprintf(buf, sizeof buf, "model-%05d-of-%05d.safetensors", i + 1, shards);
        return std::string(buf);
    };
    std::vector<std::pair<std::string, at::Tensor>> tensors;
    json weightMap = json::object();
    size_t index = 0;
    int current = 0;
    net->initialValues(static_cast<uint64_t>(a.integer("seed").value_or(0)),
                       [&](const std::string& name, const at::Tensor& value) {
                           const int shard = shardOf[index++];
                           if (shard != current) {
                               model::writeSafetensors(
                                   (fs::path(out) / shardName(current)).string(), tensors,
                                   {{"format", "pt"}});
                               tensors.clear();
                               current = shard;
                           }
                           tensors.emplace_back(name, value.to(dtypeOf(name)));
                           weightMap[name] = shardName(shard);
                       });
    model::writeSafetensors((fs::path(out) / shardName(current)).string(), tensors,
                            {{"format", "pt"}});
    if (shards > 1) {
        const fs::path idx = fs::path(out) / "model.safetensors.index.json";
        base::writeFileAtomically(
            idx.string(),
            json{{"metadata", {{"total_size", total}}}, {"weight_map", weightMap}}.dump(2));
    }
    fs::copy_file(configPath, fs::path(out) / "config.json", fs::copy_options::overwrite_existing,
                  ec);
    if (ec)
        throw std::runtime_error(out + ": cannot write config.json: " + ec.message());
    if (const auto t = a.get("tokenizer")) {
        fs::copy_file(*t, fs::path(out) / "tokenizer.json", fs::copy_options::overwrite_existing,
                      ec);
        if (ec)
            throw std::runtime_error(*t + ": cannot copy: " + ec.message());
    }
    std::fputs(sizeNotes.c_str(), stderr);
    std::printf("%s: %lld parameters in %d file%s\n", out.c_str(),
                static_cast<long long>(c.parameterCount()), shards, shards == 1 ? "" : "s");
    return 0;
}

int runFamilies(const std::vector<std::string>& argv) {
    const Args a(argv, {}, {"markdown"});
    if (!a.positional().empty())
        throw UsageError("unexpected argument '" + a.positional().front() + "'");
    if (a.has("markdown")) {
        std::printf("%s", model::familiesMarkdown().c_str());
        return 0;
    }
    for (const model::ModelFamily* f : model::modelFamilies()) {
        std::string names;
        for (const std::string& n : f->architectures)
            names += (names.empty() ? "" : ", ") + n;
        std::printf("%-12s %s (%s)\n%12s %s\n", f->name, f->label, f->examples, "", names.c_str());
    }
    return 0;
}

} // namespace sparqlab::cli
