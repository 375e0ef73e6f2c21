#include "model.h"
#include "resources.h"

#include "attention/runtime_info.h"
#include "attention/select.h"

#include "base/json_number.h"
#include "base/system_memory.h"

#include "model/input_error.h"
#include "model/safetensors.h"
#include "sparqlab/version.h"
#include "text/tokenizer.h"

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>
#include <torch/types.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>

namespace sparqlab::model {

namespace fs = std::filesystem;

namespace {

std::string demoFolder() {
    if (const char* env = std::getenv("SPARQLAB_DEMO_MODEL"); env && *env)
        return env;
    return resourcePath("demo-model");
}

/// `$HF_HOME/hub` or `~/.cache/huggingface/hub`.
fs::path hubCache() {
    if (const char* hub = std::getenv("HF_HUB_CACHE"); hub && *hub)
        return hub;
    if (const char* home = std::getenv("HF_HOME"); home && *home)
        return fs::path(home) / "hub";
    const char* user = std::getenv("HOME");
    return fs::path(user ? user : "/") / ".cache" / "huggingface" / "hub";
}

} // namespace

std::vector<std::string> cachedHubModels() {
    std::vector<std::string> out;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(hubCache(), ec)) {
        const std::string name = e.path().filename().string();
        if (!e.is_directory(ec) || name.rfind("models--", 0) != 0)
            continue;
        std::string id = name.substr(8);
        const size_t sep = id.find("--");
        if (sep == std::string::npos)
            continue;
        id.replace(sep, 2, "/");
        out.push_back(id);
    }
    std::sort(out.begin(), out.end());
    return out;
}

namespace {

std::vector<int64_t> readEos(const std::string& folder, const ModelConfig& c) {
    const fs::path gen = fs::path(folder) / "generation_config.json";
    std::error_code ec;
    if (fs::exists(gen, ec)) {
        try {
            std::ifstream in(gen);
            const nlohmann::json j = nlohmann::json::parse(in);
            if (j.contains("eos_token_id")) {
                const auto& e = j["eos_token_id"];
                // Ids of the vocabulary; anything else names the file and the field.
                auto id = [&](const nlohmann::json& x) {
                    return base::requireWholeNumber<ConfigError>(x, gen.string(), "eos_token_id", 0,
                                                                 int64_t{1} << 31);
                };
                if (e.is_number())
                    return {id(e)};
                if (e.is_array()) {
                    std::vector<int64_t> out;
                    for (const auto& x : e)
                        out.push_back(id(x));
                    return out;
                }
            }
        } catch (const nlohmann::json::exception& e) {
            throw ConfigError(gen.string() + ": malformed JSON: " + e.what());
        }
    }
    return c.eosIds;
}

} // namespace

std::string resolveModelFolder(const std::string& spec) {
    if (spec.empty())
        throw ConfigError("no model given (a folder, a cached hub id such as ORG/NAME, or demo)");
    std::error_code ec;
    if (spec == "demo") {
        const std::string d = demoFolder();
        if (!fs::is_directory(d, ec))
            throw ConfigError(d + ": the demo model is missing from this installation");
        return d;
    }
    if (fs::is_directory(spec, ec))
        return spec;
    if (fs::exists(spec, ec))
        throw ConfigError(spec + ": not a folder (a model is a folder with config.json)");
    // A hub id ORG/NAME in the local cache: models--ORG--NAME/snapshots/<revision>/.
    const size_t slash = spec.find('/');
    if (slash != std::string::npos && slash > 0 && spec.find('/', slash + 1) == std::string::npos) {
        const fs::path repo =
            hubCache() / ("models--" + spec.substr(0, slash) + "--" + spec.substr(slash + 1));
        const fs::path snapshots = repo / "snapshots";
        std::string revision;
        std::ifstream ref(repo / "refs" / "main");
        if (ref && std::getline(ref, revision) && fs::is_directory(snapshots / revision, ec))
            return (snapshots / revision).string();
        if (fs::is_directory(snapshots, ec)) {
            fs::file_time_type newest{};
            std::string best;
            for (const auto& e : fs::directory_iterator(snapshots, ec))
                if (e.is_directory() && (best.empty() || e.last_write_time() > newest)) {
                    newest = e.last_write_time();
                    best = e.path().string();
                }
            if (!best.empty())
                return best;
        }
        throw ConfigError(spec + ": not a folder, and not in the local Hugging Face cache (" +
                          hubCache().string() + "); nothing is downloaded");
    }
    throw ConfigError(spec + ": no such model folder");
}

Model::~Model() = default;

Model::UseGuard::UseGuard(Model& m) : m_model(m) {
    const std::lock_guard<std::mutex> lock(m.m_useMutex);
    if (m.m_useDepth > 0 && m.m_user != std::this_thread::get_id())
        throw ModelBusyError(m.m_folder + ": the model is running on another thread; wait for "
                                          "it to finish (one thread at a time)");
    m.m_user = std::this_thread::get_id();
    ++m.m_useDepth;
}

Model::UseGuard::~UseGuard() {
    const std::lock_guard<std::mutex> lock(m_model.m_useMutex);
    --m_model.m_useDepth;
}

void checkFits(const std::string& where, const std::string& what, int64_t bytes, int64_t available,
               const std::string& place) {
    if (available > 0 && bytes > available * 9 / 10)
        throw MemoryError(where + ": " + what + " need " + std::to_string(bytes >> 20) +
                          " MiB but only " + std::to_string(available >> 20) +
                          " MiB are available" + (place.empty() ? std::string() : " " + place));
}

void checkFitsInMemory(const std::string& where, const std::string& what, int64_t bytes) {
    checkFits(where, what, bytes, base::availableMemoryBytes());
}

