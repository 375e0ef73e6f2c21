#pragma once
/// \file attention.h
/// The one attention interface of SparQ Lab: dense attention, SparQ Attention and the
/// baselines of SPARQ.md, for one decode step per batch row. Every caller (the model's
/// forward pass, `attend`, `bpc`, `generate`, the GUI and the benchmark) goes through
/// `attend()`.
///
/// Shapes follow SPARQ.md §1: q [B, Hq, D]; K, V [B, Hkv, S, D]; valid [B, S] (bool).
/// Query head h uses KV head h / (Hq / Hkv). Inputs may be float32, float16 or bfloat16
/// (computed in float32) or float64 (computed in float64). Outputs are in the compute dtype.
///
/// Threading: every function here is reentrant; libtorch's intra-op thread pool is used.

#include "attention/method_table.h"

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>

namespace sparqlab::attention {

/// Thrown for inputs that break a precondition (shapes, ranges). The message is one line.
class AttentionError : public std::invalid_argument {
public:
    using std::invalid_argument::invalid_argument;
};

/// Thrown when q, or K/V at a valid position, holds NaN or ±inf (SPARQ.md §2.1, [B9]).
class NonFiniteInputError : public AttentionError {
public:
    using AttentionError::AttentionError;
};

/// Softmax temperature of SparQ's approximate scores (SPARQ.md §3.2).
enum class TauMode {
    Adaptive, ///< Eq. 9: sqrt(D · ‖q̂‖₁/‖q‖₁)
    SqrtDh,   ///< sqrt(D)
    SqrtR,    ///< sqrt(r)
    One,      ///< 1 (the notebook's "none"; for the statistics)
    Fixed,    ///< a user-given positive number (AttentionConfig::tauValue)
};

/// How the r components are chosen in a GQA group (SPARQ.md §3.1).
enum class ComponentSelect { Group, PerHead };

/// SnapKV's pooling of the votes (METHODS.md §7.2).
enum class Pooling { Max, Avg };

/// A model's calibration for a calibrated method (Loki's basis, Double Sparsity's channels;
/// the file of CONTRACTS.md §6), every layer: the tensors its unit's calibrator makes, by name
/// (method_spec.h, CalibratorSpec::datasets), each with the layers first.
struct Calibration {
    Method method = Method::Loki;
    std::map<std::string, at::Tensor> tensors; ///< e.g. "basis" [L, Hkv, D, D]
    std::string model;                         ///< the model it was made from
    std::string source; ///< the file (or "the prompt") it came from, for messages
    /// The tensor `name`, undefined when the calibration has none.
    at::Tensor tensor(const std::string& name) const;
    int64_t layers() const; ///< the first tensor's leading dimension (0: none)
};

/// Every parameter of every method. Fields a method does not use are ignored.
struct AttentionConfig {
    /// k of a top-p method given no --k: no cap (k_max = S).
    static constexpr int64_t kNoCap = int64_t{1} << 40;

