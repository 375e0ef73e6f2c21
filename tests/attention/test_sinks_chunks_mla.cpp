// Attention sinks, chunked attention and a value dimension of its own (MLA) through every
// method (docs/sinks-chunks-nope-mla.md): dense attention with sinks is Hugging Face's
// (softmax over the keys and the sink, the sink's probability dropped); with k ≥ S every method
// equals dense-with-sink; with the sink logit at −∞ every method equals its sink-free result;
// SparQ's α counts the sink and its v̄ stays the mean over real positions; no method reaches
// outside the query's chunk; every method runs with d_v ≠ d_qk and, at full budget, is dense.

#include "method_inputs.h"
#include "test_support.h"

#include "attention/attention.h"
#include "attention/budget_stats.h"
#include "attention/causal.h"
#include "attention/method_table.h"

#include <ATen/ATen.h>
#include <QtTest>

#include <cmath>

namespace att = sparqlab::attention;
using namespace sparqlab::test;

#define VERIFY_CLOSE SPARQLAB_VERIFY_CLOSE

namespace {

QString nameOf(const att::AttentionConfig& c) {
    return QString::fromUtf8(att::methodInfo(c.method).name);
}

/// Runs `c` on `in`, failing the test with the method's name on an exception.
att::AttentionResult run(const att::AttentionInputs& in, const att::AttentionConfig& c,
                         const att::AttendOptions& o = {}) {
    try {
        return att::attend(in, c, o);
    } catch (const std::exception& e) { // the test reports it, with the method's name
        throw std::runtime_error(nameOf(c).toStdString() + ": " + e.what());
    }
}

/// Dense attention with sinks by hand (float64): exp(z_j) / (Σ exp(z_i) + exp(sink_h)) over the
/// valid keys, the sink's value zero.
at::Tensor denseWithSinkByHand(const att::AttentionInputs& in, const at::Tensor& sinks) {
    const int64_t g = in.q.size(1) / in.k.size(1);
    const at::Tensor K = in.k.repeat_interleave(g, 1), V = in.v.repeat_interleave(g, 1);
    const double scale = 1.0 / std::sqrt(static_cast<double>(in.q.size(2)));
    const at::Tensor z = at::einsum("bhd,bhsd->bhs", {in.q, K}) * scale;
    const at::Tensor e = at::where(in.valid.unsqueeze(1), z.exp(), at::zeros_like(z));
    const at::Tensor den = e.sum(-1, true) + sinks.view({1, -1, 1}).exp();
    return at::einsum("bhs,bhsd->bhd", {e / den, V});
}

/// Every method with a budget that keeps every valid key (top-p: p = 1, TOVA: a cache of S).
std::vector<att::AttentionConfig> everyMethodAtFullBudget(const att::AttentionInputs& in) {
    const int64_t S = in.k.size(2);
    std::vector<att::AttentionConfig> all = everyMethod(in, S + 1);
    for (att::AttentionConfig& c : all) {
        c.p = 1.0;
        c.snapWindow = 8;
        // Budgets that are not k: MagicPIG's exact window, ShadowKV's local chunks.
        if (c.method == att::Method::MagicPIG)
            c.local = S;
        if (c.method == att::Method::ShadowKV)
            c.values[att::Param::LocalChunks] = static_cast<double>(S);
    }
    return all;
}

} // namespace

class TestSinksChunksMla : public QObject {
    Q_OBJECT
private Q_SLOTS:
    // ---- attention sinks -----------------------------------------------------------------------

    void sinks1_denseIsHuggingFacesSoftmaxWithSink() {
        const auto in = randomInputs(2, 2, 2, 30, 16, 41);
        att::AttentionConfig c;
        c.sinks = at::tensor({1.5, -0.5, 3.0, 0.2}, at::kDouble);
        att::AttendOptions keep;
        keep.keepScores = true;
        const att::AttentionResult r = att::attend(in, c, keep);
        VERIFY_CLOSE(r.y, denseWithSinkByHand(in, c.sinks), 1e-12, "dense with sinks");
        // The probabilities of the real keys sum to one less the sink's share; the mass kept
        // counts the sink (every method keeps it): 1.
        const at::Tensor rows = r.probs.sum(-1);
        QVERIFY(rows.lt(1 - 1e-3).all().item<bool>());
        VERIFY_CLOSE(r.mass, at::ones_like(r.mass), 1e-12, "dense mass with the sink");
        // The row maximum is taken over the sink too: a sink far above every logit stays finite.
        c.sinks = at::full({4}, 700.0, at::kDouble);
        const att::AttentionResult big = att::attend(in, c);
        QVERIFY(at::isfinite(big.y).all().item<bool>());
        QVERIFY(big.y.abs().max().item<double>() < 1e-100);
    }

