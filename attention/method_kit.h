#pragma once
/// \file method_kit.h
/// Internals shared by the method units (attention/methods/): the prepared inputs of T decode
/// steps that share K and V, and the common steps of SPARQ.md §2 written once (method_kit.cpp).
/// Not part of the library's interface.

#include "attention/attention.h"
#include "attention/method_spec.h"
#include "attention/select.h"

#include <ATen/core/Tensor.h>

#include <algorithm>
#include <functional>
#include <limits>
#include <map>
#include <string>

namespace sparqlab::attention {
class DecodeCache; // decode/engine.h
} // namespace sparqlab::attention

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
/// The GQA rule among those the method takes (its table row), or one line naming them.
void checkGroupRule(const AttentionConfig& c);

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

/// Step 1 as one score per position against the positions (setPositionScores), the kept ones in
/// orange: what KNorm, the indexer, Expected Attention and ChunkKV draw. `scores` and `selected`:
/// the head's [S] row (undefined: nothing drawn).
StepOneView positionScoresView(std::string caption, std::string yLabel, const at::Tensor& scores,
                               const at::Tensor& selected);

/// Steps computed at once where one step's largest intermediate holds `elementsPerStep` elements
/// (the window's attention B·Hq·w·S, Quest's page bounds B·Hkv·S·D): a chunk stays under 2^24
/// elements, one step at least.
inline int64_t stepsPerChunk(int64_t elementsPerStep) {
    constexpr int64_t kChunkElements = int64_t{1} << 24;
    return std::max<int64_t>(1, kChunkElements / std::max<int64_t>(1, elementsPerStep));
}

/// The observation window's votes (METHODS.md §7.1–7.2) for the steps [t0, t0 + n): each head's
/// attention of the window queries summed over the slots left to right, over the prefix.
struct WindowVotes {
    at::Tensor votes;          ///< [B, Hkv, g, n, S], 0 outside the prefix
    at::Tensor valid, nValid;  ///< [B, n, S], [B, n]
    at::Tensor window, prefix; ///< [B, n, S]: the last w valid positions, the ones before
};
/// The window queries [B, Hq, T, w, D] are there and of that shape, or one line naming `method`.
void checkWindowQueries(const Prepared& p, const at::Tensor& qWin, int64_t w, const char* method);
WindowVotes windowVotes(const Prepared& p, const at::Tensor& qWinAll, int64_t w, int64_t t0,
                        int64_t n, bool validate);
/// §7.2's pooling of unit scores [B, Hkv, U, n, S] over each step's prefix in forward order
/// (kernel/2 each side; avg sums the taps left to right); 0 outside the prefix.
at::Tensor poolPrefix(const at::Tensor& unit, const WindowVotes& wv, int64_t kernel,
                      Pooling pooling);
/// SnapKV's kept set (METHODS.md §7.2) for the steps [t0, t0 + n) with budgets k [B, n]: the
/// selection [B, Hkv, U, n, S] (U = g per head, else 1: the group's votes summed), its
/// margins, and the votes and pooled votes (0 outside the prefix and in rows kept whole).
/// SnapKV's kernel and RocketKV's first stage.
struct WindowKeep {
    Selection sel;
    at::Tensor votes, pooled;
};
WindowKeep windowKeep(const Prepared& p, const at::Tensor& qWinAll, const at::Tensor& k, int64_t w,
                      int64_t kernel, Pooling pooling, bool perHead, int64_t t0, int64_t n,
                      bool validate);

// --- the methods that work one step of one row at a time (rows.cpp) ---------------------------

/// num / den for den ≥ 0, with den floored at the smallest normal number of its type (1e-300 in
/// the float64 references): 0 / 0 is 0, not NaN, in float32 too (METHODS2.md §4.2's k-means
/// gaps, §5.3's hash margins).
at::Tensor ratioOrZero(const at::Tensor& num, const at::Tensor& den);

/// A sum along `dim` strictly left to right (METHODS3.md §1.4: exactly tied inputs give
/// bitwise-equal sums, so the lower-index rule, not rounding, decides ties).
at::Tensor seqSum(const at::Tensor& x, int64_t dim);

/// One decode step of one batch row, for the methods whose index structures differ from row
/// to row (METHODS2.md, METHODS3.md).
struct StepRow {
    int64_t b = 0, t = 0;
    at::Tensor q;     ///< [Hkv, g, D]
    at::Tensor k, v;  ///< [Hkv, S, D] (zero where invalid)
    at::Tensor valid; ///< [S] bool
    at::Tensor pos;   ///< [n_valid] int64, ascending: the valid positions (the last: the step's)
    at::Tensor fidx;  ///< [S] forward index (−1 where invalid)
    at::Tensor cidx;  ///< [S] causal index (−1 where invalid)
    int64_t nValid = 0;
};

