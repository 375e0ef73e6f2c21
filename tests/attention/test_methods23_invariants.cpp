// The invariants of METHODS2.md §8 (M1–M10) and METHODS3.md §9 (S1–S4, R1–R3, D1–D3, X1–X5) on
// random inputs with GQA, padding and holes; their parameter errors; and the three methods that
// compress the prompt once (Expected Attention, AdaKV, RocketKV) in a model: a prefill of each
// position's own decode step, then one-query steps over what the last one kept.

#include "method_inputs.h"
#include "test_support.h"

#include "attention/attention.h"
#include "attention/method_spec.h"
#include "attention/method_table.h"
#include "attention/methods/pqcache/pqcache.h"
#include "attention/select.h"

#include <ATen/ATen.h>
#include <QtTest>

#include <cmath>
#include <limits>

namespace att = sparqlab::attention;
using namespace sparqlab::test;
using P = att::Param;

#define VERIFY_CLOSE(a, b, atol, what)                                                             \
    do {                                                                                           \
        const QString _e = compareClose((a), (b), (atol), 0, QString(what));                       \
        QVERIFY2(_e.isEmpty(), qPrintable(_e));                                                    \
    } while (0)

namespace {

att::AttentionConfig small(att::Method m, int64_t k) {
    att::AttentionConfig c = cfg(m, k);
    smallShapes(c, k);
    return c;
}

/// RoPE of x [..., S, D] at positions 0 … S − 1 (rotate-half, float64).
at::Tensor rope(const at::Tensor& x, const at::Tensor& invFreq, const at::Tensor& positions) {
    const at::Tensor a = positions.to(at::kDouble).unsqueeze(-1) * invFreq;
    const at::Tensor c = at::cat({a.cos(), a.cos()}, -1), s = at::cat({a.sin(), a.sin()}, -1);
    const int64_t h = x.size(-1) / 2;
    const at::Tensor rot = at::cat({-x.narrow(-1, h, h), x.narrow(-1, 0, h)}, -1);
    return x * c + rot * s;
}

bool subset(const std::vector<int64_t>& a, const std::vector<int64_t>& b) {
    return std::includes(b.begin(), b.end(), a.begin(), a.end());
}

} // namespace

class TestMethods23Invariants : public QObject {
    Q_OBJECT
private Q_SLOTS:
    // ---- Expected Attention (METHODS2.md §3) ---------------------------------------------------

    void m1_expectedAttentionBudgetAndForced() {
        const auto in = randomInputs(2, 2, 2, 40, 16, 61);
        const at::Tensor dense = att::attend(in, {}).y;
        att::AttentionConfig c = small(att::Method::ExpectedAttention, 40);
        VERIFY_CLOSE(att::attend(in, c).y, dense, 1e-12, "k >= n_valid: dense");
        c.values[P::Ratio] = 0;
        VERIFY_CLOSE(att::attend(in, c).y, dense, 1e-12, "ratio 0: dense");
        for (const double ratio : {0.5, 0.9}) {
            c.values[P::Ratio] = ratio;
            const att::AttentionResult r = att::attend(in, c);
            for (int64_t b = 0; b < 2; ++b) {
                const int64_t nValid = in.valid[b].sum().item<int64_t>(), nPrompt = nValid - 1;
                const auto nKeep =
                    static_cast<int64_t>(std::floor(static_cast<double>(nPrompt) * (1 - ratio)));
                QVERIFY(r.count[b].eq(nKeep + 1).all().item<bool>());
                QVERIFY(r.output("n_keep")[b].eq(nKeep).all().item<bool>());
                // The two sinks and the current token are kept.
                const at::Tensor pos = in.valid[b].nonzero().flatten();
                for (int64_t h = 0; h < 4; ++h) {
                    const auto set = setOf(r.indices[b][h]);
                    for (const int64_t j :
                         {pos[0].item<int64_t>(), pos[1].item<int64_t>(), pos[-1].item<int64_t>()})
                        QVERIFY(std::count(set.begin(), set.end(), j) == 1);
                }
            }
        }
    }