    void sinks2_everyMethodAtFullBudgetIsDenseWithSink() {
        auto in = withAcc(randomInputs(2, 2, 2, 30, 16, 42));
        att::AttentionConfig dense;
        dense.sinks = at::tensor({2.0, -1.0, 0.5, 4.0}, at::kDouble);
        const at::Tensor want = att::attend(in, dense).y;
        VERIFY_CLOSE(want, denseWithSinkByHand(in, dense.sinks), 1e-12, "dense");
        for (att::AttentionConfig c : everyMethodAtFullBudget(in)) {
            c.sinks = dense.sinks;
            if (c.method == att::Method::Sparq || c.method == att::Method::SparqTopP)
                c.r = 3; // a poor estimate: α must still be 1 when every key is chosen
            const att::AttentionResult r = run(in, c);
            VERIFY_CLOSE(r.y, want, 1e-10, qPrintable(nameOf(c) + " at k >= S"));
            if (r.mass.defined())
                VERIFY_CLOSE(r.mass, at::ones_like(r.mass), 1e-10, qPrintable(nameOf(c)));
            VERIFY_CLOSE(r.alpha, at::ones_like(r.alpha), 1e-10, qPrintable(nameOf(c) + " α"));
        }
    }

    void sinks3_aSinkAtMinusInfinityChangesNothing() {
        const auto in = withAcc(randomInputs(2, 2, 2, 30, 16, 43));
        for (att::AttentionConfig c : everyMethod(in, 9)) {
            att::AttendOptions keep;
            keep.keepScores = true;
            const att::AttentionResult plain = run(in, c, keep);
            c.sinks = at::full({4}, -1e4, at::kDouble); // exp underflows to exactly 0
            const att::AttentionResult sunk = run(in, c, keep);
            VERIFY_CLOSE(sunk.y, plain.y, 1e-12, qPrintable(nameOf(c) + " y"));
            QVERIFY2(sunk.selected.equal(plain.selected), qPrintable(nameOf(c) + " selection"));
            VERIFY_CLOSE(sunk.alpha, plain.alpha, 1e-12, qPrintable(nameOf(c) + " α"));
            if (plain.mass.defined())
                VERIFY_CLOSE(sunk.mass, plain.mass, 1e-12, qPrintable(nameOf(c) + " mass"));
        }
    }

    void sinks4_sparqAlphaCountsTheSinkMeanValueDoesNot() {
        const auto in = randomInputs(1, 2, 2, 40, 16, 44);
        att::AttentionConfig s = cfg(att::Method::Sparq, 6);
        s.r = 4;
        s.gqa = att::GroupSelect::PerHead;
        s.components = att::ComponentSelect::PerHead;
        s.sinks = at::tensor({1.0, 2.5, -2.0, 0.0}, at::kDouble);
        att::AttendOptions keep;
        keep.keepScores = true;
        const att::AttentionResult r = att::attend(in, s, keep);
        // ŝ over the keys and the sink (by hand from ẑ); α = ŝ over the chosen keys + ŝ_sink.
        const at::Tensor e = r.zHat.exp();
        const at::Tensor den = e.sum(-1, true) + s.sinks.view({1, 4, 1}).exp();
        VERIFY_CLOSE(r.sHat, e / den, 1e-12, "ŝ with the sink");
        const at::Tensor sinkShare = s.sinks.view({1, 4}).exp() / den.squeeze(-1);
        VERIFY_CLOSE(r.alpha, (r.sHat * r.selected).sum(-1) + sinkShare, 1e-12, "α with the sink");
        VERIFY_CLOSE(r.meanV, in.v.mean(2), 1e-12, "v̄: the mean over real positions");
        const at::Tensor vbar = r.meanV.repeat_interleave(2, 1);
        const at::Tensor a = r.alpha.unsqueeze(-1);
        VERIFY_CLOSE(r.y, a * r.yTopk + (1 - a) * vbar, 1e-12, "Eq. 10 with the sink");
        // y_topk renormalises over the chosen keys and the sink.
        const int64_t g = 2;
        const at::Tensor K = in.k.repeat_interleave(g, 1), V = in.v.repeat_interleave(g, 1);
        const at::Tensor z = at::einsum("bhd,bhsd->bhs", {in.q, K}) / 4.0;
        const at::Tensor ez = at::where(r.selected, z.exp(), at::zeros_like(z));
        const at::Tensor w = ez / (ez.sum(-1, true) + s.sinks.view({1, 4, 1}).exp());
        VERIFY_CLOSE(r.yTopk, at::einsum("bhs,bhsd->bhd", {w, V}), 1e-12, "y_topk with the sink");
    }

