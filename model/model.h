#pragma once
/// \file model.h
/// A model opened from a Hugging Face folder, a cached hub id or the word `demo`
/// (CONTRACTS.md §1): config, weights, tokenizer when present; logits, greedy generation and
/// q/K/V capture.
///
/// Threading: one thread at a time per Model, enforced (Model::UseGuard). Long calls take a
/// progress/cancel callback.

#include "base/job.h"
#include "model/captured.h"
#include "model/model_config.h"
#include "model/transformer.h"

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace sparqlab::text {
class Tokenizer;
}

namespace sparqlab::model {

/// Hub ids (ORG/NAME) of the models in the local Hugging Face cache, sorted (nothing is
/// downloaded; any of them opens with Model::open).
std::vector<std::string> cachedHubModels();

/// Work that would not fit in the memory available now, refused before it starts.
class MemoryError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

/// Throws MemoryError ("WHERE: WHAT need N MiB but only M MiB are available") when `bytes`
/// exceed 90% of the memory available now.
void checkFitsInMemory(const std::string& where, const std::string& what, int64_t bytes);
/// The same against `available` bytes (≤ 0: unknown, no check) of the memory `place` names
/// ("" for the host's, "on the GPU").
void checkFits(const std::string& where, const std::string& what, int64_t bytes, int64_t available,
               const std::string& place = {});
/// checkFitsInMemory on the CPU; on a CUDA device, against the device's free memory now.
void checkFitsOnDevice(const std::string& where, const std::string& what, int64_t bytes,
                       at::Device device);

/// `attn` with its calibration's tensors (Loki's basis, Double Sparsity's channels, made on the
/// host) on `device`, copied once per run rather than at every step; `attn` itself where they are
/// there already.
attention::AttentionConfig onDevice(const attention::AttentionConfig& attn, at::Device device);

/// Where a model specification points: a folder, or an error naming what was looked for.
/// `demo` → the shipped demo model; `ORG/NAME` → the local Hugging Face cache; else a path.
std::string resolveModelFolder(const std::string& spec);

/// The dtype a model computes in.
enum class ComputeDtype {
    Auto,    ///< float32 when it fits in memory, else the weights' half dtype, mapped from disk
    Float32, ///< float32 (refused when it does not fit)
    Stored,  ///< as the weights are stored (BF16/F16 checkpoints: their pages mapped, not copied)
};

/// Options of Model::open.
struct ModelOpenOptions {
    std::string weightsFile;   ///< a .safetensors file to use instead of the folder's
    bool loadWeights = true;   ///< false: config (and tokenizer) only
    bool loadTokenizer = true; ///< read tokenizer.json when present
    ComputeDtype compute = ComputeDtype::Auto;
    /// Where the weights, the KV cache and the forward passes live (attention::requireDevice).
    /// On CUDA the weights keep their stored dtype unless compute is Float32, and the weights
    /// with a KV cache of `cacheTokens` positions are checked against the GPU's free memory
    /// before anything is loaded.
    at::Device device = at::kCPU;
    int64_t cacheTokens = 0;
    /// Progress in (bytes loaded, bytes) while the weights load; cancel between tensors.
    base::Job job;
};

/// Teacher-forced bits per character of a text (CONTRACTS.md §2 `bpc`).
struct BpcResult {
    double bits = 0;    ///< total −log2 p over the scored tokens
    int64_t chars = 0;  ///< Unicode characters of the text
    int64_t tokens = 0; ///< tokens of the text (incl. a leading BOS if the template adds one)
    int64_t scored = 0; ///< tokens whose probability was counted
    int64_t window = 0; ///< tokens per forward pass (the context)
    int64_t stride = 0; ///< new tokens scored per window after the first
    double bpc() const { return chars ? bits / static_cast<double>(chars) : 0.0; }
};

/// Result of greedy decoding.
struct Generation {
    std::vector<int64_t> promptIds;
    std::vector<int64_t> newIds;
    std::vector<at::Tensor> stepLogits; ///< [vocab] logits that chose each new token
    /// With token healing: the prompt's text taken off its end and generated again (the new
    /// tokens' text starts with it; the continuation is what follows), by the first
    /// `healedTokens` new tokens (the steps constrained to spell it).
    std::string healed;
    int64_t healedTokens = 0;
};

/// Token healing (transformers' generate(token_healing=True), over a whole word): a prompt that
/// ends inside a word, or with a space, is tokenized otherwise than the same text inside a
/// longer one ("…distinguishe" + "d guests"), which throws a model off the continuation it
/// would give. The last tokens back to a word start (at most `maxTokens`) are taken off the
/// prompt and the first generated tokens must spell them again. `texts` holds each token's
/// text (Tokenizer::decode of it alone).
struct HealedPrompt {
    std::vector<int64_t> ids; ///< the prompt without them
    std::string removed;      ///< their text
};
HealedPrompt healPrompt(const std::vector<int64_t>& ids, const std::vector<std::string>& texts,
                        int maxTokens = 8);

/// Greedy decoding on a network (what Model::generate runs; the demo trainer's copy probes
/// use it on the network it trains): the prompt, then up to maxNewTokens argmax tokens,
/// stopping after an id of `eos` when stopAtEos. The prompt must fit the context with them.
Generation greedyDecode(CausalLMImpl& net, const std::vector<int64_t>& prompt, int64_t maxNewTokens,
                        const attention::AttentionConfig& attn = {},
                        const std::vector<int64_t>& eos = {}, bool stopAtEos = true,
                        const base::Job& job = {});
/// The same with token healing: `heal` is the text the first tokens must spell (each chosen
/// among the tokens whose text continues it), `texts` every token's text.
Generation greedyDecodeHealed(CausalLMImpl& net, const HealedPrompt& heal,
                              const std::vector<std::string>& texts, int64_t maxNewTokens,
                              const attention::AttentionConfig& attn = {},
                              const std::vector<int64_t>& eos = {}, bool stopAtEos = true,
                              const base::Job& job = {});

/// A prompt prefilled once with dense attention, from which several attention methods each
/// continue greedily — the paper's evaluation harness (App. G): the prompt's positions but
/// the last attend densely; the last prompt position and every generated one use the method.
/// H2O starts from the dense prefill's accumulated attention, SnapKV compresses the prompt
/// at the last prompt position with the queries before it, TOVA reduces its cache there.
class PromptPrefill {
public:
    /// Prefills prompt[0 .. P−2] into a cache with room for maxNewTokens more; SnapKV windows
    /// up to `snapWindow` are supported afterwards.
    PromptPrefill(CausalLMImpl& net, std::vector<int64_t> prompt, int64_t maxNewTokens,
                  int64_t snapWindow = 64);
    /// Greedy continuation with `attn` from the prefill (the cache is rewound each time).
    Generation continueWith(const attention::AttentionConfig& attn, int64_t maxNewTokens,
                            const std::vector<int64_t>& eos = {}, bool stopAtEos = true,
                            const base::Job& job = {});
    int64_t promptLength() const { return static_cast<int64_t>(m_prompt.size()); }
    /// Each layer's state after the dense part (H2O's accumulated attention, SnapKV's queries).
    const std::vector<attention::CausalState>& prefillStates() const { return m_states; }

private:
    CausalLMImpl& m_net;
    std::vector<int64_t> m_prompt;
    int64_t m_capacity;
    KVCache m_cache;
    std::vector<attention::CausalState> m_states; ///< after the dense part
    /// A hybrid's linear layers' states after the dense part (a recurrent state is not rewound:
    /// each continuation starts from a copy).
    std::vector<std::shared_ptr<LinearState>> m_linear;
    /// Each calibration continued with, on the network's device, held with the host one it was
    /// copied from (so that neither address is reused while the cache keeps a projection
    /// tagged by it): copied once, however many continuations use it.
    std::map<const attention::Calibration*,
             std::pair<std::shared_ptr<const attention::Calibration>,
                       std::shared_ptr<const attention::Calibration>>>
        m_onDevice;
};

/// A model entered from a second thread while another runs it (Model::UseGuard).
struct ModelBusyError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

class Model {
public:
    /// Opens a model; throws ConfigError/CheckpointError/TokenizerError with one line.
    static std::unique_ptr<Model> open(const std::string& spec, const ModelOpenOptions& o = {});
    ~Model();