    void m2_expectedAttentionStatistics() {
        // q_all built from pre-RoPE queries: μ̄ = R̄ · mean of them over X, R̄ the average future
        // rotation; with inv_freq = 0 no rotation at all.
        at::manual_seed(62);
        const int64_t S = 30, D = 16, nSink = 2, nFuture = 5;
        auto in = randomInputs(1, 1, 2, S, D, 62);
        const at::Tensor qPre = at::randn({1, 2, S, D}, at::kDouble);
        const at::Tensor invFreq =
            1.0 / at::pow(10000.0, at::arange(0, D, 2, at::kDouble) / static_cast<double>(D));
        const at::Tensor positions = at::arange(S, at::kLong);
        in.extra["q_all"] = rope(qPre, invFreq, positions);
        att::AttentionConfig c = cfg(att::Method::ExpectedAttention, 10);
        c.values[P::Sink] = nSink;
        c.values[P::NFuture] = nFuture;
        c.ropeInvFreq = invFreq;
        const at::Tensor mu = qPre.narrow(2, nSink, S - 1 - nSink).mean(2)[0]; // [2, D]
        // R̄ x by hand: the mean of the future rotations applied to x.
        at::Tensor want = at::zeros_like(mu);
        for (int64_t t = 0; t < nFuture; ++t)
            want += rope(mu.unsqueeze(1), invFreq, at::full({1}, S - 1 + t, at::kLong)).squeeze(1);
        want /= static_cast<double>(nFuture);
        VERIFY_CLOSE(att::attend(in, c).output("mu_bar")[0], want, 1e-12, "mu_bar");
        c.ropeInvFreq = at::zeros({D / 2}, at::kDouble);
        in.extra["q_all"] = qPre;
        VERIFY_CLOSE(att::attend(in, c).output("mu_bar")[0], mu, 1e-12, "inv_freq 0: no rotation");
    }

    // ---- PQCache (METHODS2.md §4)
    // ----------------------------------------------------------------

    void m3_pqcacheExactCodebookIsOracle() {
        for (const int64_t g : {1, 2}) {
            const auto in = randomInputs(2, 2, g, 30, 16, 63);
            for (const int64_t l : {0, 3}) {
                att::AttentionConfig c = small(att::Method::PQCache, 9);
                c.values[P::Sink] = 0;
                c.values[P::PqBits] = 5; // 32 centroids ≥ every key: an exact codebook
                c.local = l;
                att::AttentionConfig o = cfg(att::Method::Oracle, 9, std::max<int64_t>(1, l));
                for (const att::GroupSelect gs :
                     {att::GroupSelect::PerHead, att::GroupSelect::SumProbs,
                      att::GroupSelect::SumLogits}) {
                    if (g > 1 && gs != att::GroupSelect::PerHead)
                        continue;
                    c.gqa = o.gqa = gs;
                    const auto a = att::attend(in, c), b = att::attend(in, o);
                    QVERIFY(a.indices.equal(b.indices));
                    VERIFY_CLOSE(a.y, b.y, 1e-12, "pqcache exact codebook = oracle");
                }
            }
        }
    }

    void m4_pqBuild() {
        const auto in = randomInputs(1, 2, 1, 60, 16, 64);
        const at::Tensor valid = in.valid.to(at::kBool);
        // iters = 0: the evenly spaced fit keys themselves.
        const att::PqCodebook init = att::pqBuild(in.k, valid, 2, 3, 4, 0);
        const at::Tensor fit = init.fit[0].nonzero().flatten(); // positions 4 … 58
        const int64_t n = fit.numel(), C = 8;
        for (int64_t c = 0; c < C; ++c) {
            const int64_t j = fit[c * n / C].item<int64_t>();
            VERIFY_CLOSE(init.centroids[0].select(2, c), in.k[0].select(1, j).view({2, 2, 8}), 0,
                         "init centroid");
        }
        // Converged: a fixed point; codes are nearest centroids, centroids the means of theirs.
        const att::PqCodebook cb = att::pqBuild(in.k, valid, 2, 3, 4, 100);
        QVERIFY(cb.updates.item<int64_t>() < 100);
        const att::PqCodebook again = att::pqBuild(in.k, valid, 2, 3, 4, 101);
        VERIFY_CLOSE(again.centroids, cb.centroids, 0, "a fixed point");
        for (int64_t u = 0; u < 2; ++u)
            for (int64_t s = 0; s < 2; ++s) {
                const at::Tensor x = in.k[0][u].index_select(0, fit).narrow(1, s * 8, 8);
                const at::Tensor cent = cb.centroids[0][u][s];
                const at::Tensor codes = cb.codes[0][u][s].index_select(0, fit);
                const at::Tensor d = (x.unsqueeze(1) - cent.unsqueeze(0)).pow(2).sum(-1);
                QVERIFY(codes.equal(d.argmin(-1)));
                for (int64_t c = 0; c < C; ++c) {
                    const at::Tensor members = codes.eq(c);
                    if (members.any().item<bool>())
                        VERIFY_CLOSE(cent[c],
                                     x.index_select(0, members.nonzero().flatten()).mean(0), 1e-12,
                                     "centroid = mean");
                }
            }
    }

