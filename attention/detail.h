#pragma once
/// \file detail.h
/// Internals shared by the method units (attention/methods/): the prepared inputs of T decode
/// steps that share K and V, and the common steps of SPARQ.md §2 written once (detail.cpp).
/// Not part of the library's interface.

#include "attention/attention.h"
#include "attention/method_spec.h"
#include "attention/select.h"

#include <ATen/core/Tensor.h>

#include <limits>
#include <string>

namespace sparqlab::attention::detail {

inline constexpr double kInf = std::numeric_limits<double>::infinity();

[[noreturn]] void fail(const std::string& message);
std::string shapeOf(const at::Tensor& t);
/// float64 stays float64; every other dtype computes in float32.
at::ScalarType computeType(const at::Tensor& t);
/// The model's modifiers (scale, soft-cap, window) in range, or one line saying which is not.
void checkModifiers(const AttentionConfig& c);
/// Every check of a configuration (AttentionConfig::validateFor, checkRanges, the decode
/// engine): the ranges the algorithm needs, and with `user` what a user may give against the
/// model's `shape` (r ≤ D, the calibration's shape, the method's own rules).
void checkConfig(const AttentionConfig& c, const ModelShape& shape, bool user);

/// T decode steps per batch row over one K, V, checked and converted (SPARQ.md §1–2.1).
/// Layout: the query axis T sits after the heads, so every score tensor is
/// [B, Hkv, g (or 1 for a group unit), T, S].
struct Prepared {
    int64_t B = 0, Hq = 0, Hkv = 0, g = 0, T = 0, S = 0, D = 0;
    int64_t Dv = 0;    ///< V's head dimension (D but for MLA; 0 without V)
    at::Tensor qg;     ///< [B, Hkv, g, T, D]
    at::Tensor k;      ///< [B, Hkv, S, D], zero where no step may read it
    at::Tensor v;      ///< [B, Hkv, S, Dv], zero where no step may read it (undefined if not given)
    at::Tensor valid;  ///< [B, T, S] bool, the model's window and chunk applied
    at::Tensor nValid; ///< [B, T] int64
    double scale = 0;  ///< logit scale
    bool defaultScale = true;
    double softcap = 0; ///< logit soft-cap (0: none)
    /// Each query head's sink logit, [1, Hkv, g, 1, 1] in the compute dtype; undefined: none.
    at::Tensor sinks;

