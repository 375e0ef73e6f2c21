#pragma once
/// \file method_table.h
/// The one table of attention methods (llama.cpp's LLM_ARCH_NAMES style), built from the method
/// units of attention/methods/ (method_spec.h): per method its command-line name, label, the
/// parameters it takes, whether it keeps state across decode steps, needs calibration or the
/// queries of earlier positions, whether the fast decode engine runs it, and its transfer
/// formula (SPARQ.md §5, METHODS.md §10). The command line (parsing, usage, errors), the GUI's
/// controls, the statistics, the figures and the README table are all built from it;
/// docs/adding-a-method.md lists every place a new method touches.
///
/// Threading: the tables are immutable after first use; every function is reentrant.

#include <algorithm>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace sparqlab::attention {

/// The attention methods: SPARQ.md §3–4, METHODS.md §3–8, METHODS2.md and METHODS3.md.
enum class Method {
    Dense,
    Sparq,
    Oracle,
    FlexGen,
    LmInfinite,
    H2O,
    Quest,
    Loki,
    DoubleSparsity,
    OracleTopP,
    SparqTopP,
    SnapKV,
    Tova,
    ExpectedAttention,
    PQCache,
    MagicPIG,
    ShadowKV,
    RocketKV,
    AdaKV,
    Indexer,
    KNorm,
    ChunkKV,
};

/// How the heads of a GQA group share their selected positions (SPARQ.md §2.6; max-probs: the
/// group's largest probability, METHODS3.md §3.3 and §5.2).
enum class GroupSelect { SumProbs, SumLogits, PerHead, MaxProbs };

/// A method parameter, each with one command-line option (CONTRACTS.md §2, §6).
enum class Param {
    R,          ///< --r: SparQ's rank, Loki's and Double Sparsity's r
    K,          ///< --k: positions kept (the cap k_max for the top-p methods)
    Local,      ///< --local: the local window l
    Tau,        ///< --tau: SparQ's temperature
    Gqa,        ///< --gqa: how a KV group shares its positions
    MeanValue,  ///< --no-mean-value: SparQ without Eq. 10's reallocation
    Components, ///< --components: SparQ's r components per GQA group or per head
    Reallocate, ///< --reallocate: FlexGen with Eq. 6's mean-value term
    PageSize,   ///< --page-size: Quest's page
    P,          ///< --p: the top-p budget's mass
    Window,     ///< --window: SnapKV's observation window
    Kernel,     ///< --kernel: SnapKV's pooling kernel
    Pooling,    ///< --pooling: SnapKV's pooling
    Basis,      ///< --basis: Loki's calibration file
    Channels,   ///< --channels: Double Sparsity's calibration file
    Sink,  ///< --sink: sink tokens always kept (LM-Infinite, Expected Attention, PQCache, MagicPIG)
    Ratio, ///< --ratio: Expected Attention's compression ratio (instead of --k)
    NFuture,       ///< --n-future: Expected Attention's future positions
    NoCovariance,  ///< --no-covariance: Expected Attention without the covariance term
    NoVnorm,       ///< --no-vnorm: Expected Attention without the value norms
    Epsilon,       ///< --epsilon: Expected Attention's offset before the value norm
    PqSubspaces,   ///< --pq-subspaces: PQCache's m
    PqBits,        ///< --pq-bits: PQCache's b (2^b centroids)
    PqIters,       ///< --pq-iters: PQCache's k-means iterations
    HashBits,      ///< --hash-bits: MagicPIG's K
    HashTables,    ///< --hash-tables: MagicPIG's L
    HashSeed,      ///< --hash-seed: MagicPIG's hyperplanes, drawn from this seed
    Budget,        ///< --budget: ShadowKV's positions in selected chunks
    ChunkSize,     ///< --chunk-size: ShadowKV's and RocketKV's chunk
    Rank,          ///< --rank: ShadowKV's SVD rank
    LocalChunks,   ///< --local-chunks: ShadowKV's local chunks
    OutlierChunks, ///< --outlier-chunks: ShadowKV's outlier chunks
    ShadowKeys,    ///< --shadowkv-keys: ShadowKV's SVD of post- or pre-RoPE keys
    PromptBudget,  ///< --prompt-budget: RocketKV's stage-1 budget k₁
    TokenBudget,   ///< --token-budget: RocketKV's one budget its four parameters derive from
    Alpha,         ///< --floor-alpha: AdaKV's safeguard share of the budget
    Normalize,     ///< --normalize: AdaKV's normalised scores
    IndexDim,      ///< --index-dim: the indexer's key dimension Di (its reads per position)
};