void checkFitsOnDevice(const std::string& where, const std::string& what, int64_t bytes,
                       at::Device device) {
    if (device.is_cpu())
        checkFitsInMemory(where, what, bytes);
    else if (device.is_cuda())
        checkFits(where, what, bytes, attention::cudaFreeBytes(), "on the GPU");
}

attention::AttentionConfig onDevice(const attention::AttentionConfig& attn, at::Device device) {
    if (!attn.calibration)
        return attn;
    bool elsewhere = false;
    for (const auto& [name, t] : attn.calibration->tensors)
        elsewhere = elsewhere || (t.defined() && t.device() != device);
    if (!elsewhere)
        return attn;
    auto moved = std::make_shared<attention::Calibration>(*attn.calibration);
    for (auto& [name, t] : moved->tensors)
        if (t.defined())
            t = t.to(device);
    attention::AttentionConfig out = attn;
    out.calibration = moved;
    return out;
}

void Model::checkCacheFits(int64_t tokens, const std::string& what, int64_t batch,
                           bool wholePass) const {
    if (m_device.is_cpu())
        return; // the host's checks are the callers' (a capture's, the weights')
    const ModelConfig& c = m_config;
    const int64_t element = static_cast<int64_t>(at::elementSize(m_compute));
    // The cache, and a chunk's scores (query rows × every key, float32, twice); a whole pass also
    // holds every position's float32 logits and their log-softmax.
    const int64_t rows = wholePass ? tokens * batch : std::min<int64_t>(tokens * batch, 1024);
    const int64_t bytes = batch * tokens * c.cacheBytesPerToken(element) +
                          2 * c.nHeads * rows * tokens * 4 +
                          (wholePass ? 2 * rows * c.vocabSize * 4 : 0);
    checkFitsOnDevice(m_folder,
                      what + " (a KV cache of " + std::to_string(tokens) + " positions" +
                          (batch > 1 ? " × " + std::to_string(batch) + " sequences" : "") + ")",
                      bytes, m_device);
}