    at::Tensor validU() const { return valid.view({B, 1, 1, T, S}); }
    at::Tensor invalid; ///< [B, T, S] bool, ¬valid (made once: every logit masks with it)
    at::Tensor invalidU() const { return invalid.view({B, 1, 1, T, S}); }
    /// [B, Hkv, g or 1, T, …] → [B, Hq, T, …] (a unit's value repeated over its heads).
    at::Tensor heads(const at::Tensor& x) const;
    /// The options of the compute dtype.
    at::TensorOptions options() const { return qg.options(); }
};

/// q [B, Hq, T, D], K, V [B, Hkv, S, D], valid [B, T, S] (or [B, S], [S], undefined: all).
Prepared prepare(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                 const at::Tensor& valid, const AttentionConfig& config, bool validate);

/// Attention probabilities of per-head logits z [B, Hkv, g, T, X]: the softmax over the last
/// axis with each head's sink (softmaxWithSink); without sinks softmax(z). Every method's
/// probabilities, exact or approximate, go through it.
at::Tensor probabilities(const Prepared& p, const at::Tensor& z);
/// The sink's share beside the probabilities `probs` of probabilities(p, z): 1 − Σ probs
/// [B, Hkv, g, T]; undefined without sinks (a method adds it to the mass it keeps: the sink is
/// always selected).
at::Tensor sinkShare(const Prepared& p, const at::Tensor& probs);
/// `x` plus the sink's share where the model has sinks (the mass a selection keeps).
at::Tensor withSink(const Prepared& p, const at::Tensor& x, const at::Tensor& probs);

/// Soft-capping (CONTRACTS.md §7): c·tanh(z/c); unchanged when c = 0.
at::Tensor softcapped(const at::Tensor& z, double cap);
/// Raw dot products q·K_j turned into logits: scaled and soft-capped (the one home of the
/// model's logit formula), any shape.
at::Tensor scaledLogits(const Prepared& p, const at::Tensor& dots);
/// scaledLogits of [B, Hkv, g, T, S] products, −inf at invalid positions.
at::Tensor toLogits(const Prepared& p, const at::Tensor& dots);
/// Exact logits z (SPARQ.md §1). [B, Hkv, g, T, S]
at::Tensor exactLogits(const Prepared& p);
/// Approximate logits from approximate dot products (before any scale): divided by τ
/// ([B, Hkv, g, T] or a number), the model's scale and soft-cap applied, −inf at invalid.
at::Tensor approxLogits(const Prepared& p, const at::Tensor& raw, const at::Tensor& tau);
/// The same for products already divided by the temperature (Loki, Double Sparsity: sqrt(D)).
at::Tensor approxLogits(const Prepared& p, const at::Tensor& rawOverTau);
/// The same on a temporary, changed in place.
at::Tensor approxLogits(const Prepared& p, at::Tensor&& rawOverTau);
/// Softmax restricted to `sel` (renormalised), then the weighted sum of V (§2.4). [B,Hkv,g,T,D]
at::Tensor attendOver(const Prepared& p, const at::Tensor& z, const at::Tensor& sel);
/// §2.5: mean of V over each step's valid positions. [B, Hkv, T, D]
at::Tensor meanValue(const Prepared& p);
/// §2.6: ranking score per selection unit, [B, Hkv, 1 or g, T, S].
at::Tensor groupRankScore(const at::Tensor& z, const at::Tensor& probs, GroupSelect gs);
/// §2.2 on every step's valid row: [B, T, S].
at::Tensor recentIndex(const Prepared& p);
/// The `n` most recent valid positions of each step ([B, T] counts): [B, 1, 1, T, S].
at::Tensor mostRecent(const Prepared& p, const at::Tensor& n);
/// §2.7: k_eff = min(k, n_valid), the l_eff = min(l, k_eff) most recent valid positions
/// forced, the rest ranked by G. Selection expanded to [B, Hkv, g, T, S].
Selection selectPositions(const Prepared& p, const at::Tensor& G, int64_t k, int64_t l,
                          bool margins = true);
/// Expands a unit selection ([B, Hkv, 1 or g, T, …]) to every head.
Selection expandUnits(const Prepared& p, Selection s);
/// The outputs every position-selecting method shares (§1.3): y over `sel` (exact,
/// renormalised), indices of width min(width, S), count, mass, margins.
void fillSelection(const Prepared& p, const at::Tensor& z, const Selection& s, int64_t width,
                   const AttendOptions& o, AttentionResult& out);
/// Exact attention over a selection, the last step of every position-selecting method: y
/// renormalised over `s` (Eq. 8), α = 1, v̄, the selection's own outputs (fillSelection at
/// `width`) and, with keepScores, the exact scores.
AttentionResult attendSelection(const Prepared& p, const at::Tensor& z, const Selection& s,
                                int64_t width, const AttendOptions& o);
/// With keepScores: the exact logits and probabilities.
void keepExact(const Prepared& p, const at::Tensor& z, const AttendOptions& o,
               AttentionResult& out);
/// §2.3 applied to the score-then-select template of METHODS.md §2.1: ŝ = softmax(ẑ), G from
/// (ẑ, ŝ), selection (§2.7), exact attention over it. Fills `out` (y, selection, ẑ).
void scoreSelectAttend(const Prepared& p, const at::Tensor& zHat, const AttentionConfig& c,
                       const AttendOptions& o, AttentionResult& out);
/// Whether n ≥ 1 etc.: fails with "k must be at least 1, got …" and the like.
void checkBudget(int64_t k, int64_t l);

// What one method unit offers others (the units of attention/methods/).
/// Loki's basis of the configuration's layer, [Hkv, D, D] float32, checked (METHODS.md §1.4).
at::Tensor lokiLayerBasis(const AttentionConfig& c, int64_t Hkv, int64_t D);
/// Double Sparsity's first r channels of the configuration's layer, [Hq, r] int64, checked.
at::Tensor dsLayerChannels(const AttentionConfig& c, int64_t Hq, int64_t D);

/// SparQ's step 1 (SPARQ.md §3.1–3.3): approximate logits ẑ [B, Hkv, g, T, S], τ
/// [B, Hkv, g, T] and the components [B, Hkv, g, T, r_eff] (ascending).
struct SparqStep1 {
    at::Tensor zHat, tau, components, qHat;
};
SparqStep1 sparqStep1(const Prepared& p, const AttentionConfig& c);
/// SparQ's step 3 (SPARQ.md §3.5, Eq. 10) over a selection `mask` [B, Hkv, U, T, S] with exact
/// logits z: y = α·y_topk + (1 − α)·v̄, and the outputs only SparQ has (yTopk, α, τ, the
/// components, v̄, ẑ and ŝ when kept). The caller fills the selection's own outputs.
AttentionResult sparqStep3(const Prepared& p, const AttentionConfig& c, const SparqStep1& s1,
                           const at::Tensor& sHat, const at::Tensor& mask, const at::Tensor& z,
                           const AttendOptions& o);

} // namespace sparqlab::attention::detail