    const std::string& spec() const { return m_spec; }
    const std::string& folder() const { return m_folder; }
    const ModelConfig& config() const { return m_config; }
    CausalLM& net() { return m_net; }
    /// The stored dtype of the weights ("float32", "bfloat16", …).
    const std::string& weightsDtype() const { return m_weightsDtype; }
    /// The dtype the model computes in (float32, or bfloat16/float16 when float32 would not fit).
    at::ScalarType computeDtype() const { return m_compute; }
    /// Where the weights and the forward passes are (ModelOpenOptions::device).
    at::Device device() const { return m_device; }
    /// Checks that a KV cache of `tokens` positions for each of `batch` sequences, and a prefill
    /// chunk's scores over them (1,024 rows over the batch; `wholePass`: every position at once,
    /// with every position's logits, as logits() and bits per character run), fits the memory of
    /// the model's device now; throws MemoryError naming `what`. On the CPU the callers' own checks
    /// apply.
    void checkCacheFits(int64_t tokens, const std::string& what, int64_t batch = 1,
                        bool wholePass = false) const;

    bool hasTokenizer() const { return m_tokenizer != nullptr; }
    /// The tokenizer; throws TokenizerError naming the folder when there is none.
    const text::Tokenizer& tokenizer() const;

    /// End-of-sequence ids (generation_config.json, else config.json).
    const std::vector<int64_t>& eosIds() const { return m_eos; }