std::unique_ptr<Model> Model::open(const std::string& spec, const ModelOpenOptions& o) {
    std::unique_ptr<Model> m(new Model);
    m->m_spec = spec;
    m->m_device = o.device;
    if (o.device.is_cuda() && !attention::cudaUsable())
        attention::requireDevice("cuda"); // throws DeviceError: what is missing
    m->m_folder = resolveModelFolder(spec);
    m->m_config = readModelConfig((fs::path(m->m_folder) / "config.json").string());
    m->m_eos = readEos(m->m_folder, m->m_config);
    m->m_weightsDtype = m->m_config.torchDtype;
    if (o.loadTokenizer) {
        const fs::path tok = fs::path(m->m_folder) / "tokenizer.json";
        std::error_code ec;
        if (fs::exists(tok, ec))
            m->m_tokenizer = text::Tokenizer::fromFolder(m->m_folder);
    }
    if (o.loadWeights) {
        const std::string configPath = (fs::path(m->m_folder) / "config.json").string();
        Checkpoint ck =
            o.weightsFile.empty() ? Checkpoint(m->m_folder) : Checkpoint::openFile(o.weightsFile);
        // fp8 weights are dequantized to the dtype of the rest, block by block as the config
        // says (docs/design/CONTRACTS.md §1).
        const WeightQuantization& quant = m->m_config.quantization;
        if (quant.method == "fp8")
            ck.setFloat8Blocks(quant.blockRows, quant.blockCols);
        const std::string stored = ck.floatDtype();
        m->m_weightsDtype = torchDtypeName(stored);
        const std::optional<at::ScalarType> storedType = floatScalarType(stored);
        const bool halfStored = storedType && *storedType != at::kFloat;
        const at::ScalarType half = halfStored ? *storedType : at::kHalf;
        // float32 when it fits; else a half-precision checkpoint computes in its own dtype with
        // its pages mapped from disk; else refused up front with the estimate, rather than
        // killed by the OS halfway.
        const int64_t params = m->m_config.parameterCount();
        const int64_t experts = m->m_config.expertParameterCount();
        const int64_t avail = base::availableMemoryBytes();
        const bool cuda = o.device.is_cuda();
        // gpt-oss's MXFP4 experts are decoded on the CPU as tokens reach them, within a budget
        // (ExpertDecoder): only the rest must fit. On a GPU they are decoded as the model opens.
        bool packedExperts = false;
        for (int64_t l = 0; l < m->m_config.nLayers; ++l)
            if (m->m_config.moe.sparse(l)) {
                packedExperts = decodesExpertsLazily(m->m_config, ck, l, o.device);
                break;
            }
        const int64_t loaded = packedExperts ? params - experts : params;
        const bool f32Fits = avail <= 0 || loaded * 4 <= avail * 9 / 10;
        if (o.compute == ComputeDtype::Stored && halfStored)
            m->m_compute = half;
        else if (o.compute == ComputeDtype::Auto && (cuda || !f32Fits) && halfStored)
            m->m_compute = half; // a GPU computes in the stored half dtype, as PyTorch would
        // Weights computed in their stored dtype are mapped from the file, not copied: the
        // routed experts of an MoE are read only when a token reaches them (their pages can be
        // dropped and read again under memory pressure), so only the rest must fit.
        // (float8 weights are dequantized into memory: none is mapped.)
        const bool mapped =
            (m->m_compute != at::kFloat || storedType == at::kFloat) && !ck.quantized();
        const int64_t resident = mapped || packedExperts ? params - experts : params;
        const std::string expertNote =
            packedExperts ? " (the MXFP4 experts are decoded as tokens reach them)"
            : mapped && experts > 0
                ? " (the routed experts, " + std::to_string((experts * 2) >> 20) +
                      " MiB, are mapped and read as tokens reach them)"
                : std::string();
        if (cuda) // every weight on the GPU, with the cache asked for, before any is read
            checkFitsOnDevice(
                configPath,
                "the model's " +
                    std::string(m->m_compute == at::kFloat ? "float32" : m->m_weightsDtype) +
                    " weights" +
                    (o.cacheTokens > 0
                         ? " and a KV cache of " + std::to_string(o.cacheTokens) + " positions"
                         : std::string()),
                params * static_cast<int64_t>(at::elementSize(m->m_compute)) +
                    o.cacheTokens * m->m_config.cacheBytesPerToken(
                                        static_cast<int64_t>(at::elementSize(m->m_compute))),
                o.device);
        else if (m->m_compute == at::kFloat)
            checkFitsInMemory(configPath,
                              (halfStored ? "the model's float32 weights (its " +
                                                m->m_weightsDtype + " weights need " +
                                                std::to_string((params * 2) >> 20) + " MiB)"
                                          : std::string("the model's float32 weights")) +
                                  expertNote,
                              resident * 4);
        else
            checkFitsInMemory(configPath,
                              "the model's " + m->m_weightsDtype + " weights" + expertNote,
                              resident * 2);
        ModelConfig& c = m->m_config;
        // transformers 4.x's vision-language folders (Mistral Small 3.1): the text model under
        // language_model, language_model.model.… and language_model.lm_head.
        if (c.layout == Layout::Llama && c.bodyModule == "model" && c.weightPrefix.empty() &&
            !ck.has("model.embed_tokens.weight") &&
            ck.has("language_model.model.embed_tokens.weight"))
            c.weightPrefix = "language_model.";
        // A vision-language folder's decoder sits under model.language_model (Qwen3.5, and
        // transformers 5.x saves its text-only class the same way): where the checkpoint says so.
        if (c.layout == Layout::Llama && c.bodyModule == "model" &&
            !ck.has(c.weightPrefix + "model.embed_tokens.weight") &&
            ck.has(c.weightPrefix + "model.language_model.embed_tokens.weight"))
            c.bodyModule = "model.language_model";
        // Nemotron-H as published keeps its body under backbone (some checkpoints name the
        // embedding "embedding"); transformers 5 saves it as model.
        if (c.bodyModule == "backbone") {
            const auto has = [&](const std::string& body, const std::string& embed) {
                return ck.has(c.weightPrefix + body + "." + embed + ".weight");
            };
            for (const char* body : {"backbone", "model"})
                for (const char* embed : {"embeddings", "embedding"})
                    if (!has(c.bodyModule, c.embedName) && has(body, embed)) {
                        c.bodyModule = body;
                        c.embedName = embed;
                    }
        }
        // OLMo Hybrid's convolutions: one each for q, k and v as published, or one over
        // [q | k | v] where a checkpoint holds them joined.
        if (c.linear.projections == GdnProjections::Separate)
            for (int64_t l = 0; l < c.nLayers; ++l)
                if (c.kindOf(l) == LayerKind::GatedDeltaNet) {
                    c.linear.separateConvs =
                        !ck.has(c.layerPrefix(l) + "linear_attn.conv1d.weight");
                    break;
                }
        // DeepSeek-V4's indexer: weights_proj under scorer (transformers since 5.16), or beside
        // q_b_proj as the first releases saved it.
        if (c.compressed.active())
            for (int64_t l = 0; l < c.nLayers; ++l)
                if (c.compressed.indexed(l)) {
                    c.compressed.scorerModule = !ck.has(
                        c.layerPrefix(l) + "self_attn.compressor.indexer.weights_proj.weight");
                    break;
                }
        // The routed experts as the checkpoint stores them: packed (experts.gate_up_proj, as
        // transformers 5 holds them and saves Qwen3.5-MoE) or one module per expert. Mixtral's
        // block_sparse_moe with w1, w3, w2 is, in transformers 5's own names (save_pretrained
        // with save_original_format false), mlp with its experts packed.
        if (c.moe.layout == ExpertLayout::PerExpert || c.moe.layout == ExpertLayout::FusedRows ||
            c.moe.layout == ExpertLayout::Mixtral)
            for (int64_t l = 0; l < c.nLayers; ++l) {
                if (!c.moe.sparse(l))
                    continue;
                if (c.moe.layout == ExpertLayout::Mixtral &&
                    !ck.has(c.layerPrefix(l) + c.moe.module + "." + c.moe.routerName + ".weight") &&
                    ck.has(c.layerPrefix(l) + "mlp.experts.gate_up_proj"))
                    c.moe.module = "mlp";
                // (Nemotron-H's ungated experts: up_proj, down_proj)
                const std::string experts = c.layerPrefix(l) + c.moe.module + ".experts.";
                if (ck.has(experts + (c.gatedMlp ? "gate_up_proj" : "up_proj")))
                    c.moe.layout = ExpertLayout::FusedRows;
                else if (ck.has(experts + (c.gatedMlp ? "0.gate_proj.weight" : "0.up_proj.weight")))
                    c.moe.layout = ExpertLayout::PerExpert;
                break;
            }
        m->m_net = CausalLM(m->m_config);
        m->m_net->checkShapes(ck, configPath);
        std::function<void(int64_t, int64_t)> progress;
        if (o.job.progress || o.job.cancel)
            progress = [&o](int64_t done, int64_t total) { o.job.step(done, total, "weights"); };
        m->m_net->loadWeights(ck, m->m_compute, progress, /*mapStored=*/true, o.device);
        m->m_net->eval();
    }
    return m;
}