    Method method = Method::Dense;
    int64_t r = 32;                  ///< rank: SparQ's components (clamped to D), Loki's and
                                     ///< Double Sparsity's r (1 ≤ r ≤ D)
    int64_t k = 128;                 ///< positions kept, ≥ 1, counting the current token
                                     ///< (top-p: the cap k_max); k ≥ S means every position
    std::optional<int64_t> local;    ///< local window l; unset: 0, or ⌊k/4⌋ for H2O; > k: k
    TauMode tau = TauMode::Adaptive; ///< SparQ temperature
    double tauValue = 1.0;           ///< the temperature when tau == Fixed
    GroupSelect gqa = GroupSelect::SumProbs;
    ComponentSelect components = ComponentSelect::Group;
    bool meanValue = true;          ///< SparQ's mean-value reallocation (Eq. 10)
    bool flexgenReallocate = false; ///< FlexGen with Eq. 6's mean-value term
    int64_t pageSize = 16;          ///< Quest's page P
    double p = 0.9;                 ///< the top-p methods' mass
    int64_t snapWindow = 32;        ///< SnapKV's observation window w
    int64_t kernel = 5;             ///< SnapKV's pooling kernel (odd)
    Pooling pooling = Pooling::Max; ///< SnapKV's pooling
    /// Loki's basis or Double Sparsity's channels, all layers; `layer` picks one.
    std::shared_ptr<const Calibration> calibration;
    int64_t layer = 0;
    /// The parameters without a field of their own (ParamInfo::generic()), by id, as numbers (a
    /// Choice's index, a Flag's 0 or 1); one not here has the method's own default
    /// (MethodInfo::defaults) or else the table's.
    std::map<Param, double> values;
    /// Parameter p as a number (a Choice's index, a Flag's 0 or 1): from its field (Local:
    /// effectiveLocal()), or a generic one as above.
    double value(Param p) const;
    /// value(p) as a whole number.
    int64_t integer(Param p) const { return static_cast<int64_t>(value(p)); }
    /// Whether a generic parameter was given (is in `values`).
    bool given(Param p) const { return values.count(p) > 0; }

    std::optional<double> scale; ///< logit scale; unset: 1/sqrt(D)
    /// The model's attention modifiers (CONTRACTS.md §7): a logit soft-cap c (0: none) turns
    /// every logit into c·tanh(z/c), exact and approximate alike; a sliding window w (0: none)
    /// leaves only the w most recent valid positions, the current one included, valid.
    double softcap = 0;
    int64_t slidingWindow = 0;
    /// Chunked attention (Llama 4's local layers): the key at position j is visible from the
    /// step whose query sits at position i only when ⌊j/C⌋ = ⌊i/C⌋, i being the step's most
    /// recent valid position (0: none).
    int64_t chunk = 0;
    /// Attention sinks (gpt-oss): one logit per query head, [Hq], an extra key with a zero value
    /// that every softmax of every method includes, always attended and never transferred
    /// (docs/sinks-chunks-nope-mla.md). Undefined: none.
    at::Tensor sinks;
    /// The layer's rotary embedding, where it is a rotation of the whole head in Hugging Face's
    /// rotate-half layout (pairs i, i + D/2) by angles position × ropeInvFreq[i]: [D/2]
    /// float64. Undefined: not known (or not such a RoPE). Expected Attention averages the
    /// future rotations with it (θ = 10000 without it); ShadowKV's pre-RoPE keys need it.
    at::Tensor ropeInvFreq;
    /// A block indexer (MiniMax-M3; docs/learned-sparse-and-hybrid.md §8): the indexer method
    /// ranks blocks of indexBlock keys by the model's block scores and always keeps the
    /// indexLocalBlocks blocks ending at the query's own. 0: it ranks single keys (DSA). A capture
    /// of the model sets them (CaptureInfo::layerConfig).
    int64_t indexBlock = 0, indexLocalBlocks = 0;

    /// The local window in effect for this method (SPARQ.md §2.7, §4.4.2).
    int64_t effectiveLocal() const;

