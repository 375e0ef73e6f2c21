#pragma once
/// \file top_p.h
/// The top-p budget (METHODS.md §6.1) that oracle-top-p and sparq-top-p share: the fewest
/// positions of the selection order whose mass reaches p, at least the local window, at most
/// k_max. Internal to the method units.

#include "attention/method_kit.h"
#include "attention/method_spec.h"

namespace sparqlab::attention::detail {

struct TopP {
    Selection sel;     ///< [B, Hkv, g, T, S]
    at::Tensor count;  ///< [B, Hkv, g, T] n*
    at::Tensor est;    ///< [B, Hkv, g, T] cum[n*]
    at::Tensor margin; ///< [B, Hkv, g, T] mass margin
};

/// §6.1 for ranking score G and unit mass m, both [B, Hkv, U, T, S]; `sinkMass` [B, Hkv, U, T]
/// (undefined: no sinks) is the sink's share, held from the start (the sink is always kept).
TopP topPSelect(const Prepared& p, const at::Tensor& G, const at::Tensor& m,
                const AttentionConfig& c, const at::Tensor& sinkMass = {});
/// §2.3: the unit mass, per head or the group's mean probability.
at::Tensor unitMass(const at::Tensor& probs, GroupSelect gs);
/// The lab's Step 1 of a top-p method: `scores` [S] (what it ranks by, a distribution) sorted
/// and accumulated over ranks, the cut at p and the first `count` ranks marked.
/// A number as people read it ("0.9", "12").
std::string numberText(double x);
StepOneView topPMassCurve(const at::Tensor& scores, double p, int64_t count, GroupSelect gqa,
                          const std::string& caption);
/// The sink's share per unit, as unitMass takes the probabilities (undefined without sinks).
at::Tensor unitSinkMass(const Prepared& p, const at::Tensor& probs, GroupSelect gs);
/// What a top-p selection adds to the selection's outputs (after fillSelection): the count, the
/// estimated mass, the margin.
void topPOutputs(const Prepared& p, const TopP& t, const AttendOptions& o, AttentionResult& out);

} // namespace sparqlab::attention::detail