const text::Tokenizer& Model::tokenizer() const {
    if (!m_tokenizer)
        throw text::TokenizerError(m_folder +
                                   ": no tokenizer.json (text commands need one; use --ids)");
    return *m_tokenizer;
}

void Model::checkIds(const std::vector<int64_t>& ids, int64_t extra) const {
    if (extra < 0)
        throw InputError("the number of new tokens must be at least 0");
    if (ids.empty())
        throw InputError("the prompt is empty (no tokens)");
    for (int64_t id : ids)
        if (id < 0 || id >= m_config.vocabSize)
            throw InputError("token id " + std::to_string(id) + " is outside the vocabulary 0.." +
                             std::to_string(m_config.vocabSize - 1));
    const int64_t total = static_cast<int64_t>(ids.size()) + extra;
    if (total > m_config.maxPositions)
        throw InputError("the prompt (" + std::to_string(ids.size()) + " tokens" +
                         (extra ? " + " + std::to_string(extra) + " to generate" : std::string()) +
                         ") is longer than the model's context of " +
                         std::to_string(m_config.maxPositions) + " positions");
}

at::Tensor Model::logits(const std::vector<int64_t>& ids, const attention::AttentionConfig& attn) {
    checkIds(ids);
    checkCacheFits(static_cast<int64_t>(ids.size()), "logits", 1, /*wholePass=*/true);
    const UseGuard use(*this);
    torch::NoGradGuard noGrad;
    const at::Tensor t = at::tensor(ids, at::kLong).unsqueeze(0);
    return m_net->forward(t, nullptr, attn).squeeze(0).cpu();
}

namespace {
/// The prompt through the network into `cache` in chunks of 1024 positions, so that the
/// causal scores stay [chunk, S] rather than [S, S] for long prompts; the last chunk's logits.
at::Tensor prefillChunks(CausalLMImpl& net, const std::vector<int64_t>& prompt, KVCache& cache,
                         const attention::AttentionConfig& attn) {
    constexpr size_t kChunk = 1024;
    at::Tensor logits;
    for (size_t s0 = 0; s0 < prompt.size(); s0 += kChunk) {
        const size_t n = std::min(kChunk, prompt.size() - s0);
        const std::vector<int64_t> part(prompt.begin() + static_cast<std::ptrdiff_t>(s0),
                                        prompt.begin() + static_cast<std::ptrdiff_t>(s0 + n));
        logits = net.forward(at::tensor(part, at::kLong).unsqueeze(0), &cache, attn, {},
                             /*lastLogitsOnly=*/true);
    }
    return logits;
}
} // namespace

at::Tensor Model::prefill(const std::vector<int64_t>& prompt, KVCache& cache,
                          const attention::AttentionConfig& attn) {
    const UseGuard use(*this);
    return prefillChunks(*m_net, prompt, cache, onDevice(attn, m_device));
}

namespace {
/// Whether a token of text `t` may come next while `rest` must still be spelled: it is a
/// prefix of rest, or rest a prefix of it.
bool continues(const std::string& t, const std::string& rest) {
    if (t.empty())
        return false;
    const size_t n = std::min(t.size(), rest.size());
    return t.compare(0, n, rest, 0, n) == 0;
}

/// Greedy steps from the logits of the last position in the cache; while `heal` is not
/// spelled yet, only tokens that continue it (texts) may be chosen.
void decodeFrom(CausalLMImpl& net, KVCache& cache, at::Tensor logits, int64_t maxNew,
                const attention::AttentionConfig& attn, const std::vector<int64_t>& eos,
                bool stopAtEos, const base::Job& job, Generation& g, std::string heal = {},
                const std::vector<std::string>* texts = nullptr) {
    for (int64_t i = 0; i < maxNew; ++i) {
        const at::Tensor last = logits[0][logits.size(1) - 1].cpu(); // one row, to the host
        int64_t next = last.argmax().item<int64_t>();
        if (!heal.empty() && texts) {
            // The best token among those that spell the healed text on.
            const at::Tensor l = last.to(at::kFloat).contiguous();
            const float* lp = l.data_ptr<float>();
            int64_t best = -1;
            const int64_t V = std::min<int64_t>(l.numel(), static_cast<int64_t>(texts->size()));
            for (int64_t t = 0; t < V; ++t)
                if (continues((*texts)[static_cast<size_t>(t)], heal) &&
                    (best < 0 || lp[t] > lp[best]))
                    best = t;
            if (best >= 0) {
                next = best;
                ++g.healedTokens;
                const std::string& t = (*texts)[static_cast<size_t>(best)];
                heal = t.size() >= heal.size() ? std::string() : heal.substr(t.size());
            } else {
                heal.clear(); // nothing spells it: no healing
            }
        }
        g.newIds.push_back(next);
        g.stepLogits.push_back(last);
        job.step(i + 1, maxNew, "token " + std::to_string(i + 1));
        if (stopAtEos && std::find(eos.begin(), eos.end(), next) != eos.end())
            break;
        if (i + 1 < maxNew)
            logits = net.forward(at::tensor({next}, at::kLong).unsqueeze(0), &cache, attn);
    }
}
} // namespace

Generation greedyDecode(CausalLMImpl& net, const std::vector<int64_t>& prompt, int64_t maxNew,
                        const attention::AttentionConfig& attnIn, const std::vector<int64_t>& eos,
                        bool stopAtEos, const base::Job& job) {
    torch::NoGradGuard noGrad;
    const attention::AttentionConfig attn = onDevice(attnIn, net.device());
    Generation g;
    g.promptIds = prompt;
    KVCache cache;
    // Keys and values in preallocated decode caches: each step appends in place and one-token
    // dense or SparQ attention runs on the fast decode path.
    cache.capacity = static_cast<int64_t>(prompt.size()) + std::max<int64_t>(maxNew, 1);
    cache.cudaGraphs = true; // on a GPU, the steps as CUDA graphs where the model allows it
    decodeFrom(net, cache, prefillChunks(net, prompt, cache, attn), maxNew, attn, eos, stopAtEos,
               job, g);
    return g;
}