    void m5_pqcacheBudget() {
        const auto in = randomInputs(2, 2, 2, 40, 16, 65);
        att::AttentionConfig c = small(att::Method::PQCache, 40);
        VERIFY_CLOSE(att::attend(in, c).y, att::attend(in, {}).y, 1e-12, "k >= n_valid: dense");
        for (const int64_t k : {6, 12, 20}) {
            c.k = k;
            c.local = 3;
            const att::AttentionResult r = att::attend(in, c);
            for (int64_t b = 0; b < 2; ++b) {
                const at::Tensor pos = in.valid[b].nonzero().flatten();
                QVERIFY(r.count[b].eq(std::min<int64_t>(k, pos.numel())).all().item<bool>());
                for (int64_t h = 0; h < 4; ++h) {
                    const auto set = setOf(r.indices[b][h]);
                    // The 2 sinks, the window of 3 (the current token in it).
                    for (const int64_t i : {int64_t{0}, int64_t{1}, pos.numel() - 3,
                                            pos.numel() - 2, pos.numel() - 1})
                        QVERIFY(std::count(set.begin(), set.end(), pos[i].item<int64_t>()) == 1);
                }
            }
        }
    }

    // ---- MagicPIG (METHODS2.md §5)
    // ---------------------------------------------------------------

    void m6_magicpigLimits() {
        const auto in = randomInputs(2, 2, 2, 40, 16, 66);
        const att::AttentionResult dense = att::attend(in, {}, {.keepScores = true});
        att::AttentionConfig c = small(att::Method::MagicPIG, 8);
        c.local = 40; // sink + l ≥ n_valid: dense
        VERIFY_CLOSE(att::attend(in, c).y, dense.y, 1e-12, "exact window over all: dense");
        // K = 0: every key of O sampled with w = 1: O's weights scaled by 1/(1 + 1e-4).
        c = small(att::Method::MagicPIG, 8);
        c.values[P::HashBits] = 0;
        const att::AttentionResult all = att::attend(in, c);
        QVERIFY(all.count.equal(in.valid.sum(-1, true).expand({2, 4})));
        const int64_t sink = 2, l = 4;
        for (int64_t b = 0; b < 2; ++b) {
            const at::Tensor fi = att::forwardIndex(in.valid)[b],
                             ci = att::causalIndex(in.valid)[b];
            const at::Tensor E = in.valid[b].logical_and(fi.lt(sink).logical_or(ci.lt(l)));
            const at::Tensor scale = at::where(E, at::ones({40}, at::kDouble),
                                               at::full({40}, 1.0 / (1 + 1e-4), at::kDouble));
            const at::Tensor w = dense.probs[b] * scale;
            const at::Tensor y =
                at::einsum("hs,hsd->hd", {w / w.sum(-1, true), in.v[b].repeat_interleave(2, 0)});
            VERIFY_CLOSE(all.y[b], y, 1e-12, "K = 0");
        }
        // L = 1: nothing collides twice, attention over E only.
        c.values[P::HashBits] = 3;
        c.values[P::HashTables] = 1;
        const att::AttentionResult e = att::attend(in, c);
        QVERIFY(e.output("n_sampled").eq(0).all().item<bool>());
        QVERIFY(e.count.eq(sink + l).all().item<bool>());
        // In general: I = E ∪ {c ≥ 2}, w the binomial tail.
        c = small(att::Method::MagicPIG, 8);
        const att::AttentionResult r = att::attend(in, c, {.keepScores = true});
        const at::Tensor coll = r.output("collisions");
        for (int64_t b = 0; b < 2; ++b)
            for (int64_t h = 0; h < 4; ++h) {
                const at::Tensor fi = att::forwardIndex(in.valid)[b],
                                 ci = att::causalIndex(in.valid)[b];
                const at::Tensor E = in.valid[b].logical_and(fi.lt(sink).logical_or(ci.lt(l)));
                const at::Tensor I = E.logical_or(coll[b][h].ge(2));
                QVERIFY(r.selected[b][h].equal(I));
            }
        const at::Tensor weight = r.output("weight");
        QVERIFY(weight.masked_select(coll.ge(2)).gt(0).all().item<bool>());
        // One key in O (S = 3, a sink and l = 1): its centred key is 0, and so is its hash
        // margin (§5.3, the float64 reference's 0 / 1e-300) in float32 too, where 0 / 0 was NaN.
        {
            att::AttentionConfig c3 = small(att::Method::MagicPIG, 8);
            c3.values[P::Sink] = 1;
            c3.local = 1;
            for (const at::ScalarType t : {at::kDouble, at::kFloat}) {
                auto in3 = randomInputs(1, 2, 2, 3, 16, 67);
                in3.q = in3.q.to(t);
                in3.k = in3.k.to(t);
                in3.v = in3.v.to(t);
                const at::Tensor m = att::attend(in3, c3).output("hash_margin_rel");
                QVERIFY2(m.eq(0).all().item<bool>(), at::toString(t));
            }
        }
        QVERIFY(weight.masked_select(coll.ge(2)).le(1).all().item<bool>());
    }