/// How a parameter is given.
enum class ParamKind { Integer, Number, Choice, Flag, File };

struct AttentionConfig;

/// One parameter, a row of the parameter table (method_table.cpp, named fields): its option, its
/// attribute in result files, its label and range for the GUI, its help line, its default and
/// where its value lives in AttentionConfig. Every list of parameters (the command lines, the
/// lab's controls, sessions, result files, `eval`'s grids, the bench) is built from the rows.
struct ParamInfo {
    Param id{};
    ParamKind kind = ParamKind::Integer;
    const char* option = nullptr;    ///< command-line option without dashes, e.g. "page-size"
    const char* attribute = nullptr; ///< result-file attribute, e.g. "page_size"
    std::string valueName;           ///< placeholder in the usage line, e.g. "P" (a Choice: its
                                     ///< choices, "max|avg")
    const char* label = nullptr;     ///< GUI label
    const char* help = nullptr;      ///< one line
    /// The table's default (Integer, Number; a Choice's index, a Flag's 0 or 1); a parameter held
    /// in a field of AttentionConfig has that field's initial value (one home for it).
    double defaultValue = 0;
    double min = 0, max = 0; ///< the range a user may give (max: 0 = no upper bound)
    bool openMin = false;    ///< the range excludes min: (min, max]
    bool openMax = false;    ///< the range excludes max: [min, max)
    bool odd = false;        ///< odd whole numbers only (SnapKV's pooling kernel)
    /// A value above this parameter's is taken as that value by every method (the local window:
    /// l above k is k), and the lab's control stops there. Unset: no such bound.
    std::optional<Param> clampedTo{};
    std::vector<std::string> choices; ///< for Choice (the first is the default)
    /// A number of positions (k, a budget): eval's default grid scales it with the context.
    bool positions = false;
    /// Where the value lives: a field of AttentionConfig read and written as a number (a
    /// Choice's index, a Flag's 0 or 1). Null: AttentionConfig::values holds it, so that a new
    /// method's parameter is one row here and nothing else.
    double (*get)(const AttentionConfig&) = nullptr;
    void (*set)(AttentionConfig&, double) = nullptr;
    /// Its own text, where the kind's does not say it (k "none", τ's number, the calibration's
    /// file); null: by kind from the number.
    std::string (*text)(const AttentionConfig&) = nullptr;
    /// Its own parser, where the kind's does not read it; null: by kind, checked against the range.
    void (*parse)(AttentionConfig&, const std::string&) = nullptr;
    /// Held in AttentionConfig::values rather than a field of its own.
    bool generic() const { return get == nullptr && kind != ParamKind::File; }
};

