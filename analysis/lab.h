#pragma once
/// \file lab.h
/// What the lab window shows, computed from one captured prompt: for a chosen layer, head
/// and attention configuration, what the method does for the decode-step query (SparQ's three
/// steps, any other method's chosen set, transfer and error), and layer × head overviews of
/// any per-head measure. libtorch only (no Qt); cheap enough for a worker to run on each
/// control change.

#include "attention/attention.h"
#include "attention/causal.h"
#include "attention/method_spec.h"
#include "capture/capture_file.h"

#include <ATen/core/Tensor.h>

#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace sparqlab::analysis {

/// One captured prompt: per layer every position's K and V, the queries of the last T
/// positions (all of them when memory allows: SnapKV's window, TOVA's steps and H2O's
/// accumulated attention read them), and how the model computes each layer's attention.
struct LabCapture {
    std::vector<at::Tensor> q;      ///< per layer [Hq, D] float32: the decode-step query
    std::vector<at::Tensor> qSteps; ///< per layer [Hq, T, D]: the last T positions' queries
    std::vector<at::Tensor> k;      ///< per layer [Hkv, S, D] float32
    std::vector<at::Tensor> v;      ///< per layer [Hkv, S, D] float32
    /// The model's indexer scores of the held queries, per layer: a DSA model's [T, S] (NaN
    /// after each query's position), a block indexer's [Hi, T, blocks] (MiniMax-M3); empty: a
    /// model without one (docs/learned-sparse-and-hybrid.md).
    std::vector<at::Tensor> indexScores;
    /// DeepSeek-V4 (capture format 6): each layer's compressed entries [C_l, D] and its indexer's
    /// scores of the held queries [T, C_l] (NaN: not seen; docs/learned-sparse-and-hybrid.md
    /// §17); empty: a model without them. On a compressed layer the views score the decode-step
    /// query against the entries and the window's positions (compressedLayer()).
    std::vector<at::Tensor> entries, entryScores;
    /// Whether layer `layer` attends compressed entries beside its window (a DeepSeek-V4 layer
    /// whose rate is not 0): its keys are then the entries, then every position
    /// (LayerCache::keys).
    bool compressedLayer(int64_t layer) const {
        return static_cast<size_t>(layer) < entries.size() && info.compressRate(layer) > 0;
    }
    /// Layer `layer` as a capture file's readLayer gives it (the held queries, K, V, its entries
    /// and their scores, the queries' positions; views, no copy): what compressedKeys takes.
    model::CaptureExample layerExample(int64_t layer) const;
    /// Layer `layer`'s named method inputs: the indexer's scores by position ([1, S, S] or
    /// [1, Hi, S, blocks]).
    std::map<std::string, at::Tensor> methodInputs(int64_t layer) const;
    std::vector<std::string> tokens; ///< token texts, one per position (may be empty)
    std::vector<int64_t> tokenIds;   ///< one per position (may be empty)
    model::CaptureInfo info;         ///< shape and per-layer scale, window, soft-cap
    /// Positions of the prompt; the ones after it were generated (decode steps). 0: all.
    int64_t promptPositions = 0;
    /// Token healing (model::healPrompt): the prompt's last word, `healedText`, was taken
    /// off it and spelled again by the first `healedSteps` generated tokens. 0: none (or a
    /// capture that does not say).
    int64_t healedSteps = 0;
    std::string healedText;
    int64_t layers() const { return static_cast<int64_t>(q.size()); }
    int64_t heads() const { return q.empty() ? 0 : q[0].size(0); }
    int64_t kvHeads() const { return k.empty() ? 0 : k[0].size(0); }
    int64_t positions() const { return k.empty() ? 0 : k[0].size(1); }
    int64_t headDim() const { return q.empty() ? 0 : q[0].size(1); }
    /// Queries held per layer (T); all positions when T == positions().
    int64_t history() const { return qSteps.empty() ? 1 : qSteps[0].size(1); }
    /// Positions of the prompt (all of them for a capture of the prompt alone).
    int64_t promptLength() const {
        return promptPositions > 0 ? std::min(promptPositions, positions()) : positions();
    }
    /// Generated tokens after the prompt: decode steps 0 … steps() (0 when none).
    int64_t steps() const {
        return promptPositions > 0 ? std::max<int64_t>(0, positions() - promptPositions) : 0;
    }

