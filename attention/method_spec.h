#pragma once
/// \file method_spec.h
/// What a method unit registers (attention/methods/, one file or folder per method): its table
/// row (MethodInfo, named fields) and the hooks the library calls — the kernel over captured
/// q, K, V; an optional state carried between causal steps; an optional calibrator; optional
/// decode kernels. The library, the command line, the GUI and the docs find every method
/// through methodSpec()/methods(); docs/adding-a-method.md walks through writing one.
///
/// Threading: specs are immutable after registration; every hook is reentrant.

#include "attention/attention.h"

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace sparqlab::attention {

namespace detail {
struct Prepared;
} // namespace detail

struct DecodeKernel; // decode/kernel.h

/// The shape a configuration is checked against (0: unknown).
struct ModelShape {
    int64_t headDim = 0, layers = 0, heads = 0, kvHeads = 0;
};

/// A method's kernel: T decode steps over one K, V (detail::Prepared), reading the extra
/// inputs of `in` it needs (H2O's acc, SnapKV's qWin, …).
using RunFn = AttentionResult (*)(const detail::Prepared& p, const AttentionInputs& in,
                                  const AttentionConfig& c, const AttendOptions& o);

/// Fits the parameters a user left at their defaults (sized for long contexts and large models)
/// to a length S and a model; one line per change, for people ("rank 160 → 40 (…)").
using FitFn = std::vector<std::string> (*)(AttentionConfig& c, int64_t S, const ModelShape& shape);

/// Checks a user's parameters beyond the parameter table's ranges (SnapKV: k ≥ window);
/// throws AttentionError with one line naming the option.
using ValidateFn = void (*)(const AttentionConfig& c, const ModelShape& shape);

// --- causal steps (attention/causal.h drives them) --------------------------------------------

/// What a stateful method keeps between causal steps of one sequence and layer (H2O's
/// accumulated attention, TOVA's cache, SnapKV's window and compressed prompt): the unit's own
/// subclass.
struct MethodState {
    virtual ~MethodState() = default;
    /// A deep copy: a snapshot to restart from (one prefill, several methods after it).
    virtual std::shared_ptr<MethodState> clone() const = 0;
    /// What it holds, by name (H2O's "acc"; TOVA's "alive"), for views and tests.
    virtual std::map<std::string, at::Tensor> tensors() const = 0;
};

/// A run of n consecutive causal queries at positions pos0 … pos0 + n − 1.
struct CausalChunk {
    at::Tensor q;     ///< [B, Hq, n, D]
    at::Tensor k, v;  ///< [B, Hkv, S, D], S > pos0 + n − 1
    int64_t pos0 = 0; ///< the first query's position
    at::Tensor valid; ///< [B, n, S] bool: the keys each query sees (j ≤ its position)
    /// false: the queries are history only (the method's state learns from them, nothing is
    /// returned); true: each is a decode step with a result.
    bool steps = true;
    /// Dense attention of these queries with keepScores (logits, probs), when the caller has it
    /// (attend compares every method with it); null otherwise.
    const AttentionResult* dense = nullptr;
    /// Whether the step's diagnostics (indices, selected, counts) are wanted.
    bool diagnostics = true;
    /// The sequence's named inputs (CausalInputs::extra), null: none.
    const std::map<std::string, at::Tensor>* extra = nullptr;
};

/// The causal behaviour of a method that needs more than one query at a time.
struct CausalHooks {
    /// Which earlier queries a step reads (checked by the driver, which names the capture).
    enum class History {
        All,    ///< every position from 0 (H2O: the accumulated attention of all of them)
        Window, ///< the window's positions before each step (SnapKV: --window)
        Run,    ///< a run of consecutive positions up to the last (TOVA's cache evicts per step)
    };
    History history = History::All;
    /// The queries the `attend` command reports: every captured one, or the last one only
    /// (SnapKV compresses once, at the decode step).
    bool lastStepOnly = false;
    /// The parameters the state after a run of queries depends on (TOVA: k; SnapKV: the
    /// window; H2O: none), so that a caller may keep it for other values of the rest.
    std::vector<Param> stateParams{};
    /// One chunk: the result of its steps (chunk.steps) and the state after it. `state` is null
    /// before the first chunk of a sequence; the hook makes its own.
    AttentionResult (*run)(const CausalChunk& chunk, const AttentionConfig& c,
                           std::shared_ptr<MethodState>& state, const AttendOptions& o) = nullptr;
    /// Dense steps that come before this method (a dense prefill, then decoding with it): what
    /// they keep for it; `probs` [B, Hq, n, S] are their attention, `c` the method's config.
    /// Optional.
    void (*observeDense)(const CausalChunk& chunk, const at::Tensor& probs,
                         const AttentionConfig& c, std::shared_ptr<MethodState>& state) = nullptr;
};

// --- calibration ------------------------------------------------------------------------------

/// One tensor of a calibration file: its name, element type and shape, per dimension one of
/// 'L' (layers), 'H' (query heads), 'K' (KV heads), 'D' (head_dim) or 'c' (1 … head_dim).
struct CalibrationDataset {
    const char* name = "";
    const char* shape = "";
    bool indices = false; ///< int64 channel indices in [0, head_dim) (else finite float32)
};

/// Options of a calibration run (`calibrate --mode`, `--uncentered`).
struct CalibrationOptions {
    ChannelMode mode = ChannelMode::QK; ///< Double Sparsity's channel score
    bool center = true;                 ///< Loki: PCA of centred keys
};

/// A method that is calibrated on a model's queries and keys (Loki's basis, Double
/// Sparsity's channels) before it runs: what it makes per layer, stores in the calibration file
/// (CONTRACTS.md §6) and checks against a model.
struct CalibratorSpec {
    const char* option = ""; ///< the ATTN option naming the file, e.g. "basis"
    /// Every tensor of the calibration file; the first is the one the method reads.
    std::vector<CalibrationDataset> datasets{};
    /// Whether each calibration key is paired with its query (a capture made with
    /// --all-queries); otherwise the keys alone.
    bool needsQueries = false;
    /// Whether the calibration takes --mode (qk, q, k: Double Sparsity's channel score).
    bool takesMode = false;
    /// One layer: queries [Hq, N, D] (undefined without needsQueries) and keys [Hkv, N, D] of
    /// the same N tokens; returns the layer's tensors, in `datasets`' order.
    std::vector<at::Tensor> (*layer)(const at::Tensor& q, const at::Tensor& k,
                                     const CalibrationOptions& o) = nullptr;
    /// Checks a calibration's first tensor against the configuration and model beyond the
    /// file's own shape (r against the channels ranked); `where` starts each message.
    void (*check)(const Calibration& cal, const AttentionConfig& c, const ModelShape& shape,
                  const std::string& where) = nullptr;
    const char* dataset() const { return datasets.front().name; }
};

// --- the lab's first step ---------------------------------------------------------------------

/// What the lab's head view shows as Step 1 for a method: what it ranks positions by, one
/// value per bar (components, pages) or a cumulative curve over ranks, the ones it uses marked.
struct StepOneView {
    std::string caption;        ///< what it shows, for people (HTML allowed)
    std::string xLabel, yLabel; ///< the axes
    std::vector<double> values; ///< one per bar or point
    std::vector<uint8_t> used;  ///< 1 where the method uses it (same length)
    double x0 = 0, dx = 1;      ///< value i drawn at x0 + i·dx, dx wide
    bool curve = false;         ///< a curve (cumulative mass over ranks) instead of bars
    double cut = -1;            ///< a horizontal line at this value (top-p: p); < 0: none
};

/// Step 1 as one score per position: values[j] = scores[j] (0 where it is not finite: a
/// position the method did not rank), used[j] = selected[j] where the score is finite.
void setPositionScores(StepOneView& v, const at::Tensor& scores, const at::Tensor& selected);

/// One head of one decode step, as the lab's head view computed it.
struct StepOneInputs {
    at::Tensor q;                            ///< [D] the head's query
    at::Tensor exact;                        ///< [S] the exact attention of the step
    const AttentionResult* result = nullptr; ///< the method's result of the step ([1, Hq, …])
    const AttentionConfig* config = nullptr; ///< the layer's configuration (calibration too)
    int64_t head = 0, heads = 1, kvHeads = 1;
};

// --- what a method reads and reports beyond q, K, V ------------------------------------------

/// A named input a method reads beyond q, K, V (AttentionInputs::extra).
struct MethodInput {
    const char* name = "";  ///< e.g. "q_all"
    const char* shape = ""; ///< e.g. "[B, Hq, S, D]"
    const char* what = "";  ///< for people: what it is, and where it comes from when absent
    /// It belongs to the keys' positions (their queries, rotations or an indexer's scores of
    /// them): a method reading it cannot run over keys that are not positions (MethodInfo::
    /// positionBound).
    bool positions = false;
};

/// A method's own output (AttentionResult::extra), [B, Hq, …] per step.
struct MethodOutput {
    const char* name = ""; ///< e.g. "n_sampled"
    const char* what = ""; ///< for people, with its spec's section
    /// Its mean over the heads is TransferArgs::measured: the transfer counts what was read.
    bool transfer = false;
};

// --- the spec -----------------------------------------------------------------------------------

/// Everything a method unit registers.
struct MethodSpec {
    MethodInfo info;                            ///< the table row
    RunFn run = nullptr;                        ///< the kernel over captured q, K, V
    ValidateFn validate = nullptr;              ///< extra parameter checks (optional)
    const CausalHooks* causal = nullptr;        ///< the state between steps (stateful methods)
    const CalibratorSpec* calibrator = nullptr; ///< the calibration (calibrated methods)
    const DecodeKernel* decode = nullptr;       ///< the decode engine's kernels (optional)
    /// The local window when --local is not given (H2O: k/4; PQCache: half the budget); null:
    /// none.
    int64_t (*defaultLocal)(const AttentionConfig& c) = nullptr;
    /// The named inputs it reads (AttentionInputs::extra) and its own outputs.
    std::vector<MethodInput> inputs{};
    std::vector<MethodOutput> outputs{};
    /// The inputs it draws for itself from its parameters (MagicPIG's hyperplanes from
    /// --hash-seed) at head dimension D, for a result file to store beside its outputs;
    /// optional.
    std::map<std::string, at::Tensor> (*ownInputs)(const AttentionConfig& c, int64_t D) = nullptr;
    /// What the lab's Step 1 shows (optional: |q| with SparQ's components otherwise).
    StepOneView (*stepOne)(const StepOneInputs& in) = nullptr;
    /// Defaults fitted to the length and model at hand (optional: they fit any).
    FitFn fit = nullptr;
};

/// The spec of `m` (every Method has one: the registry checks it on first use).
const MethodSpec& methodSpec(Method m);
/// Every registered spec, in the order of `enum class Method`.
const std::vector<const MethodSpec*>& methodSpecs();

/// The method's defaults that do not fit a length S and a model, fitted (MethodSpec::fit) where
/// the user left them unset, as the lab and `attend` both apply it; one line per change.
std::vector<std::string> fitDefaults(AttentionConfig& c, int64_t S, const ModelShape& shape);

/// The output of `s` marked `transfer` in `r` (undefined where it has none or `r` lacks it).
at::Tensor transferOutput(const MethodSpec& s, const AttentionResult& r);

} // namespace sparqlab::attention

/// Registers a unit's spec: `SPARQLAB_METHOD(sparq) { MethodSpec s; …; return s; }` at file scope
/// defines sparqlab::attention::units::sparq(), the function the generated registry
/// (attention/CMakeLists.txt, method_registry.inc) calls; the unit is named after its file or
/// folder. The body sees the names of sparqlab::attention (Method, MethodSpec, detail::…).
#define SPARQLAB_METHOD(unit)                                                                      \
    namespace sparqlab::attention::units {                                                         \
    MethodSpec unit();                                                                             \
    }                                                                                              \
    ::sparqlab::attention::MethodSpec sparqlab::attention::units::unit()