    void sinks5_causalDenseAndTheTopPBudget() {
        at::manual_seed(45);
        const int64_t S = 20;
        const at::Tensor q = at::randn({1, 4, S, 8}, at::kDouble) * 2,
                         k = at::randn({1, 2, S, 8}, at::kDouble),
                         v = at::randn({1, 2, S, 8}, at::kDouble);
        att::AttentionConfig c;
        c.sinks = at::tensor({0.5, 1.0, 1.5, 2.0}, at::kDouble);
        // The model's path (all queries at once) = one decode step per position.
        const at::Tensor y = att::attendCausal(q, k, v, 0, c);
        const at::Tensor probs = att::causalProbabilities(q, k, 0, c);
        for (int64_t t = 0; t < S; t += 7) {
            att::AttentionInputs one{
                q.select(2, t), k, v, at::arange(S).le(t).unsqueeze(0), {}, {}};
            VERIFY_CLOSE(y.select(2, t), att::attend(one, c).y, 1e-12, "causal dense with sinks");
            att::AttendOptions keep;
            keep.keepScores = true;
            VERIFY_CLOSE(probs.select(2, t), att::attend(one, c, keep).probs, 1e-12,
                         "causal probabilities");
        }
        // Top-p: the sink's share counts towards p: a sink holding more than p leaves one key.
        att::AttentionInputs last{q.select(2, S - 1), k, v, {}, {}, {}};
        att::AttentionConfig t;
        t.method = att::Method::OracleTopP;
        t.k = S;
        t.p = 0.5;
        t.gqa = att::GroupSelect::PerHead;
        t.sinks = at::full({4}, 30.0, at::kDouble);
        QCOMPARE(att::attend(last, t).count.max().item<int64_t>(), int64_t{1});
        // k_mass counts it alike.
        const att::KMass km = att::kMass(last.q, k, {}, {0.5}, t);
        QCOMPARE(km.count.max().item<int64_t>(), int64_t{1});
    }

    // ---- chunked attention ---------------------------------------------------------------------

    void chunk1_denseIsSoftmaxOverTheQuerysChunk() {
        const auto in = randomInputs(1, 2, 2, 40, 16, 46);
        att::AttentionConfig c;
        c.chunk = 16; // the query sits at 39: its chunk is 32..39
        const at::Tensor inChunk = at::arange(40).ge(32).view({1, 1, 40});
        const att::AttentionResult r = att::attend(in, c);
        const at::Tensor K = in.k.repeat_interleave(2, 1), V = in.v.repeat_interleave(2, 1);
        const at::Tensor z = at::einsum("bhd,bhsd->bhs", {in.q, K}) / 4.0;
        const at::Tensor w = at::softmax(z.masked_fill(inChunk.logical_not(), -INFINITY), -1);
        VERIFY_CLOSE(r.y, at::einsum("bhs,bhsd->bhd", {w, V}), 1e-12, "dense in a chunk");
        // The model's causal mask is the same: position 39 sees 32..39, position 31 sees 16..31.
        const at::Tensor z2 =
            att::causalLogits(in.q.unsqueeze(2).expand({1, 4, 2, 16}), in.k, 38, c);
        QVERIFY(at::isfinite(z2.select(2, 1)).eq(inChunk.squeeze(1)).all().item<bool>());
        QVERIFY(at::isfinite(z2.select(2, 0))
                    .eq(at::arange(40).ge(32).logical_and(at::arange(40).le(38)))
                    .all()
                    .item<bool>());
        // A chunk as long as the sequence changes nothing.
        c.chunk = 64;
        VERIFY_CLOSE(att::attend(in, c).y, att::attend(in, {}).y, 1e-12, "one chunk");
    }