HealedPrompt healPrompt(const std::vector<int64_t>& ids, const std::vector<std::string>& texts,
                        int maxTokens) {
    HealedPrompt h{ids, {}};
    // Back to a word start (a token beginning with a space or newline), keeping one token.
    for (int n = 0; n < maxTokens && h.ids.size() > 1; ++n) {
        const int64_t id = h.ids.back();
        if (id < 0 || id >= static_cast<int64_t>(texts.size()))
            break;
        const std::string& t = texts[static_cast<size_t>(id)];
        h.removed = t + h.removed;
        h.ids.pop_back();
        if (!t.empty() && (t[0] == ' ' || t[0] == '\n'))
            break;
    }
    return h;
}

Generation greedyDecodeHealed(CausalLMImpl& net, const HealedPrompt& heal,
                              const std::vector<std::string>& texts, int64_t maxNew,
                              const attention::AttentionConfig& attnIn,
                              const std::vector<int64_t>& eos, bool stopAtEos,
                              const base::Job& job) {
    torch::NoGradGuard noGrad;
    const attention::AttentionConfig attn = onDevice(attnIn, net.device());
    Generation g;
    g.promptIds = heal.ids;
    g.healed = heal.removed;
    KVCache cache;
    cache.capacity = static_cast<int64_t>(heal.ids.size()) + std::max<int64_t>(maxNew, 1);
    cache.cudaGraphs = true;
    decodeFrom(net, cache, prefillChunks(net, heal.ids, cache, attn), maxNew, attn, eos, stopAtEos,
               job, g, heal.removed, &texts);
    return g;
}

PromptPrefill::PromptPrefill(CausalLMImpl& net, std::vector<int64_t> prompt, int64_t maxNew,
                             int64_t snapWindow)
    : m_net(net), m_prompt(std::move(prompt)),
      m_capacity(static_cast<int64_t>(m_prompt.size()) + std::max<int64_t>(maxNew, 1)) {
    if (m_prompt.empty())
        throw InputError("the prompt is empty");
    torch::NoGradGuard noGrad;
    m_cache.capacity = m_capacity;
    m_cache.dimensionMajor = true; // SparQ's fast decode path needs K dimension-major too
    m_cache.observe = true;        // for H2O's accumulation and SnapKV's window after the prefill
    m_cache.observeConfig.snapWindow = snapWindow;
    const std::vector<int64_t> dense(m_prompt.begin(), m_prompt.end() - 1);
    if (!dense.empty())
        prefillChunks(m_net, dense, m_cache, {});
    for (const attention::CausalState& st : m_cache.state)
        m_states.push_back(st.clone());
    m_linear = m_cache.copyLinear();
}

Generation PromptPrefill::continueWith(const attention::AttentionConfig& attnIn, int64_t maxNew,
                                       const std::vector<int64_t>& eos, bool stopAtEos,
                                       const base::Job& job) {
    if (static_cast<int64_t>(m_prompt.size()) + maxNew > m_capacity)
        throw InputError("the prefill has room for " +
                         std::to_string(m_capacity - m_prompt.size()) + " new tokens, not " +
                         std::to_string(maxNew));
    torch::NoGradGuard noGrad;
    attention::AttentionConfig attn = attnIn;
    if (attn.calibration) {
        auto& [host, moved] = m_onDevice[attn.calibration.get()];
        if (!moved) {
            host = attn.calibration;
            moved = onDevice(attnIn, m_net.device()).calibration;
        }
        attn.calibration = moved;
    }
    const int64_t dense = static_cast<int64_t>(m_prompt.size()) - 1;
    m_cache.truncate(dense, &m_linear);
    m_cache.state.clear();
    for (const attention::CausalState& st : m_states)
        m_cache.state.push_back(st.clone());
    Generation g;
    g.promptIds = m_prompt;
    const at::Tensor logits =
        m_net.forward(at::tensor({m_prompt.back()}, at::kLong).unsqueeze(0), &m_cache, attn);
    decodeFrom(m_net, m_cache, logits, maxNew, attn, eos, stopAtEos, job, g);
    return g;
}

Generation Model::generate(const std::vector<int64_t>& prompt, int64_t maxNew,
                           const attention::AttentionConfig& attn, bool stopAtEos,
                           const base::Job& job) {
    checkIds(prompt, maxNew);
    checkCacheFits(static_cast<int64_t>(prompt.size()) + maxNew, "generation");
    const UseGuard use(*this);
    return greedyDecode(*m_net, prompt, maxNew, attn, m_eos, stopAtEos, job);
}

const std::vector<std::string>& Model::tokenTexts() {
    if (m_tokenTexts.empty()) {
        const text::Tokenizer& tok = tokenizer();
        m_tokenTexts.resize(static_cast<size_t>(m_config.vocabSize));
        for (int64_t id = 0; id < std::min<int64_t>(m_config.vocabSize, tok.size()); ++id)
            m_tokenTexts[static_cast<size_t>(id)] = tok.decode({id});
    }
    return m_tokenTexts;
}

std::string Model::continuationText(const Generation& g) const {
    std::string text = tokenizer().decode(g.newIds, /*skipSpecial=*/true);
    if (!g.healed.empty() && text.compare(0, g.healed.size(), g.healed) == 0)
        text = text.substr(g.healed.size());
    return text;
}

