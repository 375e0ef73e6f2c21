// The deterministic selection of SPARQ.md §2.3 and the position indices of §2.2.

#include "test_support.h"

#include "attention/select.h"

#include <ATen/ATen.h>
#include <QtTest>

#include <limits>

namespace att = sparqlab::attention;

namespace {
at::Tensor longs(std::vector<int64_t> v) {
    return at::tensor(v, at::kLong);
}
at::Tensor bools(std::vector<int64_t> v) {
    return at::tensor(v, at::kLong).to(at::kBool);
}
} // namespace

class TestSelect : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void tiesGoToTheLowerIndex() {
        // [B16] 3 and 1 tie at 2.0: positions 1 and 3; n = 2 picks 0 (5.0) then 1 (lower index).
        const at::Tensor score = at::tensor({5.0, 2.0, 1.0, 2.0}, at::kFloat);
        const att::Selection s =
            att::select(score, bools({1, 1, 1, 1}), bools({0, 0, 0, 0}), at::tensor(int64_t{2}));
        QVERIFY(s.mask.equal(bools({1, 1, 0, 0})));
        QCOMPARE(s.margin.item<float>(), 0.0f); // decided by an exact tie
        QCOMPARE(s.marginRel.item<float>(), 0.0f);
    }

    void nanRanksLast() {
        const float nan = std::numeric_limits<float>::quiet_NaN();
        const at::Tensor score = at::tensor({nan, -1e30f, 3.0f}, at::kFloat);
        const att::Selection s =
            att::select(score, bools({1, 1, 1}), bools({0, 0, 0}), at::tensor(int64_t{2}));
        QVERIFY(s.mask.equal(bools({0, 1, 1})));
    }

    void forcedFirstAndCandidatesOnly() {
        const at::Tensor score = at::tensor({9.0, 8.0, 1.0, 0.5, 7.0}, at::kDouble);
        // Position 0 is not a candidate, position 3 is forced.
        const att::Selection s = att::select(score, bools({0, 1, 1, 1, 1}), bools({0, 0, 0, 1, 0}),
                                             at::tensor(int64_t{3}));
        QVERIFY(s.mask.equal(bools({0, 1, 0, 1, 1})));
        // lo = min over ranked selections {8, 7} = 7, hi = max over unselected candidates {1}.
        QCOMPARE(s.margin.item<double>(), 6.0);
        QCOMPARE(s.marginRel.item<double>(), 6.0 / 7.0);
    }

    void marginInfiniteWhenNothingIsLeftOut() {
        const at::Tensor score = at::tensor({1.0, 2.0}, at::kDouble);
        const att::Selection s =
            att::select(score, bools({1, 1}), bools({0, 0}), at::tensor(int64_t{2}));
        QVERIFY(std::isinf(s.margin.item<double>()));
    }

    void batchedRowsSelectIndependently() {
        const at::Tensor score =
            at::tensor({1.0, 3.0, 2.0, 3.0, 1.0, 2.0}, at::kDouble).view({2, 3});
        const att::Selection s = att::select(score, at::ones({2, 3}, at::kBool),
                                             at::zeros({2, 3}, at::kBool), longs({1, 2}));
        QVERIFY(s.mask.equal(bools({0, 1, 0, 1, 0, 1}).view({2, 3})));
    }

    void topnIndicesAscending() {
        const at::Tensor x = at::tensor({0.5, 4.0, 4.0, -9.0, 3.0}, at::kDouble);
        QVERIFY(att::topnIndices(x, 3).equal(longs({1, 2, 4})));
    }

    void maskToIndicesPads() {
        QVERIFY(att::maskToIndices(bools({0, 1, 0, 1}), 3).equal(longs({1, 3, -1})));
    }

    void causalAndForwardIndexSkipHoles() {
        const at::Tensor valid = bools({0, 1, 1, 0, 1});
        QVERIFY(att::causalIndex(valid).equal(longs({-1, 2, 1, -1, 0})));
        QVERIFY(att::forwardIndex(valid).equal(longs({-1, 0, 1, -1, 2})));
    }
};

QTEST_GUILESS_MAIN(TestSelect)
#include "test_select.moc"