    /// Checks the parameters a user gave against a model's shape, stricter than the algorithm
    /// needs (r ≤ D, τ finite and > 0, a calibration of the model's shape, each method's own
    /// rules). Throws AttentionError with one line naming the option.
    void validateFor(int64_t headDim, int64_t layers = 0, int64_t heads = 0,
                     int64_t kvHeads = 0) const;
    /// What the algorithm itself needs (r, k ≥ 1, l ≥ 0, τ, P, p in range), as validateFor
    /// says it but without its model checks: the decode engine's check.
    void checkRanges() const;
};

/// Inputs of one decode step. Tensors are borrowed, never modified.
struct AttentionInputs {
    at::Tensor q;     ///< [B, Hq, D]
    at::Tensor k;     ///< [B, Hkv, S, D]
    at::Tensor v;     ///< [B, Hkv, S, Dv]: Dv may differ from D (MLA), y is [B, Hq, Dv]
    at::Tensor valid; ///< [B, S] bool; undefined means every position is valid
    at::Tensor acc;   ///< [B, Hkv, S] H2O accumulated attention; needed by Method::H2O
    /// SnapKV's window queries [B, Hq, w, D]: slot i is the query of the valid position with
    /// cidx = w−1−i (METHODS.md §7.1); slots without a position are never read.
    at::Tensor qWin;
    /// What a method reads beyond these, by name (its unit's MethodSpec::inputs lists them, with
    /// their shapes): "q_all" [B, Hq, S, D] the post-RoPE query of every position (Expected
    /// Attention); "pq_centroids" [B, Hkv, m, C, D/m] and "pq_codes" [B, Hkv, m, S] (a PQCache
    /// codebook; built from K when absent); "hyperplanes" [D, K·L] (MagicPIG; drawn from
    /// --hash-seed when absent); "k_pre" [B, Hkv, S, D], "rope_cos", "rope_sin" [B, S, D]
    /// (ShadowKV's pre-RoPE keys; from ropeInvFreq when absent). They are per position, shared
    /// by the T steps of attendSteps.
    std::map<std::string, at::Tensor> extra{};
    /// The input `name` of extra (undefined when absent).
    at::Tensor input(const std::string& name) const;
};

/// What a viewer may want besides y. Intermediates cost memory [B, Hq, S] each.
struct AttendOptions {
    bool keepScores = false; ///< fill logits/probs (exact) and, for SparQ, zHat/sHat
    bool validate = true;    ///< reject non-finite inputs (SPARQ.md §2.1)
    bool diagnostics = true; ///< indices, selected, count, mass, margins (false: y only)
};

/// Outputs (SPARQ.md §3.6, METHODS.md §1.3). Tensors a method does not produce are left
/// undefined. attend() gives one decode step ([B, Hq, …]); attendSteps() T steps
/// ([B, Hq, T, …]).
struct AttentionResult {
    at::Tensor y;           ///< [B, Hq, D] output
    at::Tensor indices;     ///< [B, Hq, W] int64 positions used, ascending, −1 padded
    at::Tensor selected;    ///< [B, Hq, S] bool mask of the positions used
    at::Tensor count;       ///< [B, Hq] int64 positions used
    at::Tensor mass;        ///< [B, Hq] exact softmax mass on the positions used
    at::Tensor alpha;       ///< [B, Hq] SparQ's α (1 for methods without one)
    at::Tensor tau;         ///< [B, Hq] SparQ temperature
    at::Tensor compIdx;     ///< [B, Hq, r_eff] int64 SparQ components, ascending
    at::Tensor margin;      ///< [B, Hq] selection margin (SPARQ.md §2.3)
    at::Tensor marginRel;   ///< [B, Hq]
    at::Tensor yTopk;       ///< [B, Hq, D] SparQ's attention over the top-k before Eq. 10
    at::Tensor meanV;       ///< [B, Hkv, D] mean of V over valid positions
    at::Tensor weightSum;   ///< [B, Hq] FlexGen's Σ_{j∈I} s_j
    at::Tensor estMass;     ///< [B, Hq] top-p: the unit's criterion mass (METHODS.md §6.1)
    at::Tensor massMargin;  ///< [B, Hq] top-p: how far the count is from flipping
    at::Tensor pageIndices; ///< [B, Hq, Wp] Quest's pages, ascending, −1 padded
    at::Tensor pageScore;   ///< [B, Hq, ⌈S/P⌉] Quest's upper bounds U (−inf: no such page)
    at::Tensor votes;       ///< [B, Hq, S] SnapKV's window votes (0 outside the prefix)
    at::Tensor pooled;      ///< [B, Hq, S] SnapKV's pooled votes
    at::Tensor logits;      ///< [B, Hq, S] exact logits z (−inf invalid), with keepScores
    at::Tensor probs;       ///< [B, Hq, S] exact probabilities s, with keepScores
    at::Tensor zHat;        ///< [B, Hq, S] approximate logits ẑ (SparQ, Loki, Double Sparsity)
    at::Tensor sHat;        ///< [B, Hq, S] approximate probabilities ŝ, with keepScores
    /// A method's own outputs, by name, each [B, Hq, …] (T steps: [B, Hq, T, …]), with
    /// diagnostics: e.g. MagicPIG's "n_sampled", AdaKV's "capacity", RocketKV's "kept"
    /// (METHODS2.md, METHODS3.md; the unit's MethodSpec::outputs describes them).
    std::map<std::string, at::Tensor> extra{};
    /// The output `name` of extra (undefined when absent).
    at::Tensor output(const std::string& name) const;
};

/// Runs `config.method` on one decode step. Throws AttentionError on bad input. TOVA (which
/// needs its steps) runs its single step: dense over the valid positions (METHODS.md §8.4).
AttentionResult attend(const AttentionInputs& in, const AttentionConfig& config,
                       const AttendOptions& options = {});

/// T decode steps that share K and V, each with its own query and valid positions:
/// q [B, Hq, T, D], valid [B, T, S]; H2O's acc may be [B, Hkv, T, S], SnapKV's qWin
/// [B, Hq, T, w, D]. Equal to T calls of attend() (stateless methods; TOVA runs the steps in
/// order with one layer-wide cache, METHODS.md §8), computed at once: approximate scores
/// [T, S], a selection per row, exact attention over the chosen rows. Outputs [B, Hq, T, …].
AttentionResult attendSteps(const AttentionInputs& in, const AttentionConfig& config,
                            const AttendOptions& options = {});

struct MethodState;

/// What the stateful methods carry from one call of attendCausal to the next, for one layer
/// (it lives in the model's KV cache): each method's own state (method_spec.h), by method.
struct CausalState {
    std::map<Method, std::shared_ptr<MethodState>> methods;
    /// Dense steps keep what every stateful method needs to take over after them (a dense
    /// prefill, then decoding with H2O or SnapKV, as the paper's harness runs), with the
    /// parameters of `observeConfig` (SnapKV's window).
    bool observe = false;
    AttentionConfig observeConfig;
    /// A deep copy: a snapshot to restart several methods from.
    CausalState clone() const;
};

/// What a prefill chunk leaves for the stateful methods to take over after it (H2O's
/// accumulated attention, SnapKV's window), from the probabilities probs [B, Hq, T, S] with
/// which queries q [B, Hq, T, D] at positions firstPos … firstPos+T−1 attended over k, v
/// [B, Hkv, S, D]: the dense path's (attendCausal with `state.observe`), or a model's own
/// selection's (DSA, MiniMax-M3).
void observeCausal(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, int64_t firstPos,
                   const at::Tensor& probs, CausalState& state);

/// Causal attention as a model layer needs it: T queries q [B, Hq, T, D] at positions
/// firstPos … firstPos+T−1 over K, V [B, Hkv, S, D] (S ≥ firstPos+T), each query seeing keys
/// 0..its position. Dense runs as one masked product; every other method treats each query as
/// one decode step (attendSteps). Stateful methods keep their state in `state` (required for
/// H2O, TOVA and SnapKV): H2O's accumulated attention, TOVA's cache, SnapKV's compressed
/// prompt (a call of several queries compresses at its last one; later one-query calls
/// attend to what it kept and everything after). Returns y [B, Hq, T, D].
at::Tensor attendCausal(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                        int64_t firstPos, const AttentionConfig& config,
                        CausalState* state = nullptr);

/// Logits of causal attention, as the model computes them: T queries q [B, Hq, T, D] at
/// positions firstPos … firstPos+T−1 over keys K [B, Hkv, S, D], scaled, soft-capped,
/// windowed and chunked by `config` (its method is ignored). Returns [B, Hq, T, S] in the
/// compute dtype, −inf where a key is not visible. Differentiable (the demo trainer's
/// attention loss uses it).
at::Tensor causalLogits(const at::Tensor& q, const at::Tensor& k, int64_t firstPos,
                        const AttentionConfig& config);
/// Their attention probabilities [B, Hq, T, S]: softmax over the visible keys and, with
/// `config.sinks`, each head's sink (whose probability is not returned: rows sum to less than
/// one, as Hugging Face's attention weights of gpt-oss).
at::Tensor causalProbabilities(const at::Tensor& q, const at::Tensor& k, int64_t firstPos,
                               const AttentionConfig& config);

/// Softmax over the last axis of logits z with a sink: exp(z_j) / (Σ_i exp(z_i) + exp(sink)),
/// `sink` broadcastable to z's shape with a last axis of 1 (undefined: softmax(z)). The one
/// home of the sink's formula (docs/sinks-chunks-nope-mla.md).
at::Tensor softmaxWithSink(const at::Tensor& z, const at::Tensor& sink);
/// The same in place (z holds the probabilities after it).
void softmaxWithSinkInPlace(at::Tensor& z, const at::Tensor& sink);

/// SPARQ.md §4.4.1: accumulated attention of history queries qHist [B, Hq, T, D] that sit at
/// positions histPos[t] and attend densely to valid positions ≤ histPos[t]. Returns [B, Hkv, S].
at::Tensor h2oAccumulate(const at::Tensor& qHist, const at::Tensor& k, const at::Tensor& valid,
                         const std::vector<int64_t>& histPos, std::optional<double> scale = {});

/// SPARQ.md §4.4.3: H2O with permanent eviction, carried across decode steps of one layer.
class H2OState {
public:
    /// acc0 [B, Hkv, S]: initial accumulated scores (e.g. from h2oAccumulate over the prefill).
    H2OState(at::Tensor acc0, const at::Tensor& valid);