    // ---- ShadowKV (METHODS3.md §3)
    // ---------------------------------------------------------------

    void s1_shadowkvDenseLimitsAndCount() {
        const auto in = randomInputs(2, 2, 2, 45, 16, 71);
        const at::Tensor dense = att::attend(in, {}).y;
        att::AttentionConfig c = small(att::Method::ShadowKV, 8);
        c.values[P::LocalChunks] = 20; // no chunk: all local
        VERIFY_CLOSE(att::attend(in, c).y, dense, 1e-12, "n_ch = 0: dense");
        c = small(att::Method::ShadowKV, 8);
        c.values[P::Budget] = 64;
        c.values[P::Rank] = 1 << 20; // full rank, post keys, every chunk
        VERIFY_CLOSE(att::attend(in, c).y, dense, 1e-10, "full rank, every chunk: dense");
        c = small(att::Method::ShadowKV, 8);
        const att::AttentionResult r = att::attend(in, c);
        for (int64_t b = 0; b < 2; ++b) {
            const int64_t nP = in.valid[b].sum().item<int64_t>() - 1, C = 4, L = 1;
            const int64_t nCh = std::max<int64_t>(0, nP / C - L);
            const int64_t nOut = std::min<int64_t>(1, nCh), nSel = std::min<int64_t>(2, nCh - nOut);
            QVERIFY(r.count[b].eq(nP - nCh * C + 1 + C * (nOut + nSel)).all().item<bool>());
            QVERIFY(r.output("n_chunks")[b].eq(nCh).all().item<bool>());
        }
    }

    void s2_shadowkvKeepsLocalAndPreEqualsPostWithoutRope() {
        const auto in = randomInputs(2, 2, 2, 45, 16, 72);
        att::AttentionConfig c = small(att::Method::ShadowKV, 8);
        const att::AttentionResult post = att::attend(in, c);
        for (int64_t b = 0; b < 2; ++b) {
            const at::Tensor pos = in.valid[b].nonzero().flatten();
            const int64_t nP = pos.numel() - 1, nCh = nP / 4 - 1;
            for (int64_t h = 0; h < 4; ++h) {
                const auto set = setOf(post.indices[b][h]);
                for (int64_t i = nCh * 4; i <= nP; ++i) // the local part and the current token
                    QVERIFY(std::count(set.begin(), set.end(), pos[i].item<int64_t>()) == 1);
                for (int64_t ch : setOf(post.output("outlier_chunks")[b][h]))
                    for (int64_t i = ch * 4; i < ch * 4 + 4; ++i)
                        QVERIFY(std::count(set.begin(), set.end(), pos[i].item<int64_t>()) == 1);
            }
        }
        // pre with K_pre = K and the identity rotation is post.
        att::AttentionInputs x = in;
        x.extra["k_pre"] = in.k;
        x.extra["rope_cos"] = at::ones({2, 45, 16}, at::kDouble);
        x.extra["rope_sin"] = at::zeros({2, 45, 16}, at::kDouble);
        att::setParamValue(c, P::ShadowKeys, "pre");
        VERIFY_CLOSE(att::attend(x, c).y, post.y, 1e-12, "pre without rotation = post");
        // pre from the layer's RoPE (K_pre = rope⁻¹(K)) at full rank: the captured keys again.
        const at::Tensor invFreq = 1.0 / at::pow(10000.0, at::arange(0, 16, 2, at::kDouble) / 16.0);
        c.ropeInvFreq = invFreq;
        c.values[P::Rank] = 1 << 20;
        att::AttentionConfig p = c;
        att::setParamValue(p, P::ShadowKeys, "post");
        VERIFY_CLOSE(att::attend(in, c).y, att::attend(in, p).y, 1e-10,
                     "pre at full rank = post at full rank");
    }