Generation Model::generateHealed(const std::vector<int64_t>& prompt, int64_t maxNew,
                                 const attention::AttentionConfig& attn, bool stopAtEos,
                                 const base::Job& job) {
    if (maxNew == 0) // nothing to continue with: nothing healed either (it would spell more)
        return generate(prompt, 0, attn, stopAtEos, job);
    checkIds(prompt, maxNew);
    checkCacheFits(static_cast<int64_t>(prompt.size()) + maxNew, "generation");
    const UseGuard use(*this);
    const HealedPrompt h = healPrompt(prompt, tokenTexts());
    // The healed tokens are generated again: room for them too.
    const int64_t extra = static_cast<int64_t>(prompt.size() - h.ids.size());
    return greedyDecodeHealed(*m_net, h, tokenTexts(), maxNew + extra, attn, m_eos, stopAtEos, job);
}

std::unique_ptr<PromptPrefill> Model::prefillDense(const std::vector<int64_t>& prompt,
                                                   int64_t maxNew, int64_t snapWindow) {
    checkIds(prompt, maxNew);
    checkCacheFits(static_cast<int64_t>(prompt.size()) + maxNew, "a prefill");
    const UseGuard use(*this);
    return std::make_unique<PromptPrefill>(*m_net, prompt, maxNew, snapWindow);
}

