#pragma once
// Inputs and configurations the method tests share: random decode steps with GQA, padding and
// holes, a configuration of every method that makes it select, Loki's and Double Sparsity's
// calibrations.

#include "test_support.h"

#include "attention/attention.h"
#include "attention/method_table.h"

#include <ATen/ATen.h>
#include <QtTest>

#include <memory>
#include <vector>

namespace sparqlab::test {

namespace att = sparqlab::attention;

/// Random decode-step inputs: GQA, a left-padded second row with a few holes.
inline att::AttentionInputs randomInputs(int64_t B, int64_t Hkv, int64_t g, int64_t S, int64_t D,
                                         uint64_t seed = 11, int64_t w = 8) {
    at::manual_seed(static_cast<int64_t>(seed));
    att::AttentionInputs in;
    in.q = at::randn({B, g * Hkv, D}, at::kDouble) * 1.5;
    in.k = at::randn({B, Hkv, S, D}, at::kDouble);
    in.v = at::randn({B, Hkv, S, D}, at::kDouble) + 0.5;
    in.valid = at::ones({B, S}, at::kBool);
    if (B > 1) {
        in.valid[1].slice(0, 0, 5).fill_(false);
        in.valid[1][9] = false;
        in.valid[1][14] = false;
    }
    // SnapKV's window: random queries, the last slot the decode query.
    in.qWin = at::randn({B, g * Hkv, w, D}, at::kDouble) * 1.5;
    in.qWin.select(2, w - 1).copy_(in.q);
    // Expected Attention's queries of every position (the last one the decode query).
    at::Tensor qAll = at::randn({B, g * Hkv, S, D}, at::kDouble) * 1.5;
    qAll.select(2, S - 1).copy_(in.q);
    in.extra["q_all"] = qAll;
    // A DSA model's indexer scores of every query position over the keys (the indexer method).
    in.extra["index_scores"] = at::randn({B, S, S}, at::kFloat);
    return in;
}

inline att::AttentionConfig cfg(att::Method m, int64_t k, int64_t l = 0) {
    att::AttentionConfig c = att::defaultConfig(m); // its own kernel, GQA rule, sinks …
    c.k = k;
    c.local = l;
    c.snapWindow = 8;
    return c;
}

inline std::shared_ptr<att::Calibration> identityBasis(int64_t Hkv, int64_t D, bool scramble) {
    auto cal = std::make_shared<att::Calibration>();
    cal->method = att::Method::Loki;
    at::Tensor b = at::eye(D, at::kDouble).unsqueeze(0).repeat({Hkv, 1, 1});
    if (scramble) { // a random orthonormal basis
        at::manual_seed(5);
        b = std::get<0>(at::linalg_qr(at::randn({Hkv, D, D}, at::kDouble)));
    }
    cal->tensors["basis"] = b.unsqueeze(0);
    cal->source = "test";
    return cal;
}

inline std::shared_ptr<att::Calibration> channelList(const at::Tensor& ch) {
    auto cal = std::make_shared<att::Calibration>();
    cal->method = att::Method::DoubleSparsity;
    cal->tensors["channels"] = ch.unsqueeze(0);
    cal->source = "test";
    return cal;
}

inline std::vector<int64_t> setOf(const at::Tensor& row) {
    std::vector<int64_t> s;
    for (int64_t x : toVector(row))
        if (x >= 0)
            s.push_back(x);
    return s;
}

/// The parameters of METHODS2.md's and METHODS3.md's methods scaled to a few dozen positions,
/// so that each selects (their defaults are for 100k-token prompts).
inline void smallShapes(att::AttentionConfig& c, int64_t k) {
    using P = att::Param;
    switch (c.method) {
    case att::Method::ExpectedAttention:
        c.values[P::Sink] = 2;
        c.values[P::NFuture] = 8;
        break;
    case att::Method::PQCache:
        c.values[P::Sink] = 2;
        c.values[P::PqBits] = 2;
        c.values[P::PqIters] = 4;
        break;
    case att::Method::MagicPIG:
        c.values[P::Sink] = 2;
        c.values[P::HashBits] = 3;
        c.values[P::HashTables] = 12;
        c.local = 4;
        break;
    case att::Method::ShadowKV:
        c.values[P::ChunkSize] = 4;
        c.values[P::Budget] = 8;
        c.values[P::Rank] = 6;
        c.values[P::LocalChunks] = 1;
        c.values[P::OutlierChunks] = 1;
        break;
    case att::Method::RocketKV:
        c.values[P::PromptBudget] = std::max<int64_t>(2 * k, c.snapWindow);
        c.values[P::ChunkSize] = 2;
        c.kernel = 5;
        break;
    case att::Method::AdaKV:
        c.k = std::max(k, c.snapWindow);
        c.kernel = 3;
        break;
    default:
        break;
    }
}

/// Every method but TOVA's multi-step form, with parameters that make it select.
inline std::vector<att::AttentionConfig> everyMethod(const att::AttentionInputs& in, int64_t k) {
    std::vector<att::AttentionConfig> all;
    for (const att::MethodInfo& m : att::methods()) {
        att::AttentionConfig c = cfg(m.id, k, m.id == att::Method::H2O ? 2 : 0);
        c.r = 8;
        c.p = 0.8;
        c.pageSize = 4;
        smallShapes(c, k);
        if (m.id == att::Method::Loki)
            c.calibration = identityBasis(in.k.size(1), in.k.size(3), true);
        if (m.id == att::Method::DoubleSparsity)
            c.calibration = channelList(
                at::arange(in.k.size(3), at::kLong).flip(0).unsqueeze(0).repeat({in.q.size(1), 1}));
        all.push_back(c);
    }
    return all;
}

inline att::AttentionInputs withAcc(att::AttentionInputs in) {
    in.acc = at::rand({in.k.size(0), in.k.size(1), in.k.size(2)}, at::kDouble);
    return in;
}

} // namespace sparqlab::test