    /// The lab at decode step `step` of a generation (0 … steps()): the query of position
    /// promptPositions − 1 + step (the one that chose generated token step + 1) over the keys
    /// and values up to it: what a capture of the prompt and the first `step` generated tokens
    /// holds. Views of this capture's tensors (no copy), sharing its calibration of Loki and
    /// Double Sparsity (made on the whole capture). Throws AttentionError when the step is out
    /// of range or its query is not held.
    std::shared_ptr<LabCapture> atStep(int64_t step) const;
    /// The lab for the query of position `position` (first held … positions() − 1) over the
    /// keys and values up to it, as atStep. Throws AttentionError when the position is out of
    /// range or its query is not held.
    std::shared_ptr<LabCapture> atPosition(int64_t position) const;
    /// The first position whose query is held (positions() − history()).
    int64_t firstHeldQuery() const { return positions() - history(); }

    /// `base` as layer `layer` of the model computes it, with a calibration for Loki and
    /// Double Sparsity (the capture's own — of the whole capture for a view at another query —
    /// made on first use, unless `base` brings one).
    attention::AttentionConfig layerConfig(int64_t layer,
                                           const attention::AttentionConfig& base) const;

    /// The capture as a file example (every held query, K, V, the tokens): what the lab shows,
    /// written without running the model again (exports, sessions).
    model::CaptureExample toExample() const;

    /// Builds a lab capture from a model's capture of one prompt.
    static std::shared_ptr<LabCapture> from(const model::CaptureExample& e,
                                            const model::CaptureInfo& info);

    /// What the lab reads of a layer whatever the method: dense attention of the decode-step
    /// query (y, logits, probs), k_mass at p = 0.5, 0.9, 0.99 ([3, 1, Hq]) and the query
    /// kurtosis ([1, Hq]). Computed on first use and kept (slider changes do not redo them).
    struct LayerCache {
        attention::AttentionResult dense;
        at::Tensor kMass;
        at::Tensor kurtosis;
        /// The keys the decode-step query is scored against, [1, Hkv, n, D] (their values the
        /// same: DeepSeek-V4's key is its value), the ones it sees ([1, n] bool) and the model's
        /// modifiers over them. On a compressed layer (compressedLayer()) the layer's C entries,
        /// then every position (analysis/compressed_keys.h); on any other k and every position.
        at::Tensor keys, values, seen;
        attention::AttentionConfig mods;
        int64_t entries = 0; ///< C: keys 0 … C − 1 are compressed entries (0: none)
        /// A compressed layer's own choice among the keys seen ([1, n] bool: on a CSA layer the
        /// indexer's top entries and the window) and its attention output over them [1, Hq, D];
        /// undefined on any other layer.
        at::Tensor model, modelY;
        /// The decode-step query q [Hq, D] over these keys, the ones seen valid.
        attention::AttentionInputs inputs(const at::Tensor& q) const;
    };
    std::shared_ptr<const LayerCache> layerCache(int64_t layer) const;
    /// Coverage of every head of a layer at k ([Hq]), kept per k.
    at::Tensor coverageAt(int64_t layer, int64_t k) const;
    /// A stateful method's state after the held queries before the decode step (H2O's
    /// accumulated attention, TOVA's cache, SnapKV's window; historyState()), kept per layer and
    /// the parameters it depends on; null for a stateless method.
    std::shared_ptr<const attention::CausalState>
    historyState(int64_t layer, const attention::AttentionConfig& layerConfig) const;
    /// Methods that read every earlier query's attention (H2O, TOVA): the lab runs them up to
    /// this many positions (S² work per head) and refuses them with one line beyond.
    static constexpr int64_t kQuadraticMaxPositions = 2048;
    void checkQuadratic(attention::Method m) const;

private:
    mutable std::mutex m_cacheMutex;
    mutable std::map<int64_t, std::shared_ptr<const LayerCache>> m_layerCache;
    mutable std::map<std::pair<int64_t, int64_t>, at::Tensor> m_coverage;
    mutable std::map<std::pair<int64_t, std::string>, std::shared_ptr<const attention::CausalState>>
        m_history;
    /// The prompt's own calibrations (Loki, Double Sparsity), made on first use from the whole
    /// capture's queries and keys; the views of atPosition() and atStep() share them, so every
    /// query of one prompt is ranked with the same calibration (and it is made once).
    struct Calibrations {
        std::mutex mutex;
        std::vector<at::Tensor> qSteps, k; ///< the whole capture's (views, no copies)
        std::map<attention::Method, std::shared_ptr<attention::Calibration>> made;
    };
    mutable std::mutex m_calMutex; ///< guards m_calibrations' creation
    mutable std::shared_ptr<Calibrations> m_calibrations;
    /// This capture's calibrations (created on first use from its own tensors).
    std::shared_ptr<Calibrations> calibrations() const;
};