    void s3_shadowkvRankOnlyChangesTheKeys() {
        // The rank changes the rebuilt keys, never the chunks chosen; at Hkv·D the keys are
        // the captured ones again.
        const auto in = randomInputs(1, 2, 2, 60, 16, 73);
        att::AttentionConfig c = small(att::Method::ShadowKV, 8);
        c.values[P::OutlierChunks] = 0;
        att::AttentionConfig exact = c;
        exact.values[P::Rank] = 1 << 20;
        const att::AttentionResult full = att::attend(in, exact);
        for (const int64_t r : {1, 4, 12, 32}) {
            c.values[P::Rank] = static_cast<double>(r);
            const att::AttentionResult res = att::attend(in, c);
            QVERIFY(res.selected.equal(full.selected));
            QCOMPARE(res.output("rank_eff")[0][0].item<int64_t>(), std::min<int64_t>(r, 32));
            if (r == 32)
                VERIFY_CLOSE(res.y, full.y, 1e-10, "rank Hkv·D: the exact keys");
        }
        // Exact attention over the set when the keys are exact.
        const at::Tensor probs = att::attend(in, {}, {.keepScores = true}).probs;
        const at::Tensor w = probs * full.selected;
        const at::Tensor y =
            at::einsum("bhs,bhsd->bhd", {w / w.sum(-1, true), in.v.repeat_interleave(2, 1)});
        VERIFY_CLOSE(full.y, y, 1e-10, "exact attention over the set");
    }

    void s4_shadowkvGroupRules() {
        const auto mha = randomInputs(2, 4, 1, 45, 16, 74);
        std::vector<at::Tensor> ys;
        for (const char* rule : {"max-probs", "sum-probs", "per-head"}) {
            att::AttentionConfig c = small(att::Method::ShadowKV, 8);
            att::setParamValue(c, P::Gqa, rule);
            ys.push_back(att::attend(mha, c).y);
        }
        VERIFY_CLOSE(ys[1], ys[0], 1e-12, "g = 1: sum-probs = max-probs");
        VERIFY_CLOSE(ys[2], ys[0], 1e-12, "g = 1: per-head = max-probs");
        const auto gqa = randomInputs(2, 2, 2, 45, 16, 75);
        for (const char* rule : {"max-probs", "sum-probs"}) {
            att::AttentionConfig c = small(att::Method::ShadowKV, 8);
            att::setParamValue(c, P::Gqa, rule);
            const at::Tensor chunks = att::attend(gqa, c).output("selected_chunks");
            QVERIFY(chunks.select(1, 0).equal(chunks.select(1, 1)));
            QVERIFY(chunks.select(1, 2).equal(chunks.select(1, 3)));
        }
    }

    // ---- RocketKV (METHODS3.md §4)
    // ---------------------------------------------------------------

    void r1_rocketkvLimits() {
        const auto in = randomInputs(2, 2, 2, 40, 16, 81);
        att::AttentionConfig c = small(att::Method::RocketKV, 40);
        c.values[P::PromptBudget] = 40;
        VERIFY_CLOSE(att::attend(in, c).y, att::attend(in, {}).y, 1e-12, "dense");
        // k ≥ k₁: SnapKV with max pooling and the group's votes.
        c.values[P::PromptBudget] = 16;
        c.k = 16;
        att::AttentionConfig s = cfg(att::Method::SnapKV, 16);
        s.kernel = c.kernel;
        s.pooling = att::Pooling::Max;
        const auto a = att::attend(in, c), b = att::attend(in, s);
        QVERIFY(a.selected.equal(b.selected));
        VERIFY_CLOSE(a.y, b.y, 1e-12, "rocketkv k >= k1 = snapkv");
    }

    void r2_r3_rocketkvStageTwo() {
        const auto in = randomInputs(2, 2, 2, 40, 16, 82);
        // c = 1, r = D, k₁ ≥ n_valid: the oracle's top-k, τ = sqrt(D).
        for (const att::GroupSelect gs : {att::GroupSelect::SumProbs, att::GroupSelect::PerHead}) {
            att::AttentionConfig c = small(att::Method::RocketKV, 9);
            c.values[P::PromptBudget] = 40;
            c.values[P::ChunkSize] = 1;
            c.r = 16;
            c.gqa = gs;
            att::AttentionConfig o = cfg(att::Method::Oracle, 9);
            o.gqa = gs;
            const auto a = att::attend(in, c), b = att::attend(in, o);
            QVERIFY(a.selected.equal(b.selected));
            VERIFY_CLOSE(a.output("tau"), at::full_like(a.output("tau"), 4.0), 1e-12, "tau");
        }
        // g = 1: a chunk's score bounds its members' (c = 1) scores; I ⊆ A, |I| = min(k, |A|).
        const auto mha = randomInputs(1, 2, 1, 40, 16, 83);
        att::AttentionConfig c1 = small(att::Method::RocketKV, 9);
        c1.values[P::ChunkSize] = 1;
        c1.r = 6;
        att::AttentionConfig c4 = c1;
        c4.values[P::ChunkSize] = 4;
        const att::AttendOptions keep{.keepScores = true};
        const auto one = att::attend(mha, c1, keep), four = att::attend(mha, c4, keep);
        const at::Tensor finite = at::isfinite(one.zHat);
        QVERIFY(four.zHat.masked_select(finite)
                    .ge(one.zHat.masked_select(finite) - 1e-12)
                    .all()
                    .item<bool>());
        for (int64_t h = 0; h < 2; ++h) {
            const auto kept = setOf(four.output("kept")[0][h]), chosen = setOf(four.indices[0][h]);
            QVERIFY(subset(chosen, kept));
            QCOMPARE(static_cast<int64_t>(chosen.size()), std::min<int64_t>(9, kept.size()));
        }
    }