/// Transfer-formula arguments (METHODS.md §10): S, d = D, k, r, P and the top-p count n.
/// Every element of a key counts d, every element of a value dv (MLA: d_v ≠ d_qk; 0: d), and
/// the paper's 2·d (writing the new k and v) is d + dv (docs/sinks-chunks-nope-mla.md).
struct TransferArgs {
    int64_t S = 0, d = 0, k = 0, r = 0, pageSize = 16;
    double n = -1;  ///< top-p methods: the (mean) count; < 0: k
    int64_t dv = 0; ///< values' dimension (0: d)
    /// A count the step measured that the formula reads (the method output marked `transfer`:
    /// MagicPIG's index entries read); < 0: the formula's expectation.
    double measured = -1;
    /// The configuration, for the parameters a method's formula reads beyond k, r and P
    /// (METHODS2.md §7, METHODS3.md §6); null: the table's defaults.
    const AttentionConfig* config = nullptr;
    /// The design notes' literal counts (SPARQ.md §9.12): a k beyond S is counted as given. The
    /// application's counts (`transferArgs`) move only the positions there are.
    bool literal = false;
    /// Parameter p of `config` (its default without one).
    double param(Param p) const;
    /// k positions of the S there are: k itself where the count is literal.
    int64_t positions(int64_t kGiven) const { return literal ? kGiven : std::min(kGiven, S); }
    /// Each key is its own value (DeepSeek-V4's entries and window, docs/design/METHODS.md
    /// §10): a value is read with its key, so a key and its value count d, not d + dv.
    bool keyIsValue = false;
    double v() const { return static_cast<double>(dv > 0 ? dv : d); }
    /// A value read beside its key: v(), or nothing where the key is the value.
    double valueWithKey() const { return keyIsValue ? 0.0 : v(); }
    double kv() const { return static_cast<double>(d) + valueWithKey(); } ///< a key and its value
};

/// The arguments of `config`'s parameters at a step over S positions of dimension d; `count`
/// is what a top-p method attended (< 0: k).
TransferArgs transferArgs(const AttentionConfig& config, int64_t S, int64_t d, double count = -1,
                          int64_t dv = 0);
/// The same, counted as the design notes' formulas are (literal: nothing clamped to S).
TransferArgs literalTransferArgs(const AttentionConfig& config, int64_t S, int64_t d);

/// One method of the table: a method unit's row (attention/methods/, method_spec.h). The unit
/// sets the named fields; the registry fills the flags that follow from its hooks.
struct MethodInfo {
    Method id = Method::Dense;
    const char* name = nullptr;         ///< the --method name
    std::vector<std::string> aliases{}; ///< other names --method accepts (e.g. "lm-infinite")
    const char* label = nullptr;        ///< shown in the GUI and the figures
    const char* summary = nullptr;      ///< one line: what it does and where it comes from
    const char* spec = nullptr;         ///< the section that defines it, e.g. "SPARQ.md §3"
    std::vector<Param> params{};
    bool selects = true; ///< attends to a subset of positions (false: dense)
    /// The --gqa rules it takes, the first its default (empty: SPARQ.md §2.6's sum-probs,
    /// sum-logits and per-head, sum-probs by default).
    std::vector<GroupSelect> gqaRules{};
    /// Its own defaults of parameters it shares with other methods (--kernel 63 for RocketKV
    /// where SnapKV's is 5), as the command line would give them; applyDefaults() sets them.
    std::vector<std::pair<Param, const char*>> defaults{};
    /// Pairs (a, b): its parameter a may not exceed its parameter b (SnapKV keeps the window
    /// within k: {Param::Window, Param::K}). The checks refuse more and the lab's control of a
    /// stops at b's value.
    std::vector<std::pair<Param, Param>> atMost{};
    /// The positions attended vary per head and step (a top-p budget): the transfer formula's
    /// n is the count measured, not k.
    bool budgetVaries = false;
    /// Scalar elements read per head per decode step, a literal formula (no clamping).
    double (*transfer)(const TransferArgs&) = nullptr;
    const char* transferFormula = nullptr; ///< the formula as text
    /// `eval`'s default grid: "param=v1,v2 …" per parameter the grid varies (values of k at
    /// a 2,048-token context, scaled down for shorter ones), "local=k/4" for a window of k/4.
    const char* evalGrid = "";
    // Filled by the registry from the unit's hooks:
    bool stateful = false;     ///< keeps state across decode steps of one sequence
    bool calibrated = false;   ///< needs a calibration file (or calibrates on the prompt)
    bool needsHistory = false; ///< needs the queries of earlier positions (--all-queries)
    bool fastDecode = false;   ///< the decode engine (decode/engine.h) runs it
    /// Needs the keys to be positions: it keeps state from step to step or reads an input of
    /// the positions' own (MethodInput::positions). Such a method cannot choose among
    /// DeepSeek-V4's compressed entries (docs/learned-sparse-and-hybrid.md §17).
    bool positionBound = false;
};