    /// Checks ids against the vocabulary and the context with `extra` new tokens (≥ 0) after
    /// them; throws InputError (model/input_error.h) with one line.
    void checkIds(const std::vector<int64_t>& ids, int64_t extra = 0) const;

    /// Logits [T, vocab] of one sequence, no cache (a full forward pass).
    at::Tensor logits(const std::vector<int64_t>& ids, const attention::AttentionConfig& attn = {});

    /// Runs the prompt through the model into `cache` (in chunks of 1024 positions) and
    /// returns the logits of its last position [1, 1, vocab], on the model's device.
    at::Tensor prefill(const std::vector<int64_t>& prompt, KVCache& cache,
                       const attention::AttentionConfig& attn = {});

    /// Greedy decoding with the KV cache; stops at an end-of-sequence id when stopAtEos.
    /// The method attends at every position, the prompt's included (teacher-forced).
    Generation generate(const std::vector<int64_t>& prompt, int64_t maxNewTokens,
                        const attention::AttentionConfig& attn = {}, bool stopAtEos = true,
                        const base::Job& job = {});
    /// generate with token healing (healPrompt); needs the tokenizer.
    Generation generateHealed(const std::vector<int64_t>& prompt, int64_t maxNewTokens,
                              const attention::AttentionConfig& attn = {}, bool stopAtEos = true,
                              const base::Job& job = {});
    /// Every token's text, for token healing (made on first use).
    const std::vector<std::string>& tokenTexts();
    /// The text a generation continues the prompt with: its new tokens decoded (special ones
    /// skipped), less the healed part of the prompt they spell again.
    std::string continuationText(const Generation& g) const;
    /// The prompt prefilled densely, for methods to continue from (PromptPrefill), checked
    /// against the context with maxNewTokens more.
    std::unique_ptr<PromptPrefill> prefillDense(const std::vector<int64_t>& prompt,
                                                int64_t maxNewTokens, int64_t snapWindow = 64);

    /// Runs the (dense) model over `ids` and returns its capture: q of the positions asked
    /// for (default: the last), and K, V of every position, every layer. `job` reports
    /// (layers done, layers) after each layer; cancelled, the forward pass stops there with
    /// base::Cancelled. With `recentQueries` > 0 the queries of that many positions
    /// up to the last are kept (what the lab reads for SnapKV, TOVA and H2O). Prompts longer
    /// than `chunk` run in chunks of that many queries against the keys so far (the result is
    /// the same; memory grows as chunk × S, not S²); `job` then counts chunk × layer.
    CaptureExample capture(const std::vector<int64_t>& ids, bool allQueries,
                           int64_t lastQueryPosition = -1, const base::Job& job = {},
                           int64_t recentQueries = 0, int64_t chunk = 1024);

    /// Bits per character of `text`, in windows of the context with half-window stride.
    BpcResult bitsPerCharacter(const std::string& text, const attention::AttentionConfig& attn = {},
                               const base::Job& job = {});
    /// The same over ids already tokenized, with the character count given.
    BpcResult bitsPerCharacter(const std::vector<int64_t>& ids, int64_t chars,
                               const attention::AttentionConfig& attn = {},
                               const base::Job& job = {});

    /// The capture attributes of this model.
    CaptureInfo captureInfo() const;

    /// One thread at a time: the forward passes share the network's buffers. Held by every
    /// entry point that runs the network (capture, logits, prefill, generate, bpc); a second
    /// thread entering while another holds it gets ModelBusyError instead of a race. The same
    /// thread may nest.
    class UseGuard {
    public:
        explicit UseGuard(Model& m);
        ~UseGuard();
        UseGuard(const UseGuard&) = delete;
        UseGuard& operator=(const UseGuard&) = delete;

    private:
        Model& m_model;
    };

private:
    Model() = default;
    std::mutex m_useMutex;
    std::thread::id m_user;
    int m_useDepth = 0;
    std::string m_spec, m_folder, m_weightsDtype;
    at::ScalarType m_compute = at::kFloat;
    at::Device m_device = at::kCPU;
    ModelConfig m_config;
    CausalLM m_net{nullptr};
    std::unique_ptr<text::Tokenizer> m_tokenizer;
    std::vector<int64_t> m_eos;
    std::vector<std::string> m_tokenTexts;
};

} // namespace sparqlab::model