/// What a row-wise method gives for one row.
struct RowResult {
    at::Tensor sel;               ///< [Hkv, g or 1, S] bool: the positions attended
    at::Tensor margin, marginRel; ///< [Hkv, g or 1] (undefined: +inf)
    at::Tensor logits; ///< [Hkv, g, S] the logits it attends with (undefined: the exact ones)
    /// Its own outputs, [Hq, …] each (AttentionResult::extra); index lists −1 padded.
    std::map<std::string, at::Tensor> extra;
};

/// Runs `fn` on every (batch row, step) of `p` and assembles the result: y over each row's set
/// with its logits (renormalised, the model's sinks kept), α = 1, and with diagnostics the set's
/// indices (width min(width, S)), count, exact mass, margins and the extras stacked to
/// [B, Hq, T, …] (a shorter last axis padded with −1 for integers, `floatFill` otherwise).
AttentionResult runRows(const Prepared& p, int64_t width, const AttendOptions& o,
                        const std::function<RowResult(const StepRow&)>& fn, double floatFill = 0.0);

// --- RoPE (Hugging Face's rotate-half layout) ------------------------------------------------

/// cos and sin of positions × invFreq, [..., D] in the rotate-half layout (each half the same),
/// float64: positions [...] int64, invFreq [D/2].
std::pair<at::Tensor, at::Tensor> ropeTables(const at::Tensor& positions,
                                             const at::Tensor& invFreq);
/// x·cos + rotate_half(x)·sin, rotate_half(x) = (−x[D/2:], x[:D/2]); with −sin the inverse.
at::Tensor ropeApply(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin);
/// The default inverse frequencies 1/θ^(2i/D), θ = 10000, in float32 as Hugging Face computes
/// them, returned as float64 (METHODS2.md §3.2).
at::Tensor defaultInvFreq(int64_t D);

// --- the methods that compress the prompt once (prompt_compression.cpp) ----------------------

/// How a method that compresses the prompt once, at its first decode step, runs causally
/// (SnapKV, Expected Attention, AdaKV, RocketKV's first stage): a chunk of queries is a run of
/// decode steps, each the first after its prefix, with the queries before it (the window's
/// w − 1, or every one); the last step's set is kept, and a later one-query step attends to it
/// and to every position after it (`later`, null: exactly over those).
struct CompressOnce {
    /// Every earlier query (Expected Attention: "q_all") rather than the window's (qWin).
    bool allQueries = false;
    /// The output that holds the kept prompt as indices (RocketKV's "kept": its first stage's
    /// set); null: the set the step attended.
    const char* keptOutput = nullptr;
    /// A later one-query step over the kept set `kept` [B, Hq, S] (later positions included);
    /// null: exact attention over it.
    AttentionResult (*later)(const CausalChunk& ck, const AttentionConfig& c,
                             const at::Tensor& kept, const AttendOptions& o) = nullptr;
};
AttentionResult compressOnceRun(const CompressOnce& how, const CausalChunk& ck,
                                const AttentionConfig& c, std::shared_ptr<MethodState>& state,
                                const AttendOptions& o);
void compressOnceObserve(const CompressOnce& how, const CausalChunk& ck, const AttentionConfig& c,
                         std::shared_ptr<MethodState>& state);
/// The causal hooks of a method that compresses the prompt once as `How` says, written once: a
/// step reads the window's earlier queries (every one with allQueries), `attend` reports the last
/// step, and dense steps before the method keep what it will read when it takes over. A unit's
/// spec: `.causal = &compressOnceHooks<kFooCompress>`.
template <const CompressOnce& How>
inline const CausalHooks compressOnceHooks{
    .history = How.allQueries ? CausalHooks::History::All : CausalHooks::History::Window,
    .lastStepOnly = true,
    .stateParams = How.allQueries ? std::vector<Param>{} : std::vector<Param>{Param::Window},
    .run = [](const CausalChunk& ck, const AttentionConfig& c, std::shared_ptr<MethodState>& state,
              const AttendOptions& o) { return compressOnceRun(How, ck, c, state, o); },
    .observeDense =
        [](const CausalChunk& ck, const at::Tensor&, const AttentionConfig& c,
           std::shared_ptr<MethodState>& state) { compressOnceObserve(How, ck, c, state); }};
/// Exact attention of a one-query step over the set `kept` [B, Hq, S] with the model's
/// modifiers (sinks, softcap); `z`: the step's causal logits [B, Hq, 1, S] where the caller has
/// them (undefined: computed here).
AttentionResult attendKept(const CausalChunk& ck, const AttentionConfig& c, const at::Tensor& kept,
                           const AttendOptions& o, at::Tensor z = {});

// --- the decode engine on a GPU without CUDA kernels (decode/torch.cpp) ----------------------

} // namespace sparqlab::attention::detail