/// One decode step of a method and of dense attention for every head of one layer, with the
/// model's modifiers, through the causal driver (attention/causal.h): the query of the last
/// position S − 1, keys and values k, v [Hkv, S, D], and the queries of the T positions
/// S − T … S − 1 (qHistory [Hq, T, D]) for the methods that read earlier queries (SnapKV's
/// window, TOVA's steps, H2O's accumulated attention, which needs T = S). Results are
/// [1, Hq, …]. `config` is the layer's (calibration included); `dense` carries only the
/// modifiers. Throws with one line when the history is short. `denseDone`: dense's result
/// computed before (denseStep), reused; `validate`: check inputs; `historyDone`: the stateful
/// method's state after every held query but the last (historyState), reused.
std::pair<attention::AttentionResult, attention::AttentionResult>
decodeStep(const at::Tensor& qHistory, const at::Tensor& k, const at::Tensor& v,
           const attention::AttentionConfig& config, const attention::AttentionConfig& dense,
           bool keepScores = false, const attention::AttentionResult* denseDone = nullptr,
           bool validate = true, const attention::CausalState* historyDone = nullptr,
           const std::map<std::string, at::Tensor>& extra = {});

/// The method `base` and dense attention of layer `layer`'s decode-step query, every head, as
/// the lab scores it (LabCapture::LayerCache: on a DeepSeek-V4 compressed layer over its entries
/// and the window's positions, the method in the indexer's place; elsewhere through decodeStep
/// with the layer's modifiers, a stateful method from its history). Results are [1, Hq, …];
/// dense's is the layer cache's. Throws AttentionError with one line where the method cannot run
/// (a method that needs positions on a compressed layer, a quadratic one past its bound).
std::pair<attention::AttentionResult, attention::AttentionResult>
layerStep(const LabCapture& capture, int64_t layer, const attention::AttentionConfig& base,
          bool keepScores = false);

/// A stateful method's state after the queries of qHistory [Hq, T, D] but the last (positions
/// S − T … S − 2 over k, v [Hkv, S, D]), run in chunks of 256 queries: what decodeStep needs
/// before the last one.
attention::CausalState historyState(const at::Tensor& qHistory, const at::Tensor& k,
                                    const at::Tensor& v, const attention::AttentionConfig& config);

/// Dense attention of the last query of qHistory [Hq, T, D] over k, v [Hkv, S, D] with the
/// model's modifiers: y, logits and probs ([1, Hq, …]); what decodeStep pairs each method with.
attention::AttentionResult denseStep(const at::Tensor& qHistory, const at::Tensor& k,
                                     const at::Tensor& v, const attention::AttentionConfig& dense,
                                     bool validate = true);

/// How many of a prompt's queries the lab keeps per layer: all of them when they take at most
/// `budgetBytes` (float32), else the last ones that fit (at least 64).
int64_t labHistory(int64_t positions, int64_t layers, int64_t heads, int64_t headDim,
                   int64_t budgetBytes = int64_t{1} << 30);

