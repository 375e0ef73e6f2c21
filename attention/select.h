#pragma once
/// \file select.h
/// Deterministic top-n selection (SPARQ.md §2.3) and the position indices of §2.2.
/// Vectorised over any leading dimensions; the last axis is the one selected along.

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace sparqlab::attention {

/// Result of select(): a mask and the margins of SPARQ.md §2.3.
struct Selection {
    at::Tensor mask;      ///< [..., S] bool, exactly n true per row
    at::Tensor margin;    ///< [...] lo − hi (+inf if either set is empty; 0 = exact tie)
    at::Tensor marginRel; ///< [...] margin / max(|lo|, |hi|)
};

/// Permutation of the last axis: `category` descending (if defined), then `score`
/// descending with NaN as −∞, then index ascending.
at::Tensor rankOrder(const at::Tensor& score, const at::Tensor& category = {});

/// SPARQ.md §2.3: exactly n[...] positions, all of `forced` first, then the best remaining
/// positions of `cand` by descending score, ties to the lower index. score, cand, forced
/// [..., S]; n int64 broadcastable to [...]. Preconditions: |forced| ≤ n ≤ |cand|.
/// Without `margins` the margins are left undefined (the mask alone is cheaper).
Selection select(const at::Tensor& score, const at::Tensor& cand, const at::Tensor& forced,
                 const at::Tensor& n, bool margins = true);

/// Ascending indices of the n largest entries along the last axis (ties → lower index).
at::Tensor topnIndices(const at::Tensor& x, int64_t n);

/// bool [..., S] → int64 [..., width]: the true positions ascending, right-padded with −1.
at::Tensor maskToIndices(const at::Tensor& mask, int64_t width);

/// SPARQ.md §2.2: number of valid positions after j (0 = current token); −1 where invalid.
at::Tensor causalIndex(const at::Tensor& valid);

/// SPARQ.md §2.2: number of valid positions before j (0 = oldest); −1 where invalid.
at::Tensor forwardIndex(const at::Tensor& valid);

/// The blocks of blockSize keys that hold k keys (MiniMax-M3's block indexer: the blocks of a
/// sequence, the indexer method's blocks for k): ⌈k / blockSize⌉, at least 1.
int64_t blocksForKeys(int64_t k, int64_t blockSize);

/// The keys one selection of keepBlocks reads when a query at the last of `keys` keys keeps
/// min(topBlocks, blocks) blocks of blockSize (MiniMax-M3's own reads at a decode step, `traffic`):
/// every key where that is all the blocks, else the query's own block (the only partial one,
/// forced where localBlocks ≥ 1) and the other kept blocks whole; with localBlocks 0 the own block
/// may lose to a whole one, and the count is the most it can be. `selections` groups reading
/// together (a KV head whose query heads fall in several indexer heads' groups) read at most the
/// union: the forced blocks once, each group's others apart.
int64_t keptBlockKeys(int64_t keys, int64_t blockSize, int64_t localBlocks, int64_t topBlocks,
                      int64_t selections = 1);

/// MiniMax-M3's block selection (docs/learned-sparse-and-hybrid.md §8), written once for the
/// model and for the indexer method on a capture. `score` [..., blocks]: each block's score
/// (−inf or NaN: the block has no key the query sees); `ownBlock` int64 broadcastable to [...]:
/// the block of the query's position. Keeps min(topBlocks, blocks with a key) blocks: the
/// `localBlocks` blocks ending at the own block (the most recent of them where topBlocks is
/// fewer), then the highest scores (torch.topk's order among exact ties, as transformers'): mask
/// [..., blocks] and, with `margins`, the margins between the blocks' scores.
Selection keepBlocks(const at::Tensor& score, const at::Tensor& ownBlock, int64_t localBlocks,
                     int64_t topBlocks, bool margins = false);

} // namespace sparqlab::attention
