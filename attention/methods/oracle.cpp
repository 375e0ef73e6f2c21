// The oracle top-k (SPARQ.md §4.1): the true top-k positions by exact scores, renormalised —
// what any approximate selection is aiming at.

#include "attention/method_kit.h"

#include <ATen/ATen.h>

namespace sparqlab::attention::detail {
namespace {

AttentionResult runOracle(const Prepared& p, const AttentionInputs&, const AttentionConfig& c,
                          const AttendOptions& o) {
    const at::Tensor z = exactLogits(p);
    const at::Tensor s = probabilities(p, z);
    const Selection sel = selectPositions(p, groupRankScore(z, s, c.gqa), c.k, c.effectiveLocal());
    return attendSelection(p, z, sel, c.k, o);
}

} // namespace
} // namespace sparqlab::attention::detail

SPARQLAB_METHOD(oracle) {
    return {.info = {.id = Method::Oracle,
                     .name = "oracle",
                     .label = "Oracle top-k",
                     .summary = "the true top-k by exact scores, renormalised",
                     .spec = "SPARQ.md §4.1",
                     .params = {Param::K, Param::Local, Param::Gqa},
                     // The paper's upper bound (§5.4): the exact top-k "without requiring
                     // any data transfer to calculate the top-k", so k keys and values only.
                     // (It was counted as FlexGen, all of K first: never below 0.5 of dense,
                     // its points lay under FlexGen's and its trade-off curve missed SparQ's.)
                     .transfer = transfer::kept,
                     .transferFormula = "2·k·d + 2·d",
                     .evalGrid = "k=32,64,128,256 local=k/4"},
            .run = detail::runOracle};
}