    // ---- AdaKV (METHODS3.md §5)
    // ------------------------------------------------------------------

    void d1_adakvAlphaOneIsSnapKV() {
        const auto in = randomInputs(2, 2, 2, 40, 16, 91);
        att::AttentionConfig c = small(att::Method::AdaKV, 40);
        VERIFY_CLOSE(att::attend(in, c).y, att::attend(in, {}).y, 1e-12, "k >= n_valid: dense");
        for (const att::GroupSelect gs : {att::GroupSelect::SumProbs, att::GroupSelect::PerHead}) {
            c = small(att::Method::AdaKV, 14);
            c.values[P::Alpha] = 1;
            c.gqa = gs;
            att::AttentionConfig s = cfg(att::Method::SnapKV, 14);
            s.kernel = c.kernel;
            s.gqa = gs;
            const auto a = att::attend(in, c), b = att::attend(in, s);
            QVERIFY(a.selected.equal(b.selected));
            VERIFY_CLOSE(a.y, b.y, 1e-12, "alpha 1 = snapkv");
        }
    }

    void d2_d3_adakvAllocation() {
        // Identical heads: every unit gets B_pre, capacity round(B_pre(1 − α) + ⌊B_pre·α⌋).
        auto in = randomInputs(1, 2, 1, 40, 16, 92);
        in.k.select(1, 1).copy_(in.k.select(1, 0));
        in.qWin.select(1, 1).copy_(in.qWin.select(1, 0));
        in.q.select(1, 1).copy_(in.q.select(1, 0));
        att::AttentionConfig c = small(att::Method::AdaKV, 18); // B_pre = 10
        for (const double alpha : {0.0, 0.25, 0.5, 0.75, 1.0}) {
            c.values[P::Alpha] = alpha;
            const att::AttentionResult r = att::attend(in, c);
            QVERIFY(r.output("alloc").eq(10).all().item<bool>());
            const auto F = static_cast<int64_t>(10 * alpha);
            const auto want = static_cast<int64_t>(std::nearbyint(10 * (1 - alpha) + F));
            QVERIFY2(r.output("capacity").eq(want).all().item<bool>(),
                     qPrintable(QString::number(alpha)));
        }
        // In general: Σ c_U = n_U·B_pre, cap ≤ n_pre, count = cap + w, the window kept.
        const auto gqa = randomInputs(2, 2, 2, 40, 16, 93);
        for (const char* rule : {"sum-probs", "max-probs", "per-head"}) {
            att::AttentionConfig a = small(att::Method::AdaKV, 16);
            att::setParamValue(a, P::Gqa, rule);
            const att::AttentionResult r = att::attend(gqa, a);
            const int64_t units = std::string(rule) == "per-head" ? 4 : 2;
            for (int64_t b = 0; b < 2; ++b) {
                const at::Tensor alloc = r.output("alloc")[b];
                const int64_t total =
                    std::string(rule) == "per-head"
                        ? alloc.sum().item<int64_t>()
                        : alloc.index_select(0, at::tensor({0, 2})).sum().item<int64_t>();
                QCOMPARE(total, units * (16 - 8));
                QVERIFY(r.count[b].equal(r.output("capacity")[b] + 8));
                const at::Tensor pos = gqa.valid[b].nonzero().flatten();
                for (int64_t h = 0; h < 4; ++h) {
                    const auto set = setOf(r.indices[b][h]);
                    for (int64_t i = pos.numel() - 8; i < pos.numel(); ++i)
                        QVERIFY(std::count(set.begin(), set.end(), pos[i].item<int64_t>()) == 1);
                }
            }
        }
    }

    // ---- ties, errors, models
    // ---------------------------------------------------------------------

    void x4_tieRuleOnDuplicatedKeys() {
        // Every key the same: equal scores everywhere, the lower positions win.
        att::AttentionInputs in = randomInputs(1, 1, 1, 24, 8, 94);
        in.k = in.k.select(2, 0).unsqueeze(2).expand({1, 1, 24, 8}).contiguous();
        for (const att::Method m : {att::Method::ExpectedAttention, att::Method::PQCache,
                                    att::Method::AdaKV, att::Method::RocketKV}) {
            att::AttentionConfig c = small(m, 10);
            const att::AttentionResult r = att::attend(in, c);
            const auto set = setOf(r.indices[0][0]);
            // The lowest ranked positions: the set's non-forced part is a prefix.
            QVERIFY2(set.front() == 0, att::methodInfo(m).name);
        }
    }