CaptureExample Model::capture(const std::vector<int64_t>& ids, bool allQueries,
                              int64_t lastQueryPosition, const base::Job& job,
                              int64_t recentQueries, int64_t chunk) {
    checkIds(ids);
    const UseGuard use(*this);
    torch::NoGradGuard noGrad;
    const int64_t S = static_cast<int64_t>(ids.size());
    // Long prompts run in chunks of queries against the keys so far (as a prefill does), so
    // that the largest temporary is one chunk's scores, not the whole [H, S, S].
    const int64_t C = chunk > 0 ? std::min(chunk, S) : S;
    {
        // What the capture holds (q, K, V of every layer, in float32) and the largest
        // temporary of the forward pass (one layer's causal scores for one chunk); the weights
        // are in memory already.
        const ModelConfig& c = m_config;
        const int64_t queries = allQueries ? S : std::max<int64_t>(1, std::min(recentQueries, S));
        const int64_t held =
            static_cast<int64_t>(c.attentionLayers().size()) *
                ((c.nHeads * queries + c.nKvHeads * S) * c.headDim +
                 c.nKvHeads * S * c.valueDim()) *
                4 +
            captureInfo().entryOffset(static_cast<int64_t>(c.attentionLayers().size()), S) *
                (c.headDim + queries) * 4; // DeepSeek-V4's entries and their scores
        const int64_t scores = 2 * c.nHeads * C * S * 4;
        const std::string what = "a capture of " + std::to_string(S) + " tokens";
        // On a GPU the forward pass's temporaries are there and the capture in the host's memory.
        checkFitsInMemory(m_folder, what, m_device.is_cpu() ? held + scores : held);
        checkCacheFits(S, what);
    }
    const int64_t qLast =
        !allQueries && lastQueryPosition >= 0 ? std::min(lastQueryPosition, S - 1) : S - 1;
    // The queries kept: every position's, or those of [qFirst, qLast].
    const int64_t qFirst =
        allQueries ? 0 : std::max<int64_t>(0, qLast + 1 - std::max<int64_t>(1, recentQueries));
    // The attention layers, one captured layer each (a hybrid model's linear layers have no
    // q, K or V): slot[l] is model layer l's place in the capture.
    const std::vector<int64_t> attentionLayers = m_config.attentionLayers();
    const int64_t L = static_cast<int64_t>(attentionLayers.size());
    std::vector<int64_t> slot(static_cast<size_t>(m_config.nLayers), -1);
    for (int64_t i = 0; i < L; ++i)
        slot[static_cast<size_t>(attentionLayers[static_cast<size_t>(i)])] = i;
    const int64_t chunks = (S + C - 1) / C;
    // Copied into float32 tensors of every layer as each layer runs (no second copy to stack).
    at::Tensor qAll, kAll, vAll;
    int64_t c0 = 0, chunkIndex = 0; // the chunk running: positions [c0, c0 + its length)
    const CaptureHook hook = [&](int64_t modelLayer, const at::Tensor& q, const at::Tensor& k,
                                 const at::Tensor& v) {
        const int64_t layer = slot[static_cast<size_t>(modelLayer)];
        if (!qAll.defined()) {
            auto all = [L](std::vector<int64_t> shape, const at::Tensor& like) {
                shape.insert(shape.begin(), L);
                return at::empty(shape, like.options().dtype(at::kFloat).device(at::kCPU));
            };
            const int64_t Hq = q.size(1), Hkv = k.size(1), D = q.size(3);
            qAll = all({Hq, qLast + 1 - qFirst, D}, q);
            kAll = all({Hkv, S, D}, k);
            vAll = all({Hkv, S, v.size(3)}, v);
        }
        // This chunk's queries that are kept, and its positions' keys and values.
        const int64_t T = q.size(2);
        const int64_t from = std::max(c0, qFirst), to = std::min(c0 + T, qLast + 1);
        if (from < to)
            qAll[layer]
                .narrow(1, from - qFirst, to - from)
                .copy_(q[0].narrow(1, from - c0, to - from));
        kAll[layer].narrow(1, c0, T).copy_(k[0].narrow(1, c0, T));
        vAll[layer].narrow(1, c0, T).copy_(v[0].narrow(1, c0, T));
        job.step(chunkIndex * L + layer + 1, chunks * L, "layer " + std::to_string(modelLayer));
    };
    // The model's indexer scores of the kept queries: a DSA model's per key (NaN after each
    // query's position), MiniMax-M3's per indexer head and block (NaN for a block after the
    // query, and on its full-attention layers).
    at::Tensor idxAll;
    const IndexerSpec& ix = m_config.indexer;
    if (ix.active() && !ix.blocks()) {
        idxAll = at::full({L, qLast + 1 - qFirst, S}, std::nan(""), at::kFloat);
        m_net->setIndexerHook([&](int64_t modelLayer, const at::Tensor& scores) {
            const int64_t layer = slot[static_cast<size_t>(modelLayer)];
            const int64_t T = scores.size(1), keys = scores.size(2);
            const int64_t from = std::max(c0, qFirst), to = std::min(c0 + T, qLast + 1);
            if (from >= to)
                return;
            const at::Tensor rows = scores[0].narrow(0, from - c0, to - from).cpu(); // one copy
            for (int64_t p = from; p < to; ++p) // row p sees keys 0..p
                idxAll[layer][p - qFirst]
                    .narrow(0, 0, std::min(p + 1, keys))
                    .copy_(rows[p - from].narrow(0, 0, std::min(p + 1, keys)));
        });
    } else if (ix.active()) {
        const int64_t blocks = attention::blocksForKeys(S, ix.blockSize);
        idxAll = at::full({L, ix.heads, qLast + 1 - qFirst, blocks}, std::nan(""), at::kFloat);
        m_net->setIndexerHook([&](int64_t modelLayer, const at::Tensor& scores) {
            const int64_t layer = slot[static_cast<size_t>(modelLayer)];
            const int64_t T = scores.size(2), seen = scores.size(3); // [1, Hi, T, blocks so far]
            const int64_t from = std::max(c0, qFirst), to = std::min(c0 + T, qLast + 1);
            if (from >= to)
                return;
            const at::Tensor rows =
                scores[0].narrow(1, from - c0, to - from).to(at::kCPU, at::kFloat);
            idxAll[layer]
                .narrow(1, from - qFirst, to - from)
                .narrow(2, 0, seen)
                .copy_(rows.masked_fill(at::isinf(rows), std::nan(""))); // −inf: after the query
        });
    }
    // DeepSeek-V4: every compressed layer's entries, layer after layer, and its indexer's scores
    // of the kept queries (NaN where an entry is not seen yet, and on the HCA layers).
    at::Tensor entriesAll, entryScoresAll;
    const CaptureInfo shape = captureInfo();
    if (shape.compressed()) {
        const int64_t total = shape.entryOffset(L, S);
        entriesAll = at::zeros({total, m_config.headDim}, at::kFloat);
        entryScoresAll = at::full({qLast + 1 - qFirst, total}, std::nan(""), at::kFloat);
        m_net->setCompressedHook(
            [&](int64_t modelLayer, const at::Tensor& entries, const at::Tensor& scores) {
                const int64_t layer = slot[static_cast<size_t>(modelLayer)];
                const int64_t at0 = shape.entryOffset(layer, S), C = entries.size(1);
                entriesAll.narrow(0, at0, C).copy_(entries[0]);
                if (!scores.defined() || C == 0)
                    return;
                const int64_t T = scores.size(1);
                const int64_t from = std::max(c0, qFirst), to = std::min(c0 + T, qLast + 1);
                if (from >= to)
                    return;
                const at::Tensor rows =
                    scores[0].narrow(0, from - c0, to - from).to(at::kCPU, at::kFloat);
                entryScoresAll.narrow(0, from - qFirst, to - from)
                    .narrow(1, at0, C)
                    .copy_(rows.masked_fill(at::isinf(rows), std::nan(""))); // −inf: not seen yet
            });
    }
    struct HookReset {
        CausalLMImpl* net;
        ~HookReset() {
            net->setIndexerHook({});
            net->setCompressedHook({});
        }
    } reset{m_net.get()};
    if (chunks == 1) {
        m_net->forward(at::tensor(ids, at::kLong).unsqueeze(0), nullptr, {}, hook,
                       /*lastLogitsOnly=*/true);
    } else {
        KVCache cache;
        cache.capacity = S; // keys and values written in place, not concatenated per chunk
        for (; chunkIndex < chunks; ++chunkIndex, c0 += C) {
            const int64_t n = std::min(C, S - c0);
            const std::vector<int64_t> part(ids.begin() + static_cast<std::ptrdiff_t>(c0),
                                            ids.begin() + static_cast<std::ptrdiff_t>(c0 + n));
            m_net->forward(at::tensor(part, at::kLong).unsqueeze(0), &cache, {}, hook,
                           /*lastLogitsOnly=*/true);
        }
    }
    CaptureExample e;
    e.tokenIds = at::tensor(ids, at::kLong);
    if (m_tokenizer)
        for (int64_t id : ids)
            e.tokens.push_back(m_tokenizer->tokenText(id));
    e.qPositions = at::arange(qFirst, qLast + 1, at::kLong);
    e.q = qAll;
    e.k = kAll;
    e.v = vAll;
    e.indexScores = idxAll;
    e.entries = entriesAll;
    e.entryScores = entryScoresAll;
    return e;
}

BpcResult Model::bitsPerCharacter(const std::string& text, const attention::AttentionConfig& attn,
                                  const base::Job& job) {
    const std::string clean = text::repairUtf8(text);
    int64_t chars = 0;
    for (unsigned char c : clean)
        chars += (c & 0xC0) != 0x80; // count UTF-8 lead bytes
    return bitsPerCharacter(tokenizer().encode(clean, /*addSpecial=*/true), chars, attn, job);
}

