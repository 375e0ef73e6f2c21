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

#include <ATen/core/Tensor.h>

#include <cstdint>
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

/// The attention methods of SPARQ.md §3–4.
enum class Method { Dense, Sparq, Oracle, FlexGen, LmInfinite, H2O };

/// Softmax temperature of SparQ's approximate scores (SPARQ.md §3.2).
enum class TauMode {
    Adaptive, ///< Eq. 9: sqrt(D · ‖q̂‖₁/‖q‖₁)
    SqrtDh,   ///< sqrt(D)
    SqrtR,    ///< sqrt(r)
    One,      ///< 1 (the notebook's "none"; for the statistics)
    Fixed,    ///< a user-given positive number (AttentionConfig::tauValue)
};

/// How the heads of a GQA group share their selected positions (SPARQ.md §2.6).
enum class GroupSelect { SumProbs, SumLogits, PerHead };

/// How the r components are chosen in a GQA group (SPARQ.md §3.1).
enum class ComponentSelect { Group, PerHead };

/// Every parameter of every method. Fields a method does not use are ignored.
struct AttentionConfig {
    Method method = Method::Dense;
    int64_t r = 32;                  ///< SparQ rank (components of q), ≥ 1; clamped to D
    int64_t k = 128;                 ///< positions kept, ≥ 1, counting the current token
    std::optional<int64_t> local;    ///< local window l; unset: 0, or ⌊k/4⌋ for H2O
    TauMode tau = TauMode::Adaptive; ///< SparQ temperature
    double tauValue = 1.0;           ///< the temperature when tau == Fixed
    GroupSelect gqa = GroupSelect::SumProbs;
    ComponentSelect components = ComponentSelect::Group;
    bool meanValue = true;          ///< SparQ's mean-value reallocation (Eq. 10)
    bool flexgenReallocate = false; ///< FlexGen with Eq. 6's mean-value term
    int64_t sink = 16;              ///< LM-Infinite sink tokens
    std::optional<double> scale;    ///< logit scale; unset: 1/sqrt(D)

    /// The local window in effect for this method (SPARQ.md §2.7, §4.4.2).
    int64_t effectiveLocal() const;

    /// Checks the parameters a user gave against a model's head dimension, stricter than the
    /// algorithm needs (r ≤ D, l ≤ k, τ finite and > 0). Throws AttentionError with one line.
    void validateFor(int64_t headDim) const;
};

/// Inputs of one decode step. Tensors are borrowed, never modified.
struct AttentionInputs {
    at::Tensor q;     ///< [B, Hq, D]
    at::Tensor k;     ///< [B, Hkv, S, D]
    at::Tensor v;     ///< [B, Hkv, S, D]
    at::Tensor valid; ///< [B, S] bool; undefined means every position is valid
    at::Tensor acc;   ///< [B, Hkv, S] H2O accumulated attention; needed by Method::H2O
};

/// What a viewer may want besides y. Intermediates cost memory [B, Hq, S] each.
struct AttendOptions {
    bool keepScores = false; ///< fill logits/probs (exact) and, for SparQ, zHat/sHat
    bool validate = true;    ///< reject non-finite inputs (SPARQ.md §2.1)
};

/// Outputs (SPARQ.md §3.6). Tensors a method does not produce are left undefined.
struct AttentionResult {
    at::Tensor y;         ///< [B, Hq, D] output
    at::Tensor indices;   ///< [B, Hq, W] int64 positions used, ascending, −1 padded
    at::Tensor selected;  ///< [B, Hq, S] bool mask of the positions used
    at::Tensor alpha;     ///< [B, Hq] SparQ's α (1 for methods without one)
    at::Tensor tau;       ///< [B, Hq] SparQ temperature
    at::Tensor compIdx;   ///< [B, Hq, r_eff] int64 SparQ components, ascending
    at::Tensor margin;    ///< [B, Hq] selection margin (SPARQ.md §2.3)
    at::Tensor marginRel; ///< [B, Hq]
    at::Tensor yTopk;     ///< [B, Hq, D] SparQ's attention over the top-k before Eq. 10
    at::Tensor meanV;     ///< [B, Hkv, D] mean of V over valid positions
    at::Tensor mass;      ///< [B, Hq] exact softmax mass on the positions used (oracle)
    at::Tensor weightSum; ///< [B, Hq] FlexGen's Σ_{j∈I} s_j
    at::Tensor logits;    ///< [B, Hq, S] exact logits z (−inf invalid), with keepScores
    at::Tensor probs;     ///< [B, Hq, S] exact probabilities s, with keepScores
    at::Tensor zHat;      ///< [B, Hq, S] SparQ approximate logits ẑ, with keepScores
    at::Tensor sHat;      ///< [B, Hq, S] SparQ approximate probabilities ŝ, with keepScores
};

/// Runs `config.method` on one decode step. Throws AttentionError on bad input.
AttentionResult attend(const AttentionInputs& in, const AttentionConfig& config,
                       const AttendOptions& options = {});

/// Causal attention as a model layer needs it: T queries q [B, Hq, T, D] at positions
/// firstPos … firstPos+T−1 over K, V [B, Hkv, S, D] (S ≥ firstPos+T), each query seeing keys
/// 0..its position. Dense runs as one masked product; every other method treats each query as
/// one decode step through attend(). For H2O, `h2oAcc` [B, Hkv, S] holds the accumulated
/// dense attention of all earlier queries (§4.4.1) and is updated; it is required for H2O.
/// Returns y [B, Hq, T, D] in the compute dtype.
at::Tensor attendCausal(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                        int64_t firstPos, const AttentionConfig& config,
                        at::Tensor* h2oAcc = nullptr);

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

/// Parses and prints the names used by the command line and the files (CONTRACTS.md §2).
Method parseMethod(const std::string& name);
std::string methodName(Method m);
TauMode parseTauMode(const std::string& name, double* value);
std::string tauName(TauMode mode, double value);
GroupSelect parseGroupSelect(const std::string& name);
std::string groupSelectName(GroupSelect g);

} // namespace sparqlab::attention