    void x2_parameterErrors() {
        const auto in = randomInputs(1, 2, 2, 30, 16, 95);
        auto refuses = [&](att::AttentionConfig c, const att::AttentionInputs& x) {
            bool threw = false;
            try {
                c.validateFor(16);
                att::attend(x, c);
            } catch (const att::AttentionError&) {
                threw = true;
            }
            return threw;
        };
        att::AttentionConfig c = small(att::Method::ExpectedAttention, 8);
        att::AttentionInputs noQ = in;
        noQ.extra.clear();
        QVERIFY(refuses(c, noQ));
        c.gqa = att::GroupSelect::SumLogits;
        QVERIFY(refuses(c, in));
        c = small(att::Method::ExpectedAttention, 8);
        QVERIFY_THROWS_EXCEPTION(att::AttentionError, att::setParamValue(c, P::Ratio, "1.5"));
        QVERIFY_THROWS_EXCEPTION(att::AttentionError, att::setParamValue(c, P::Ratio, "nan"));
        c.values[P::Ratio] = 1;
        QVERIFY(refuses(c, in));
        att::AttentionInputs nanQ = in;
        nanQ.extra["q_all"] = in.extra.at("q_all").clone();
        nanQ.extra["q_all"][0][0][5].fill_(std::nan(""));
        QVERIFY_THROWS_EXCEPTION(att::NonFiniteInputError,
                                 att::attend(nanQ, small(att::Method::ExpectedAttention, 8)));
        c = small(att::Method::PQCache, 8);
        c.values[P::PqSubspaces] = 3; // does not divide 16
        QVERIFY(refuses(c, in));
        QVERIFY_THROWS_EXCEPTION(att::AttentionError, att::setParamValue(c, P::PqBits, "17"));
        att::AttentionInputs badCodes = in;
        badCodes.extra["pq_centroids"] = at::zeros({1, 2, 2, 4, 8}, at::kDouble);
        badCodes.extra["pq_codes"] = at::full({1, 2, 2, 30}, 7, at::kLong);
        QVERIFY(refuses(small(att::Method::PQCache, 8), badCodes));
        c = small(att::Method::MagicPIG, 8);
        att::AttentionInputs badW = in;
        badW.extra["hyperplanes"] = at::zeros({16, 5}, at::kDouble);
        QVERIFY(refuses(c, badW));
        QVERIFY_THROWS_EXCEPTION(att::AttentionError, att::setParamValue(c, P::HashBits, "31"));
        c = small(att::Method::ShadowKV, 8);
        c.values[P::Budget] = 6; // not a multiple of the chunk size 4
        QVERIFY(refuses(c, in));
        c = small(att::Method::ShadowKV, 8);
        att::setParamValue(c, P::ShadowKeys, "pre"); // no RoPE known, no tables
        QVERIFY(refuses(c, in));
        c.gqa = att::GroupSelect::SumLogits;
        QVERIFY(refuses(c, in));
        c = small(att::Method::RocketKV, 8);
        c.values[P::PromptBudget] = 4; // below the window of 8
        QVERIFY(refuses(c, in));
        c = small(att::Method::AdaKV, 8);
        c.k = 4;
        QVERIFY(refuses(c, in));
        c = small(att::Method::AdaKV, 8);
        c.kernel = 4;
        QVERIFY(refuses(c, in));
        QVERIFY_THROWS_EXCEPTION(att::AttentionError, att::setParamValue(c, P::Alpha, "1.5"));
        att::AttentionInputs noWin = in;
        noWin.qWin = at::Tensor();
        QVERIFY(refuses(small(att::Method::AdaKV, 8), noWin));
        QVERIFY(refuses(small(att::Method::RocketKV, 8), noWin));
    }