    void chunk2_everyMethodStaysInTheChunk() {
        const auto in = withAcc(randomInputs(2, 2, 2, 40, 16, 47));
        // The last position is 39: with C = 20 its chunk is 20..39 (the holes of row 1 lie
        // before it).
        const at::Tensor chunk = at::arange(40).ge(20).view({1, 1, 40});
        att::AttentionConfig d;
        d.chunk = 20;
        const at::Tensor dense = att::attend(in, d).y;
        for (att::AttentionConfig c : everyMethod(in, 8)) {
            c.chunk = 20;
            const att::AttentionResult r = run(in, c);
            QVERIFY2(!r.selected.logical_and(chunk.logical_not()).any().item<bool>(),
                     qPrintable(nameOf(c) + " chose a key outside the chunk"));
            QVERIFY2(r.count.le(20).all().item<bool>(), qPrintable(nameOf(c)));
            // A budget of the whole chunk: dense over the chunk.
            att::AttentionConfig full = c;
            full.k = 21;
            full.p = 1.0;
            // Budgets that are not k: MagicPIG's exact window, ShadowKV's local chunks,
            // RocketKV's first stage.
            if (full.method == att::Method::MagicPIG)
                full.local = 21;
            if (full.method == att::Method::ShadowKV)
                full.values[att::Param::LocalChunks] = 21;
            if (full.method == att::Method::RocketKV)
                full.values[att::Param::PromptBudget] = 21;
            VERIFY_CLOSE(run(in, full).y, dense, 1e-10, qPrintable(nameOf(c) + " at k > C"));
        }
        att::AttentionConfig s = cfg(att::Method::Sparq, 4);
        s.chunk = 20;
        VERIFY_CLOSE(att::attend(in, s).meanV, in.v.narrow(2, 20, 20).mean(2), 1e-12,
                     "v̄ over the chunk");
    }

    // ---- a value dimension of its own (MLA)
    // ------------------------------------------------------

    void mla1_everyMethodWithAValueDimensionOfItsOwn() {
        auto in = withAcc(randomInputs(2, 2, 2, 30, 24, 48));
        in.v = at::randn({2, 2, 30, 10}, at::kDouble) + 0.5; // d_v = 10, d_qk = 24
        const at::Tensor dense = att::attend(in, {}).y;
        QCOMPARE(dense.sizes(), (at::IntArrayRef{2, 4, 10}));
        const at::Tensor K = in.k.repeat_interleave(2, 1), V = in.v.repeat_interleave(2, 1);
        const at::Tensor z = at::einsum("bhd,bhsd->bhs", {in.q, K}) / std::sqrt(24.0);
        const at::Tensor w =
            at::softmax(z.masked_fill(in.valid.unsqueeze(1).logical_not(), -INFINITY), -1);
        VERIFY_CLOSE(dense, at::einsum("bhs,bhsd->bhd", {w, V}), 1e-12, "dense with d_v != d_qk");
        for (att::AttentionConfig c : everyMethod(in, 9)) {
            const att::AttentionResult r = run(in, c);
            QCOMPARE(r.y.sizes(), (at::IntArrayRef{2, 4, 10}));
            QVERIFY2(at::isfinite(r.y).all().item<bool>(), qPrintable(nameOf(c)));
        }
        for (att::AttentionConfig c : everyMethodAtFullBudget(in))
            VERIFY_CLOSE(run(in, c).y, dense, 1e-10, qPrintable(nameOf(c) + " at k >= S"));
        // The causal driver (the model's path, every method through attendCausal).
        at::manual_seed(3);
        const at::Tensor q = at::randn({1, 4, 12, 24}, at::kDouble),
                         k = at::randn({1, 2, 12, 24}, at::kDouble),
                         v = at::randn({1, 2, 12, 10}, at::kDouble);
        att::AttentionConfig sparq = cfg(att::Method::Sparq, 4);
        sparq.r = 8;
        QCOMPARE(att::attendCausal(q, k, v, 0, sparq).sizes(), (at::IntArrayRef{1, 4, 12, 10}));
        QCOMPARE(att::attendCausal(q, k, v, 0, {}).sizes(), (at::IntArrayRef{1, 4, 12, 10}));
        att::AttentionConfig h2o = cfg(att::Method::H2O, 4, 1);
        QCOMPARE(att::attendCausal(q, k, v, 0, h2o).sizes(), (at::IntArrayRef{1, 4, 12, 10}));
    }

    void errors() {
        const auto in = randomInputs(1, 2, 2, 10, 8, 49);
        att::AttentionConfig c;
        c.sinks = at::zeros({3}, at::kDouble);
        QVERIFY_THROWS_EXCEPTION(att::AttentionError, att::attend(in, c));
        c.sinks = at::tensor({0.0, 1.0, NAN, 2.0}, at::kDouble);
        QVERIFY_THROWS_EXCEPTION(att::AttentionError, att::attend(in, c));
        att::AttentionConfig n;
        n.chunk = -1;
        QVERIFY_THROWS_EXCEPTION(att::AttentionError, att::attend(in, n));
        att::AttentionInputs bad = in;
        bad.v = at::randn({1, 2, 9, 8}, at::kDouble);
        QVERIFY_THROWS_EXCEPTION(att::AttentionError, att::attend(bad, {}));
    }
};

QTEST_GUILESS_MAIN(TestSinksChunksMla)
#include "test_sinks_chunks_mla.moc"