/// Why method `m` cannot choose among keys that are not positions, such as DeepSeek-V4's
/// compressed entries beside its window (MethodInfo::positionBound): one line naming it and what
/// it needs; empty where it can.
std::string positionFreeProblem(Method m);

/// Transfer formulas several methods share (SPARQ.md §5, METHODS.md §10), literal.
namespace transfer {
double ceilDiv(int64_t a, int64_t b);
double count(const TransferArgs& a);      ///< the top-p count n (k when none was measured)
double dense(const TransferArgs& a);      ///< 2·S·d + 2·d
double exactThenK(const TransferArgs& a); ///< S·d + k·d + 2·d: exact scores, then k rows of V
double kept(const TransferArgs& a);       ///< 2·k·d + 2·d: k positions kept
double lowRank(const TransferArgs& a);    ///< S·r + 2·k·d + 2·d: r-dimensional scores
} // namespace transfer

/// Every method, in the order the command line and the GUI list them.
const std::vector<MethodInfo>& methods();
/// The entry of `m`.
const MethodInfo& methodInfo(Method m);
/// The entry named `name` (or an alias such as "lm-infinite"); nullptr if none.
const MethodInfo* findMethod(const std::string& name);
/// Every parameter, in the order the usage line lists them.
const std::vector<ParamInfo>& parameters();
const ParamInfo& paramInfo(Param p);
/// Whether method `m` takes parameter `p`.
bool takes(Method m, Param p);
/// The line for an option given that none of `methods` takes: "--sink does not apply to sparq
/// (it takes --r --k …); ignored" (the command line's and the lab's notes, without "note: ").
std::string notTakenNote(Param p, const std::vector<Method>& methods);
/// Whether `x` is a value the row allows (finite, in its range, odd where it must be).
bool allows(const ParamInfo& info, double x);
/// "must lie in [1, 4096]", "must be odd and at least 1": the row's range, for messages.
std::string rangeText(const ParamInfo& info);
/// The rules of the table for `c`'s method, one line naming the option when broken: each
/// parameter it takes within its row's range (allows), and its pairs of MethodInfo::atMost.
/// Every path that runs a method checks them (attend, the decode engine, validateFor).
void checkParamRules(const AttentionConfig& c);

/// Sets the method's own defaults in `c` (its first GQA rule, MethodInfo::defaults): what
/// choosing `c.method` means before any option is given (the command line, the lab, eval).
void applyDefaults(AttentionConfig& c);
/// A configuration of `m` with its defaults.
AttentionConfig defaultConfig(Method m);
/// The --gqa rules `m` takes, its default first.
std::vector<GroupSelect> gqaRules(Method m);

/// "dense, sparq, …": the names, for messages.
std::string methodNames(const std::string& separator = ", ");
/// "loki, double-sparsity": the methods with a calibration, for messages.
std::string calibratedMethodNames();
/// "[--method dense|sparq|…] [--r R] …": the ATTN options of the usage lines.
/// `except`: the options a command takes otherwise (stats' --methods for --method), left out.
std::string attnUsage(const std::set<std::string>& except = {});
/// The method table as Markdown (the README's table; `sparqlab-cli methods --markdown`).
std::string methodsMarkdown();

/// Elements moved by `m` per head per decode step (SPARQ.md §5, METHODS.md §10).
double transferElements(Method m, const TransferArgs& a);
/// transferElements(m) / transferElements(Dense).
double transferRatio(Method m, const TransferArgs& a);
/// Whether `config`'s budget k reaches every one of S positions (k ≥ S, a method that takes
/// k): it attends them all, as dense does, while its transfer formula, not clamped (SPARQ.md
/// §5), may count more than dense's (SparQ's step 1; k itself is taken at most S).
bool budgetCoversLength(const AttentionConfig& config, int64_t S);

} // namespace sparqlab::attention