BpcResult Model::bitsPerCharacter(const std::vector<int64_t>& ids, int64_t chars,
                                  const attention::AttentionConfig& attnIn, const base::Job& job) {
    const attention::AttentionConfig attn = onDevice(attnIn, m_device);
    if (ids.size() < 2)
        throw InputError("the text is too short to score (fewer than 2 tokens)");
    for (int64_t id : ids)
        if (id < 0 || id >= m_config.vocabSize)
            throw InputError("token id " + std::to_string(id) + " is outside the vocabulary");
    const UseGuard use(*this);
    torch::NoGradGuard noGrad;
    BpcResult r;
    r.chars = chars;
    r.tokens = static_cast<int64_t>(ids.size());
    r.window = std::min<int64_t>(m_config.maxPositions, r.tokens);
    r.stride = std::max<int64_t>(1, r.window / 2);
    checkCacheFits(r.window, "bits per character", 1, /*wholePass=*/true);
    const at::Tensor all = at::tensor(ids, at::kLong).to(m_device);
    int64_t scoredUpTo = 1; // token 0 has no context
    const int64_t total = r.tokens;
    for (int64_t begin = 0; scoredUpTo < total; begin += r.stride) {
        const int64_t end = std::min(begin + r.window, total);
        begin = std::max<int64_t>(0, end - r.window);
        const at::Tensor window = all.slice(0, begin, end);
        const at::Tensor logits = m_net->forward(window.unsqueeze(0), nullptr, attn)[0];
        // Token j (absolute) is predicted by the logits at j − 1.
        const int64_t from = scoredUpTo;
        const at::Tensor logp =
            at::log_softmax(logits.slice(0, from - 1 - begin, end - 1 - begin), -1);
        const at::Tensor target = all.slice(0, from, end).unsqueeze(1);
        r.bits += -logp.gather(1, target).sum().item<double>() / std::log(2.0);
        r.scored += end - from;
        scoredUpTo = end;
        job.step(scoredUpTo, total);
    }
    return r;
}

CaptureInfo Model::captureInfo() const {
    CaptureInfo info;
    const ModelConfig& c = m_config;
    // One captured layer per attention layer (all of them but in a hybrid model).
    const std::vector<int64_t> layers = c.attentionLayers();
    const int64_t L = static_cast<int64_t>(layers.size());
    auto pick = [&](const std::vector<int64_t>& perModelLayer) {
        std::vector<int64_t> out;
        if (!perModelLayer.empty())
            for (int64_t l : layers)
                out.push_back(perModelLayer[static_cast<size_t>(l)]);
        return out;
    };
    info.model = m_spec;
    info.architecture = c.architectureName;
    info.nLayers = L;
    info.nHeads = c.nHeads;
    info.nKvHeads = c.nKvHeads;
    info.headDim = c.headDim;
    info.attnScale = c.attnScale;
    info.createdBy = std::string("sparqlab-cli ") + SPARQLAB_VERSION;
    info.layerAttnScale.assign(static_cast<size_t>(L), c.attnScale);
    info.layerSlidingWindow = pick(c.layerWindow);
    info.attnSoftcap = c.attnSoftcap;
    if (c.valueDim() != c.headDim)
        info.vHeadDim = c.valueDim();
    info.layerChunk = pick(c.layerChunk);
    if (c.rotaryDim > 0 && c.layout != Layout::GPT2) // RoPE models: which layers are NoPE
        for (int64_t l : layers)
            info.layerUsesRope.push_back(c.usesRope(l) ? 1 : 0);
    if (c.sinks && m_net) {
        std::vector<at::Tensor> rows;
        for (int64_t l : layers)
            rows.push_back(m_net->layerAttention(l).sinks);
        info.sinks = at::stack(rows).to(at::kCPU, at::kFloat); // files are written from the host
    }
    info.kvLoraRank = c.mla.kvLoraRank;
    info.qkRopeHeadDim = c.mla.kvLoraRank > 0 ? c.mla.ropeDim : 0;
    if (m_net && c.headDim % 2 == 0) { // each layer's rotate-half RoPE, NaN where none
        at::Tensor f = at::full({L, c.headDim / 2}, std::nan(""), at::kDouble);
        bool any = false;
        for (int64_t i = 0; i < L; ++i) {
            const at::Tensor row =
                m_net->layerAttention(layers[static_cast<size_t>(i)]).ropeInvFreq;
            if (row.defined()) {
                f[i].copy_(row);
                any = true;
            }
        }
        if (any)
            info.ropeInvFreq = f;
    }
    if (!c.layerKinds.empty()) { // a hybrid: every model layer's kind, and which are captured
        for (int64_t l = 0; l < c.nLayers; ++l)
            info.layerKinds.push_back(layerKindLabel(c.kindOf(l)));
        info.modelLayers = layers;
        info.linearStateElements = c.linear.stateElements();
    }
    if (c.compressed.active()) { // DeepSeek-V4: its compressed entries are captured
        for (int64_t l : layers) {
            info.layerCompressRate.push_back(c.compressed.rateOf(l));
            info.layerEntryIndexed.push_back(c.compressed.indexed(l) ? 1 : 0);
        }
        info.entryTopK = c.compressed.indexTopK;
        info.entryIndexDim = c.compressed.indexDim;
    }
    if (c.indexer.active()) { // DSA, MiniMax-M3: their scores are captured
        info.indexHeadDim = c.indexer.dim;
        info.indexHeads = c.indexer.heads;
        info.indexTopK = c.indexer.topK;
        if (c.indexer.blocks()) {
            info.indexBlockSize = c.indexer.blockSize;
            info.indexLocalBlocks = c.indexer.localBlocks;
            for (int64_t l : layers)
                info.layerIndexed.push_back(c.indexer.on(l) ? 1 : 0);
        }
    }
    return info;
}

} // namespace sparqlab::model