/// Everything the head view draws, for one (layer, head) and configuration.
struct HeadState {
    attention::Method method = attention::Method::Dense; ///< what computed it
    std::vector<float> qAbs;                             ///< |q_i|, D entries (step 1)
    /// What SparQ's step 1 ranks (SPARQ.md §3.1), D entries: Σ_h |q_h,i| over the rankedHeads
    /// query heads that share this head's KV head (the group rule), or qAbs (one head a group,
    /// or per-head components).
    std::vector<float> qRanked;
    int64_t rankedHeads = 1;     ///< query heads summed in qRanked
    int64_t firstRankedHead = 0; ///< the first of them (they are consecutive)
    /// Query heads that share one set of chosen positions under the method's GQA rule (1: per
    /// head), and the rule's name.
    int64_t positionHeads = 1;
    std::string gqaRule;
    std::vector<int64_t> components; ///< the r components SparQ uses, ascending (SparQ only)
    /// The exact softmax s over the keys (S entries, one per position; on a DeepSeek-V4
    /// compressed layer `entries` + S: the layer's compressed entries first, then the positions).
    std::vector<float> exact;
    std::vector<float> approx;   ///< the method's approximate softmax ŝ (as exact; empty if none)
    std::vector<int64_t> chosen; ///< keys the method attends to, ascending
    std::vector<int64_t> trueTopK; ///< the |chosen| keys of largest s, ascending
    int64_t localFrom = 0;         ///< the local window covers keys [localFrom, exact.size())
    /// DeepSeek-V4's compressed layers (docs/learned-sparse-and-hybrid.md §17): keys 0 …
    /// entries − 1 are compressed entries, entry w pooling the entryRate positions up to
    /// (w + 1) · entryRate − 1; 0: every key is a position.
    int64_t entries = 0, entryRate = 0;
    int64_t entryTopK = 0; ///< the entries the layer's indexer keeps (0: no indexer, every one)
    /// On such a layer, the keys the model attends (on a CSA layer the indexer's top entries and
    /// the window, else every entry seen and the window), ascending, and the relative output
    /// error of the method and of dense attention over every key seen against the model's own.
    std::vector<int64_t> modelChosen;
    int64_t keysSeen = 0; ///< the keys the query sees there (the entries complete, the window)
    double modelError = 0, denseModelError = 0;
    /// Elements the model's own attention reads there per step (compressedModelReads: its keys,
    /// and on a CSA layer the indexer's key of every entry seen, where the capture records its
    /// dimension: modelIndexerCounted).
    double modelTransfer = 0;
    bool modelIndexerCounted = false;
    /// The position key `key` stands for on the scores axis: its own, or an entry's middle.
    double keyPosition(int64_t key) const {
        return key >= entries ? static_cast<double>(key - entries)
                              : static_cast<double>(key * entryRate) + 0.5 * (entryRate - 1);
    }
    /// keyPosition of every key.
    std::vector<double> keyPositions() const;
    /// The positions the scores axis holds (the keys less the entries).
    int64_t positions() const { return static_cast<int64_t>(exact.size()) - entries; }
    /// A weight per key (exact, ŝ) as one per position: its own, or where an entry pools it the
    /// larger of its own and the entry's (the strongest key that holds it). Empty stays empty.
    std::vector<float> byPosition(const std::vector<float>& byKey) const;
    double alpha = 1;         ///< SparQ's α (1 for other methods)
    double trueMass = 1;      ///< Σ s over the true top-|chosen|
    double chosenMass = 1;    ///< Σ s over the positions chosen
    double tau = 0;           ///< SparQ's temperature (0 if none)
    double outputError = 0;   ///< ‖y − y_dense‖ / ‖y_dense‖
    double topkAgreement = 1; ///< recall: |chosen ∩ true top-|chosen|| / |chosen|
    int64_t kEff = 0;         ///< min(k, S)
    int64_t count = 0;        ///< positions attended
    /// Elements the method and dense attention read per step (METHODS.md §10); on a compressed
    /// layer over the keys seen, each key its value (CaptureInfo::transferArgs).
    double transfer = 0;
    double denseTransfer = 0;
    int64_t kMass90 = 0; ///< positions holding 90% of this head's mass
    /// The sink's share of the exact attention (gpt-oss; 0 without sinks): attention to nothing,
    /// kept by every method, so counted in trueMass and chosenMass.
    double sinkShare = 0;
    /// What the layer's attention is beyond the default, for people: "window 16", "chunks of
    /// 8192", "NoPE", "sinks", joined by " · " (empty: plain causal attention with RoPE).
    std::string layerNote;
    /// What the method ranks by, for Step 1 (its unit's StepOneView; empty values: |q| with
    /// SparQ's components).
    attention::StepOneView stepOne;
};

