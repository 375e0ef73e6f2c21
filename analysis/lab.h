#pragma once
/// \file lab.h
/// What the lab window shows, computed from one captured prompt: for a chosen layer, head
/// and attention configuration, the three steps of SparQ (SPARQ.md §3) for the decode-step
/// query, and layer × head overviews of coverage, query kurtosis and top-k agreement.
/// libtorch only (no Qt); every function is cheap enough to run on each slider change.

#include "attention/attention.h"

#include <ATen/core/Tensor.h>

#include <string>
#include <vector>

namespace sparqlab::analysis {

/// One captured prompt: the last position's query and every position's K and V, per layer.
struct LabCapture {
    std::vector<at::Tensor> q;       ///< per layer [Hq, D] float32
    std::vector<at::Tensor> k;       ///< per layer [Hkv, S, D] float32
    std::vector<at::Tensor> v;       ///< per layer [Hkv, S, D] float32
    std::vector<std::string> tokens; ///< token texts, one per position (may be empty)
    int64_t layers() const { return static_cast<int64_t>(q.size()); }
    int64_t heads() const { return q.empty() ? 0 : q[0].size(0); }
    int64_t kvHeads() const { return k.empty() ? 0 : k[0].size(0); }
    int64_t positions() const { return k.empty() ? 0 : k[0].size(1); }
    int64_t headDim() const { return q.empty() ? 0 : q[0].size(1); }
};

/// Everything the head view draws, for one (layer, head) and configuration.
struct HeadState {
    std::vector<float> qAbs;         ///< |q_i|, D entries (step 1)
    std::vector<int64_t> components; ///< the r components SparQ uses, ascending (SparQ only)
    std::vector<float> exact;        ///< s, the exact softmax over positions (S entries)
    std::vector<float> approx;       ///< ŝ, SparQ's approximate softmax (S; empty if not SparQ)
    std::vector<int64_t> chosen;     ///< positions the method attends to, ascending
    std::vector<int64_t> trueTopK;   ///< the k positions of largest s, ascending
    int64_t localFrom = 0;           ///< the local window covers [localFrom, S)
    double alpha = 1;                ///< SparQ's α (1 for other methods)
    double trueMass = 1;             ///< Σ s over the true top-k
    double chosenMass = 1;           ///< Σ s over the positions chosen
    double tau = 0;                  ///< SparQ's temperature (0 if none)
    double outputError = 0;          ///< ‖y − y_dense‖ / ‖y_dense‖
    double topkAgreement = 1;        ///< |chosen ∩ true top-k| / k (positions chosen by score)
    int64_t kEff = 0;
};

/// Computes the head view. Throws attention::AttentionError for an out-of-range layer, head
/// or parameter (r > head_dim, k > S, …), with one line.
HeadState headState(const LabCapture& capture, int64_t layer, int64_t head,
                    const attention::AttentionConfig& config);

/// Layer × head grids ([L, Hq] row-major) at the configuration's r and k.
struct Overview {
    int64_t layers = 0, heads = 0;
    std::vector<float> coverage;  ///< exact mass on the k largest positions
    std::vector<float> kurtosis;  ///< Fisher kurtosis of q's components
    std::vector<float> agreement; ///< top-k agreement of SparQ's ŝ with s at r
};
Overview overview(const LabCapture& capture, const attention::AttentionConfig& config);

} // namespace sparqlab::analysis