    void shadowkvDefaultsFitTheShape() {
        // §3's defaults (budget 2,048, rank 160, 4 local and 48 outlier chunks) are for long
        // contexts of large models; at S = 230 on keys 4 × 64 wide each one left unset is fitted
        // (rank scaled with the key width, an eighth of the 28 chunks local and outliers, a
        // quarter of the rest as the budget), said in one line each; a user's value stays.
        att::AttentionConfig c;
        c.method = att::Method::ShadowKV;
        const att::ModelShape demo{64, 4, 4, 4};
        const std::vector<std::string> notes = att::fitDefaults(c, 230, demo);
        QCOMPARE(c.integer(P::Rank), int64_t{40});
        QCOMPARE(c.integer(P::LocalChunks), int64_t{3});
        QCOMPARE(c.integer(P::OutlierChunks), int64_t{3});
        QCOMPARE(c.integer(P::Budget), int64_t{40});
        QCOMPARE(notes.size(), size_t{4});
        QVERIFY2(notes[0].rfind("SVD rank 160 → 40", 0) == 0, notes[0].c_str());
        c.checkRanges();
        // It now reads less than dense (the literal §6 formula gave 52× dense's reads before).
        const auto a = att::transferArgs(c, 230, 64, -1, 0);
        QVERIFY(att::transferElements(c.method, a) < att::transferElements(att::Method::Dense, a));
        // Fitting twice changes nothing; given values are the user's.
        att::AttentionConfig again = c;
        QVERIFY(att::fitDefaults(again, 230, demo).empty()); // (all four are set now)
        QVERIFY(again.values == c.values);
        att::AttentionConfig mine;
        mine.method = att::Method::ShadowKV;
        mine.values[P::Rank] = 16;
        mine.values[P::Budget] = 32;
        (void)att::fitDefaults(mine, 230, demo);
        QCOMPARE(mine.integer(P::Rank), int64_t{16});
        QCOMPARE(mine.integer(P::Budget), int64_t{32});
        // Where the defaults fit (S = 65,536, keys 8 × 128), nothing changes; nor for SparQ.
        att::AttentionConfig big;
        big.method = att::Method::ShadowKV;
        QVERIFY(att::fitDefaults(big, 65536, {128, 32, 32, 8}).empty());
        QVERIFY(big.values.empty());
        att::AttentionConfig sparq;
        QVERIFY(att::fitDefaults(sparq, 10, demo).empty());
        // The method runs with what was fitted.
        const auto in = randomInputs(1, 4, 1, 230, 64, 68);
        QVERIFY(att::attend(in, c).y.isfinite().all().item<bool>());
    }

    void causalCompressOnce() {
        // In a model: a prefill whose every position is its own decode step, then one-query
        // steps over the prompt the last position kept and everything after it.
        at::manual_seed(96);
        const int64_t S = 26, D = 16;
        const at::Tensor q = at::randn({1, 4, S, D}, at::kDouble),
                         k = at::randn({1, 2, S, D}, at::kDouble),
                         v = at::randn({1, 2, S, D}, at::kDouble);
        for (const att::Method m :
             {att::Method::ExpectedAttention, att::Method::AdaKV, att::Method::RocketKV}) {
            att::AttentionConfig c = small(m, 12);
            att::CausalState st;
            const at::Tensor pre = att::attendCausal(q.narrow(2, 0, 20), k.narrow(2, 0, 20),
                                                     v.narrow(2, 0, 20), 0, c, &st);
            auto stepAt = [&](int64_t p) {
                att::AttentionInputs one{
                    q.select(2, p), k.narrow(2, 0, p + 1), v.narrow(2, 0, p + 1), {}, {}, {}};
                at::Tensor qWin = at::zeros({1, 4, 8, D}, at::kDouble);
                const int64_t have = std::min<int64_t>(8, p + 1);
                qWin.narrow(2, 8 - have, have).copy_(q.narrow(2, p + 1 - have, have));
                one.qWin = qWin;
                one.extra["q_all"] = q.narrow(2, 0, p + 1);
                return one;
            };
            for (int64_t p : {9, 19})
                VERIFY_CLOSE(pre.select(2, p), att::attend(stepAt(p), c).y, 1e-12,
                             att::methodInfo(m).name);
            // The next step attends to the kept prompt and the new position (RocketKV runs its
            // second stage over them).
            const att::AttentionResult last = att::attend(stepAt(19), c);
            const at::Tensor y = att::attendCausal(q.narrow(2, 20, 1), k.narrow(2, 0, 21),
                                                   v.narrow(2, 0, 21), 20, c, &st);
            QVERIFY(at::isfinite(y).all().item<bool>());
            if (m == att::Method::RocketKV)
                continue;
            att::AttentionConfig dense;
            const at::Tensor z =
                att::causalLogits(q.narrow(2, 20, 1), k.narrow(2, 0, 21), 20, dense);
            const at::Tensor mask =
                at::cat({last.selected, at::ones({1, 4, 1}, at::kBool)}, -1).unsqueeze(2);
            const at::Tensor w = at::softmax(z.masked_fill(mask.logical_not(), -INFINITY), -1);
            const at::Tensor want =
                at::matmul(w.view({1, 2, 2, 21}), v.narrow(2, 0, 21)).view({1, 4, 1, 16});
            VERIFY_CLOSE(y, want, 1e-12, att::methodInfo(m).name);
        }
    }
};

QTEST_GUILESS_MAIN(TestMethods23Invariants)
#include "test_methods23_invariants.moc"