    /// One decode step: the query q [B, Hq, D] at position `pos`, over keys 0..pos.
    AttentionResult step(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, int64_t pos,
                         int64_t kKeep, int64_t local, std::optional<double> scale = {});

    const at::Tensor& acc() const { return m_acc; }     ///< [B, Hkv, S]
    const at::Tensor& alive() const { return m_alive; } ///< [B, Hkv, S] bool, valid positions only

private:
    at::Tensor m_acc;
    at::Tensor m_alive;
    at::Tensor m_valid;
};

/// METHODS.md §8: TOVA over the decode steps q [B, Hq, T, D] at the strictly increasing
/// positions stepPos (valid in every row), one layer-wide cache of k − 1 positions.
struct TovaResult {
    at::Tensor y;              ///< [B, Hq, T, D]
    at::Tensor indices;        ///< [B, Hq, S] the last step's attended set, −1 padded
    at::Tensor attended;       ///< [B, T, S] bool: the set each step attended
    at::Tensor alive;          ///< [B, S] after the last step (valid positions only)
    at::Tensor count;          ///< [B, T] int64
    at::Tensor evictMargin;    ///< [B, T] (+inf where nothing was evicted)
    at::Tensor evictMarginRel; ///< [B, T]
};
TovaResult tova(const at::Tensor& qSteps, const at::Tensor& k, const at::Tensor& v,
                const at::Tensor& valid, const std::vector<int64_t>& stepPos,
                const AttentionConfig& config, at::Tensor* alive = nullptr);

/// METHODS.md §4.1: Loki's PCA basis of calibration keys kCal [..., Hkv, N, D] (leading dims
/// pooled with N), centred (covariance / (n − 1)) or not (second moment / n).
struct LokiCalibration {
    at::Tensor basis;                  ///< [Hkv, D, D], column i = component i (sign rule §4.1)
    at::Tensor eigenvalues;            ///< [Hkv, D] descending
    at::Tensor mean;                   ///< [Hkv, D]
    at::Tensor explainedVarianceRatio; ///< [Hkv, D]
};
LokiCalibration lokiCalibrate(const at::Tensor& kCal, bool center = true);

/// METHODS.md §5.1: Double Sparsity's channel ranking per query head from the queries
/// qCal [..., Hq, N, D] and keys kCal [..., Hkv, N, D] of the same tokens.
enum class ChannelMode { QK, Q, K };
struct ChannelCalibration {
    at::Tensor channels; ///< [Hq, D] int64, by descending score (ties → lower channel)
    at::Tensor score;    ///< [Hq, D]
};
ChannelCalibration dsCalibrate(const at::Tensor& qCal, const at::Tensor& kCal,
                               ChannelMode mode = ChannelMode::QK);

/// The mean of V over the positions seen so far, updated in O(B·Hkv·D) per decode step
/// (SPARQ.md §2.5: equals the mean over all valid positions in exact arithmetic).
class RunningMeanV {
public:
    /// Starts from V [B, Hkv, S, D] (the prefill), every position valid.
    explicit RunningMeanV(const at::Tensor& v);
    /// Adds the value of one new position, vNew [B, Hkv, D].
    void append(const at::Tensor& vNew);
    at::Tensor mean() const; ///< [B, Hkv, D] in float32
    int64_t count() const { return m_count; }

private:
    at::Tensor m_sum; // float64 running sum, so that long generations do not drift
    int64_t m_count = 0;
};

/// Parses and prints the names used by the command line and the files (CONTRACTS.md §2),
/// from the method table (method_table.h).
Method parseMethod(const std::string& name);
std::string methodName(Method m);
/// A parameter's value in `config` as the command line takes it ("16", "0.9", "sum-probs",
/// "max", the calibration's file; for the flag --no-mean-value: "1" when the mean value is used),
/// for result files, JSON and the GUI. k of a top-p method without a cap gives "none".
std::string paramValue(const AttentionConfig& config, Param p);
/// paramValue as the method uses it: a value above its bound's (the local window above k) is
/// the bound's, where the method takes the bound (SPARQ.md §2.7).
std::string paramValueInEffect(const AttentionConfig& config, Param p);
/// The inverse: sets parameter p of `config` from its text ("16", "0.9", "sum-probs"; for the
/// flag --no-mean-value any text turns the mean value off), checked against the table's range.
/// Calibration files (Basis, Channels) are the caller's to read. Throws AttentionError with
/// what is wrong, without the option's name ("must be at least 1, got 0", "needs a whole
/// number, got 'x'").
void setParamValue(AttentionConfig& config, Param p, const std::string& value);
/// Sets parameter p of `config` to the number x (a Choice's index, a Flag's 0 or 1), where its
/// row says it lives; unchecked (the lab's controls hold only values in range).
void setParamNumber(AttentionConfig& config, Param p, double x);
/// `text` read as parameter `info` by its kind (a Choice's index, a Flag's 1, "0" for off),
/// checked against its range; throws AttentionError as setParamValue.
double parseParamNumber(const ParamInfo& info, const std::string& text);
/// The whole of `text` as a whole number: nullopt when it is empty, has anything after the
/// number, or does not fit in 64 bits. The one strict parser of every option and attribute.
std::optional<int64_t> parseWholeNumber(const std::string& text);
/// The whole of `text` as a finite number; nullopt otherwise (trailing text, inf, NaN).
std::optional<double> parseFiniteNumber(const std::string& text);
Pooling parsePooling(const std::string& name);
std::string poolingName(Pooling p);
ChannelMode parseChannelMode(const std::string& name);
TauMode parseTauMode(const std::string& name, double* value);
std::string tauName(TauMode mode, double value);
GroupSelect parseGroupSelect(const std::string& name);
std::string groupSelectName(GroupSelect g);

} // namespace sparqlab::attention