/// What layer `layer`'s attention is beyond the default (HeadState::layerNote).
std::string layerNote(const model::CaptureInfo& info, int64_t layer);

/// Computes the head view. Throws attention::AttentionError for an out-of-range layer, head
/// or parameter (r > head_dim, …), or a method the capture lacks the queries for.
HeadState headState(const LabCapture& capture, int64_t layer, int64_t head,
                    const attention::AttentionConfig& config);

/// Teaching mode's retrieval page: the smallest r of 2, 4, 8, … (at most head_dim) whose SparQ
/// selection (the rest of `base`) holds at least `mass` of the head's exact attention — what a
/// lecturer finds by moving the slider — or the largest tried when none does; with that head
/// view's state.
std::pair<int64_t, HeadState> smallestRHolding(const LabCapture& capture, int64_t layer,
                                               int64_t head, attention::AttentionConfig base,
                                               double mass);

/// The head a first screen shows (a start of the lab with no head asked for): of the heads
/// whose k largest positions hold at least `minCoverage` of the exact attention at the decode
/// step, the one whose attention is most spread (the most positions for 90% of its mass, the
/// overview's "k for 90%"), so the picture shows several peaks that the k positions catch;
/// the best-covered head when none reaches `minCoverage`. With its two figures, for the note
/// the lab shows beside it.
struct HeadPick {
    int64_t layer = 0, head = 0;
    double coverage = 0; ///< exact mass on its k largest positions
    int64_t kMass90 = 0; ///< positions holding 90% of its mass
    int64_t k = 0;       ///< min(k, S)
    bool covered = true; ///< coverage ≥ minCoverage (else: the best-covered head)
    double minCoverage = 0;
};
HeadPick firstScreenHead(const LabCapture& capture, int64_t k, double minCoverage = 0.9);

/// The lab's k until the user sets one: 64, and on a prompt of fewer than 128 positions half
/// of them (rounded up), so that a method still has positions to leave out. A k of 64 on a
/// 28-token prompt would attend every position and show SparQ equal to dense.
constexpr int64_t kLabK = 64;
int64_t promptK(int64_t positions);

/// The per-head measures of the overview.
enum class Measure {
    Coverage,    ///< exact mass on the k largest positions
    Kurtosis,    ///< Fisher kurtosis of q's components
    Agreement,   ///< top-k agreement of SparQ's ŝ with s at r
    Recall,      ///< recall of the method's set against the true top-|set| (METHODS.md §9.2)
    OutputError, ///< ‖y − y_dense‖ / ‖y_dense‖ of the method
    KMass50,     ///< positions for 50% of the mass (METHODS.md §9.1)
    KMass90,     ///< … 90%
    KMass99,     ///< … 99%
};
/// Every measure with its label, in the order the overview offers them.
const std::vector<std::pair<Measure, std::string>>& measures();
/// A measure's label (measures()'s), for every panel that shows it.
const std::string& measureLabel(Measure m);

/// Layer × head grids ([L, Hq] row-major) at the configuration.
struct Overview {
    int64_t layers = 0, heads = 0;
    std::map<Measure, std::vector<float>> grids;
    std::vector<float> coverage;  ///< (the Coverage grid)
    std::vector<float> kurtosis;  ///< (the Kurtosis grid)
    std::vector<float> agreement; ///< (the Agreement grid)
};
Overview overview(const LabCapture& capture, const attention::AttentionConfig& config);

} // namespace sparqlab::analysis
