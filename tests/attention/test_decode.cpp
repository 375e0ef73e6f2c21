// The fast decode path (attention/decode/engine.h) against the reference attend() that the golden
// tests pin down: dense and SparQ, every temperature and GQA rule, local windows, k ≥ S,
// float32/float16/bfloat16 storage, caches filled in pieces and truncated.

#include "test_support.h"

#include "attention/attention.h"
#include "attention/decode/engine.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <QtTest>

using namespace sparqlab;
using attention::AttentionConfig;
using attention::DecodeAttention;
using attention::DecodeCache;
using attention::Method;

namespace {

/// The float32 tolerances of the golden tests (SPARQ.md §8.4).
constexpr double kAtol = 2e-5, kRtol = 1e-4;

struct Inputs {
    at::Tensor q, k, v;
};

/// Heavy-tailed q (as real queries are, §6.2) and K, V with a few large positions.
Inputs randomInputs(int64_t B, int64_t Hq, int64_t Hkv, int64_t S, int64_t D, uint64_t seed) {
    at::manual_seed(seed);
    Inputs in;
    in.q = at::randn({B, Hq, D}) * at::randn({1, 1, D}).abs().pow(2);
    in.k = at::randn({B, Hkv, S, D});
    in.v = at::randn({B, Hkv, S, D});
    return in;
}

at::Tensor fastRun(const Inputs& in, const AttentionConfig& c, at::ScalarType storage,
                   int64_t pieces = 1, at::Tensor* alpha = nullptr) {
    const int64_t S = in.k.size(2);
    DecodeCache cache(in.k.size(0), in.k.size(1), in.k.size(3), S + 3, storage,
                      attention::decodeNeedsDimensionMajor(c) || c.method == Method::Dense);
    const int64_t step = (S + pieces - 1) / pieces;
    for (int64_t s0 = 0; s0 < S; s0 += step) {
        const int64_t n = std::min(step, S - s0);
        cache.append(in.k.narrow(2, s0, n), in.v.narrow(2, s0, n));
        // Quest's pages and Loki's projection: built from what is stored (after the first
        // piece), then kept up to date by the later appends.
        if (s0 == 0)
            attention::prepareDecodeCache(cache, c);
    }
    DecodeAttention engine;
    return engine.run(in.q, cache, c, alpha);
}

/// attend() on the values as the cache stores them (rounded to the storage dtype).
attention::AttentionResult reference(const Inputs& in, const AttentionConfig& c,
                                     at::ScalarType storage) {
    attention::AttentionInputs ai;
    ai.q = in.q;
    ai.k = in.k.to(storage).to(at::kFloat);
    ai.v = in.v.to(storage).to(at::kFloat);
    return attention::attend(ai, c);
}

/// A Loki basis [1, Hkv, D, D]: random orthonormal columns, or (permuted) unit vectors, whose
/// projections are exact in any storage dtype.
std::shared_ptr<attention::Calibration> lokiCalibration(int64_t Hkv, int64_t D, bool orthonormal,
                                                        uint64_t seed) {
    at::manual_seed(seed);
    auto cal = std::make_shared<attention::Calibration>();
    cal->method = Method::Loki;
    if (orthonormal) {
        cal->tensors["basis"] =
            std::get<0>(at::linalg_qr(at::randn({Hkv, D, D}))).unsqueeze(0).contiguous();
    } else {
        std::vector<at::Tensor> heads;
        for (int64_t u = 0; u < Hkv; ++u)
            heads.push_back(at::eye(D).index_select(1, at::randperm(D)));
        cal->tensors["basis"] = at::stack(heads).unsqueeze(0).contiguous();
    }
    return cal;
}

/// Double Sparsity's channels [1, Hq, D]: a random ranking of every channel per query head.
std::shared_ptr<attention::Calibration> dsCalibration(int64_t Hq, int64_t D, uint64_t seed) {
    at::manual_seed(seed);
    auto cal = std::make_shared<attention::Calibration>();
    cal->method = Method::DoubleSparsity;
    std::vector<at::Tensor> heads;
    for (int64_t h = 0; h < Hq; ++h)
        heads.push_back(at::randperm(D));
    cal->tensors["channels"] = at::stack(heads).unsqueeze(0).contiguous();
    return cal;
}

} // namespace

class TestDecode : public QObject {
    Q_OBJECT

    void check(const Inputs& in, const AttentionConfig& c, at::ScalarType storage,
               const QString& what, int64_t pieces = 1) {
        at::Tensor alpha;
        const at::Tensor y = fastRun(in, c, storage, pieces, &alpha);
        const attention::AttentionResult ref = reference(in, c, storage);
        const QString e = test::compareClose(y, ref.y, kAtol, kRtol, what + " y");
        QVERIFY2(e.isEmpty(), qPrintable(e));
        const QString ea = test::compareClose(alpha, ref.alpha, kAtol, kRtol, what + " alpha");
        QVERIFY2(ea.isEmpty(), qPrintable(ea));
    }

private Q_SLOTS:
    void denseEqualsReference_data() {
        QTest::addColumn<int>("B");
        QTest::addColumn<int>("Hq");
        QTest::addColumn<int>("Hkv");
        QTest::addColumn<int>("S");
        QTest::addColumn<int>("D");
        QTest::newRow("mha") << 2 << 4 << 4 << 300 << 64;
        QTest::newRow("gqa4") << 1 << 8 << 2 << 513 << 128;
        QTest::newRow("one position") << 1 << 2 << 1 << 1 << 32;
        QTest::newRow("odd head_dim") << 3 << 6 << 3 << 77 << 40;
        // The half-precision loops' tails (two vectors, one, then element by element): with
        // AVX-512's 16 lanes 56 = 32 + 16 + 8 and 60 = 32 + 16 + 12; with AVX2's 8 lanes
        // (CTest's test_decode_avx2) 56 = 3·16 + 8 and 60 = 3·16 + 8 + 4.
        QTest::newRow("head_dim 56") << 1 << 4 << 2 << 130 << 56;
        QTest::newRow("head_dim 60") << 1 << 2 << 1 << 45 << 60;
    }
    void denseEqualsReference() {
        QFETCH(int, B);
        QFETCH(int, Hq);
        QFETCH(int, Hkv);
        QFETCH(int, S);
        QFETCH(int, D);
        const Inputs in = randomInputs(B, Hq, Hkv, S, D, 11);
        AttentionConfig c;
        c.method = Method::Dense;
        for (const at::ScalarType st : {at::kFloat, at::kHalf, at::kBFloat16})
            check(in, c, st, QStringLiteral("dense %1").arg(c10::toString(st)), 3);
        // libtorch's own dense decode over the same cache agrees as well.
        DecodeCache cache(B, Hkv, D, S, at::kFloat, false);
        cache.append(in.k, in.v);
        const QString e =
            test::compareClose(attention::denseDecodeTorch(in.q, cache),
                               reference(in, c, at::kFloat).y, kAtol, kRtol, "torch dense");
        QVERIFY2(e.isEmpty(), qPrintable(e));
    }

    void sparqEqualsReference_data() {
        QTest::addColumn<int>("Hq");
        QTest::addColumn<int>("Hkv");
        QTest::addColumn<int>("S");
        QTest::addColumn<int>("D");
        QTest::addColumn<int>("r");
        QTest::addColumn<int>("k");
        QTest::addColumn<int>("local");
        QTest::addColumn<QString>("tau");
        QTest::addColumn<QString>("gqa");
        QTest::addColumn<bool>("meanValue");
        QTest::newRow("paper default") << 4 << 4 << 2500 << 128 << 32 << 128 << 0 << "adaptive"
                                       << "sum-probs" << true;
        QTest::newRow("gqa sum-probs local") << 8 << 2 << 700 << 64 << 16 << 64 << 16 << "adaptive"
                                             << "sum-probs" << true;
        QTest::newRow("gqa sum-logits") << 8 << 2 << 700 << 64 << 8 << 32 << 4 << "sqrt-dh"
                                        << "sum-logits" << true;
        QTest::newRow("per-head selection") << 4 << 1 << 400 << 64 << 16 << 40 << 0 << "sqrt-r"
                                            << "per-head" << true;
        QTest::newRow("fixed tau, no mean value") << 2 << 2 << 300 << 32 << 4 << 20 << 2 << "0.7"
                                                  << "sum-probs" << false;
        QTest::newRow("r = D") << 2 << 1 << 200 << 32 << 32 << 50 << 0 << "adaptive"
                               << "sum-probs" << true;
        QTest::newRow("r > D clamps") << 2 << 1 << 200 << 32 << 100 << 50 << 0 << "adaptive"
                                      << "sum-probs" << true;
        QTest::newRow("k >= S") << 2 << 2 << 50 << 64 << 16 << 128 << 8 << "adaptive"
                                << "sum-probs" << true;
        QTest::newRow("local = k") << 2 << 2 << 90 << 64 << 16 << 10 << 10 << "adaptive"
                                   << "sum-probs" << true;
        // Long rows (the threshold selection): one head per KV head ranks on ẑ as step 1 ends,
        // here over two chunks of step 1 and a ragged last block, with a local window.
        QTest::newRow("long row, one head, two chunks")
            << 2 << 2 << 16500 << 32 << 8 << 101 << 13 << "adaptive"
            << "sum-probs" << true;
        QTest::newRow("long row, gqa sum-probs")
            << 4 << 2 << 4100 << 64 << 16 << 200 << 0 << "adaptive"
            << "sum-probs" << true;
        QTest::newRow("long row, gqa sum-logits local")
            << 4 << 2 << 3000 << 32 << 8 << 150 << 20 << "sqrt-dh"
            << "sum-logits" << true;
        QTest::newRow("long row, per-head") << 4 << 1 << 2600 << 32 << 8 << 100 << 0 << "sqrt-r"
                                            << "per-head" << false;
    }
    void sparqEqualsReference() {
        QFETCH(int, Hq);
        QFETCH(int, Hkv);
        QFETCH(int, S);
        QFETCH(int, D);
        QFETCH(int, r);
        QFETCH(int, k);
        QFETCH(int, local);
        QFETCH(QString, tau);
        QFETCH(QString, gqa);
        QFETCH(bool, meanValue);
        const Inputs in = randomInputs(2, Hq, Hkv, S, D, 7 + static_cast<uint64_t>(S));
        AttentionConfig c;
        c.method = Method::Sparq;
        c.r = r;
        c.k = k;
        c.local = local;
        c.tau = attention::parseTauMode(tau.toStdString(), &c.tauValue);
        c.gqa = attention::parseGroupSelect(gqa.toStdString());
        c.meanValue = meanValue;
        for (const at::ScalarType st : {at::kFloat, at::kHalf, at::kBFloat16})
            check(in, c, st, QStringLiteral("sparq %1").arg(c10::toString(st)), 2);
    }

    void sparqLongRowTiesKeepTheLowerPositions_data() {
        QTest::addColumn<int>("Hq");
        QTest::newRow("one head per KV head (ranked on logits)") << 2;
        QTest::newRow("two heads per KV head (ranked on summed probabilities)") << 4;
    }
    /// Keys repeated with period 97 tie every score 31 times: the selection of a long row
    /// (the threshold pass, past 2048 positions, with a ragged tail) must cut the last tied
    /// group at its lowest positions as the reference does (SPARQ.md §2.3).
    void sparqLongRowTiesKeepTheLowerPositions() {
        QFETCH(int, Hq);
        const int64_t S = 3001;
        Inputs in = randomInputs(1, Hq, 2, S, 64, 11);
        const at::Tensor period = at::randn({1, 2, 97, 64});
        in.k = period.index_select(2, at::arange(S) % 97).contiguous();
        AttentionConfig c;
        c.method = Method::Sparq;
        c.r = 16;
        c.k = 128;
        check(in, c, at::kFloat, QStringLiteral("tied keys"));
        // The check above can tell a wrong cut only if y depends on which members of the tied
        // group are kept: keeping one more of them (k = 129) must change it (V differs at every
        // position).
        AttentionConfig wider = c;
        wider.k = 129;
        const at::Tensor a = fastRun(in, c, at::kFloat), b = fastRun(in, wider, at::kFloat);
        QVERIFY(!at::allclose(a, b, kRtol, kAtol));
    }

    /// The local window (forced in) holds the largest scores, as recent tokens often do, and
    /// covers every strided block of the threshold selection (l = 150 > W = 2·(k − l) = 100):
    /// the threshold must come from the ranked positions alone, or no candidate is left.
    void sparqLocalWindowWithTheLargestScores() {
        const int64_t S = 3000, l = 150;
        Inputs in = randomInputs(2, 2, 2, S, 32, 17);
        in.k.narrow(2, S - l, l)
            .copy_(in.q.unsqueeze(2).expand({2, 2, l, 32}) * 0.5 + 0.1 * at::randn({2, 2, l, 32}));
        AttentionConfig c;
        c.method = Method::Sparq;
        c.r = 8;
        c.k = 200;
        c.local = l;
        check(in, c, at::kFloat, QStringLiteral("local window on top"));
    }

    /// A row whose approximate scores put all of ŝ on one position: every other ŝ underflows
    /// to 0 in float32, so the reference ranks them as ties, by lower position (SPARQ.md §2.3),
    /// and not by ẑ. K at position 7 is large in q's 4 largest components (those SparQ
    /// reads), ẑ gap > 160, and cancels in the other 28, so its exact logit is ordinary and y
    /// depends on which of the others are kept.
    void sparqUnderflowedRowRanksLikeTheReference() {
        const int64_t S = 3000, D = 32;
        Inputs in = randomInputs(1, 1, 1, S, D, 21);
        in.q = at::ones({1, 1, D});
        in.q.narrow(2, 0, 4).fill_(10.0f);
        at::Tensor k7 = in.k[0][0][7];
        k7.narrow(0, 0, 4).fill_(20.0f);
        k7.narrow(0, 4, D - 4).fill_(-28.5f);
        AttentionConfig c;
        c.method = Method::Sparq;
        c.r = 4;
        c.k = 100;
        attention::AttendOptions keep;
        keep.keepScores = true;
        attention::AttentionInputs ai;
        ai.q = in.q;
        ai.k = in.k;
        ai.v = in.v;
        const attention::AttentionResult ref = attention::attend(ai, c, keep);
        // The premise: ŝ is one-hot, and the reference keeps positions 0 … 99 (7 among them).
        QCOMPARE(ref.sHat[0][0][7].item<float>(), 1.0f);
        QCOMPARE(ref.sHat[0][0].gt(0).sum().item<int64_t>(), int64_t{1});
        QCOMPARE(ref.indices[0][0][99].item<int64_t>(), int64_t{99});
        check(in, c, at::kFloat, QStringLiteral("underflowed row"));
    }

    void methodsEqualReference_data() {
        QTest::addColumn<QString>("method");
        QTest::addColumn<int>("Hq");
        QTest::addColumn<int>("Hkv");
        QTest::addColumn<int>("S");
        QTest::addColumn<int>("D");
        QTest::addColumn<int>("r");
        QTest::addColumn<int>("k");
        QTest::addColumn<int>("local");
        QTest::addColumn<QString>("gqa");
        QTest::addColumn<int>("page");
        QTest::addColumn<double>("p");
        // Quest: pages of 16 (the last one ragged), forced pages of the local window, GQA
        // rules, a page size that divides nothing, k ≥ S.
        QTest::newRow("quest mha")
            << "quest" << 4 << 4 << 1000 << 64 << 0 << 128 << 0 << "sum-probs" << 16 << 0.0;
        QTest::newRow("quest gqa local")
            << "quest" << 8 << 2 << 777 << 64 << 0 << 96 << 24 << "sum-probs" << 16 << 0.0;
        QTest::newRow("quest sum-logits")
            << "quest" << 4 << 2 << 500 << 32 << 0 << 60 << 5 << "sum-logits" << 7 << 0.0;
        QTest::newRow("quest per-head")
            << "quest" << 4 << 1 << 600 << 32 << 0 << 64 << 0 << "per-head" << 8 << 0.0;
        QTest::newRow("quest k >= S")
            << "quest" << 2 << 2 << 90 << 32 << 0 << 200 << 0 << "sum-probs" << 16 << 0.0;
        QTest::newRow("quest long row")
            << "quest" << 2 << 2 << 17000 << 32 << 0 << 128 << 0 << "sum-probs" << 4 << 0.0;
        // Loki (orthonormal basis: float32 only; unit vectors: every dtype, see lokiFloat16).
        QTest::newRow("loki mha") << "loki" << 4 << 4 << 900 << 64 << 16 << 64 << 0 << "sum-probs"
                                  << 0 << 0.0;
        QTest::newRow("loki gqa local")
            << "loki" << 8 << 2 << 3000 << 64 << 32 << 128 << 16 << "sum-probs" << 0 << 0.0;
        QTest::newRow("loki per-head")
            << "loki" << 4 << 2 << 500 << 32 << 5 << 40 << 0 << "per-head" << 0 << 0.0;
        QTest::newRow("loki sum-logits r = D")
            << "loki" << 4 << 2 << 300 << 32 << 32 << 50 << 4 << "sum-logits" << 0 << 0.0;
        // Double Sparsity: each head's own channels.
        QTest::newRow("double-sparsity mha")
            << "double-sparsity" << 4 << 4 << 900 << 64 << 16 << 64 << 0 << "sum-probs" << 0 << 0.0;
        QTest::newRow("double-sparsity gqa local") << "double-sparsity" << 8 << 2 << 3000 << 64
                                                   << 32 << 128 << 16 << "sum-probs" << 0 << 0.0;
        QTest::newRow("double-sparsity per-head")
            << "double-sparsity" << 4 << 2 << 500 << 32 << 3 << 40 << 0 << "per-head" << 0 << 0.0;
        // The top-p budgets: a variable count per head, capped at k, at least the local window.
        QTest::newRow("oracle-top-p")
            << "oracle-top-p" << 4 << 4 << 800 << 64 << 0 << 4000 << 0 << "sum-probs" << 0 << 0.9;
        QTest::newRow("oracle-top-p capped gqa local")
            << "oracle-top-p" << 8 << 2 << 1200 << 64 << 0 << 50 << 8 << "sum-probs" << 0 << 0.5;
        QTest::newRow("oracle-top-p per-head")
            << "oracle-top-p" << 4 << 2 << 500 << 32 << 0 << 4000 << 0 << "per-head" << 0 << 0.7;
        QTest::newRow("oracle-top-p p = 1")
            << "oracle-top-p" << 2 << 2 << 300 << 32 << 0 << 100 << 4 << "sum-logits" << 0 << 1.0;
        QTest::newRow("sparq-top-p")
            << "sparq-top-p" << 4 << 4 << 800 << 64 << 16 << 4000 << 0 << "sum-probs" << 0 << 0.9;
        QTest::newRow("sparq-top-p gqa local")
            << "sparq-top-p" << 8 << 2 << 2000 << 64 << 8 << 300 << 16 << "sum-probs" << 0 << 0.8;
        QTest::newRow("sparq-top-p per-head")
            << "sparq-top-p" << 4 << 1 << 700 << 32 << 8 << 4000 << 0 << "per-head" << 0 << 0.6;
    }
    /// Quest, Loki, Double Sparsity and the top-p budgets in the decode engine against attend()
    /// (METHODS.md §3–6), in every storage dtype, the cache filled in two pieces.
    void methodsEqualReference() {
        QFETCH(QString, method);
        QFETCH(int, Hq);
        QFETCH(int, Hkv);
        QFETCH(int, S);
        QFETCH(int, D);
        QFETCH(int, r);
        QFETCH(int, k);
        QFETCH(int, local);
        QFETCH(QString, gqa);
        QFETCH(int, page);
        QFETCH(double, p);
        const Inputs in = randomInputs(2, Hq, Hkv, S, D, 31 + static_cast<uint64_t>(S));
        AttentionConfig c;
        c.method = attention::parseMethod(method.toStdString());
        if (r > 0)
            c.r = r;
        c.k = k;
        c.local = local;
        c.gqa = attention::parseGroupSelect(gqa.toStdString());
        if (page > 0)
            c.pageSize = page;
        if (p > 0)
            c.p = p;
        if (c.method == Method::Loki)
            c.calibration = lokiCalibration(Hkv, D, true, 5);
        if (c.method == Method::DoubleSparsity)
            c.calibration = dsCalibration(Hq, D, 6);
        QVERIFY(attention::decodeSupports(c));
        for (const at::ScalarType st : {at::kFloat, at::kHalf, at::kBFloat16}) {
            if (c.method == Method::Loki && st != at::kFloat)
                continue; // the projection rounds differently from attend(): lokiHalfStorage
            check(in, c, st, QStringLiteral("%1 %2").arg(method, c10::toString(st)), 2);
        }
    }

    /// A small step runs on one thread (decode/engine.h: one per kDecodeBytesPerThread read);
    /// every thread woken (setBytesPerThread(0)) computes the same y and α bit for bit: the
    /// threads take (batch row, KV head) tasks, each with its own workspace.
    void threadsDoNotChangeTheResult() {
        if (at::get_num_threads() < 2)
            QSKIP("one intra-op thread: no second thread to compare with");
        const int64_t B = 2, Hq = 8, Hkv = 4, S = 200, D = 32;
        const Inputs in = randomInputs(B, Hq, Hkv, S, D, 41);
        for (const char* name : {"dense", "sparq", "quest", "loki", "double-sparsity",
                                 "oracle-top-p", "sparq-top-p"}) {
            AttentionConfig c;
            c.method = attention::parseMethod(name);
            c.r = 8;
            c.k = 24;
            c.pageSize = 8;
            if (c.method == Method::OracleTopP || c.method == Method::SparqTopP)
                c.p = 0.8;
            if (c.method == Method::Loki)
                c.calibration = lokiCalibration(Hkv, D, true, 5);
            if (c.method == Method::DoubleSparsity)
                c.calibration = dsCalibration(Hq, D, 6);
            DecodeCache cache(B, Hkv, D, S, at::kFloat, true);
            cache.append(in.k, in.v);
            attention::prepareDecodeCache(cache, c);
            // Below one thread's share even for dense: 2·S·D + 2·D floats per (row, KV head).
            QVERIFY((2 * S * D + 2 * D) * B * Hkv * 4 < attention::kDecodeBytesPerThread);
            DecodeAttention one, every;
            every.setBytesPerThread(0);
            at::Tensor alphaOne, alphaEvery;
            const at::Tensor yOne = one.run(in.q, cache, c, &alphaOne);
            const at::Tensor yEvery = every.run(in.q, cache, c, &alphaEvery);
            QVERIFY2(at::equal(yOne, yEvery), name);
            QVERIFY2(at::equal(alphaOne, alphaEvery), name);
        }
    }

    /// Loki over half-precision storage: with a basis of unit vectors the stored projection
    /// is exactly the stored keys' coordinates, so the engine must match attend() exactly.
    void lokiHalfStorage() {
        const Inputs in = randomInputs(1, 8, 2, 2500, 64, 41);
        AttentionConfig c;
        c.method = Method::Loki;
        c.r = 16;
        c.k = 100;
        c.local = 8;
        c.calibration = lokiCalibration(2, 64, false, 3);
        for (const at::ScalarType st : {at::kHalf, at::kBFloat16})
            check(in, c, st, QStringLiteral("loki unit basis %1").arg(c10::toString(st)), 3);
    }

    /// The pages and the projection follow appends and truncation, and another page size or
    /// basis rebuilds them.
    void pagesAndProjectionFollowTheCache() {
        const Inputs in = randomInputs(1, 2, 2, 100, 16, 43);
        DecodeCache cache(1, 2, 16, 100);
        cache.append(in.k.narrow(2, 0, 37), in.v.narrow(2, 0, 37));
        cache.enablePages(8);
        cache.append(in.k.narrow(2, 37, 30), in.v.narrow(2, 37, 30));
        cache.truncate(50);
        cache.append(in.k.narrow(2, 90, 3), in.v.narrow(2, 90, 3));
        const at::Tensor kept = at::cat({in.k.narrow(2, 0, 50), in.k.narrow(2, 90, 3)}, 2);
        QCOMPARE(cache.length(), int64_t{53});
        for (int64_t pi = 0; pi < 7; ++pi) {
            const int64_t n = std::min<int64_t>(8, 53 - pi * 8);
            const at::Tensor page = kept.narrow(2, pi * 8, n);
            QVERIFY2(test::compareClose(cache.pageMin().select(2, pi), page.amin(2), 0).isEmpty(),
                     qPrintable(QStringLiteral("min of page %1").arg(pi)));
            QVERIFY2(test::compareClose(cache.pageMax().select(2, pi), page.amax(2), 0).isEmpty(),
                     qPrintable(QStringLiteral("max of page %1").arg(pi)));
        }
        cache.enablePages(5); // another size: rebuilt
        QVERIFY(test::compareClose(cache.pageMax().select(2, 10), kept.narrow(2, 50, 3).amax(2), 0)
                    .isEmpty());
        const auto cal = lokiCalibration(2, 16, true, 8);
        cache.setProjection(cal->tensor("basis")[0]);
        cache.append(in.k.narrow(2, 95, 2), in.v.narrow(2, 95, 2));
        const at::Tensor all = at::cat({kept, in.k.narrow(2, 95, 2)}, 2);
        const at::Tensor want =
            at::matmul(all, cal->tensor("basis")[0].unsqueeze(0)).transpose(2, 3);
        QVERIFY(test::compareClose(cache.projectedStorage().narrow(3, 0, 55), want, 1e-5, 1e-5)
                    .isEmpty());
    }

    /// A top-p budget with p = 1 and k ≥ S keeps everything: the exact oracle is dense.
    void oracleTopPWithEverythingIsDense() {
        const Inputs in = randomInputs(1, 4, 2, 333, 64, 45);
        AttentionConfig c;
        c.method = Method::OracleTopP;
        c.p = 1.0;
        c.k = AttentionConfig::kNoCap;
        const at::Tensor y = fastRun(in, c, at::kFloat);
        const at::Tensor yd = fastRun(in, AttentionConfig{}, at::kFloat);
        QVERIFY(test::compareClose(y, yd, kAtol, kRtol).isEmpty());
    }

    void sparqWithFullRankAndKIsDense() {
        // SPARQ.md invariant: r = D and k = S select everything, α = 1, y = dense.
        const Inputs in = randomInputs(1, 4, 2, 333, 64, 3);
        AttentionConfig sp;
        sp.method = Method::Sparq;
        sp.r = 64;
        sp.k = 333;
        AttentionConfig dense;
        at::Tensor alpha;
        const at::Tensor ys = fastRun(in, sp, at::kFloat, 1, &alpha);
        const at::Tensor yd = fastRun(in, dense, at::kFloat);
        QVERIFY(test::compareClose(ys, yd, kAtol, kRtol).isEmpty());
        QVERIFY(test::compareClose(alpha, at::ones_like(alpha), 1e-5).isEmpty());
    }

    void explicitScale() {
        const Inputs in = randomInputs(1, 2, 2, 100, 32, 5);
        AttentionConfig c;
        c.method = Method::Sparq;
        c.r = 8;
        c.k = 16;
        c.scale = 0.05;
        check(in, c, at::kFloat, "sparq scale");
        c.method = Method::Dense;
        check(in, c, at::kFloat, "dense scale");
    }

    void cacheTruncateAndMean() {
        const Inputs in = randomInputs(2, 2, 2, 64, 16, 9);
        DecodeCache cache(2, 2, 16, 64);
        cache.append(in.k, in.v);
        cache.truncate(40);
        QCOMPARE(cache.length(), int64_t{40});
        const at::Tensor want = in.v.narrow(2, 0, 40).mean(2);
        QVERIFY(test::compareClose(cache.meanValue(), want, 1e-6, 1e-6).isEmpty());
        QVERIFY(
            test::compareClose(cache.keysT(), in.k.narrow(2, 0, 40).transpose(2, 3), 0).isEmpty());
        // After truncation the next append lands at position 40.
        cache.append(in.k.narrow(2, 63, 1), in.v.narrow(2, 63, 1));
        QVERIFY(test::compareClose(cache.keys().select(2, 40), in.k.select(2, 63), 0).isEmpty());
    }

    /// CTest runs this file a second and a third time with SPARQLAB_ISA=avx2 and baseline, so
    /// that the narrower hand-written versions are checked against the reference on this machine
    /// too: those runs must really use them.
    void kernelIsaHonoursTheCap() {
        QString want = QStringLiteral("baseline"); // the CPU's widest, then the cap
#if defined(__x86_64__) && defined(__GNUC__)
        if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
            __builtin_cpu_supports("f16c"))
            want = QString::fromLatin1(__builtin_cpu_supports("avx512f") ? "avx512" : "avx2");
#endif
        const QByteArray cap = qgetenv("SPARQLAB_ISA");
        if (cap == "baseline")
            want = QStringLiteral("baseline");
        else if (cap == "avx2" && want == QStringLiteral("avx512"))
            want = QStringLiteral("avx2");
        QCOMPARE(QString::fromLatin1(attention::decodeKernelIsa()), want);
    }

    void methods23EqualReference_data() {
        QTest::addColumn<QString>("method");
        QTest::addColumn<int>("Hq");
        QTest::addColumn<int>("Hkv");
        QTest::addColumn<int>("S");
        QTest::addColumn<int>("D");
        QTest::addColumn<int>("k");
        QTest::addColumn<QString>("gqa");
        QTest::addColumn<QString>("extra"); // "option=value …"
        QTest::newRow("pqcache mha") << "pqcache" << 4 << 4 << 700 << 64 << 96 << "sum-probs"
                                     << "sink=8 pq-bits=5";
        QTest::newRow("pqcache gqa sum-logits")
            << "pqcache" << 8 << 2 << 900 << 64 << 128 << "sum-logits"
            << "pq-subspaces=4";
        QTest::newRow("pqcache per-head") << "pqcache" << 4 << 2 << 500 << 32 << 40 << "per-head"
                                          << "sink=2 pq-bits=4";
        QTest::newRow("pqcache k >= S") << "pqcache" << 2 << 2 << 90 << 32 << 200 << "sum-probs"
                                        << "";
        QTest::newRow("magicpig") << "magicpig" << 4 << 4 << 800 << 64 << 0 << "sum-probs"
                                  << "hash-bits=8 hash-tables=40";
        QTest::newRow("magicpig gqa") << "magicpig" << 8 << 2 << 1200 << 64 << 0 << "sum-probs"
                                      << "hash-bits=6 hash-tables=24 sink=4 local=17";
        QTest::newRow("magicpig all exact") << "magicpig" << 2 << 2 << 60 << 32 << 0 << "sum-probs"
                                            << "local=100";
        QTest::newRow("shadowkv mha") << "shadowkv" << 4 << 4 << 900 << 64 << 0 << "max-probs"
                                      << "budget=128 rank=48 outlier-chunks=8";
        QTest::newRow("shadowkv gqa sum-probs")
            << "shadowkv" << 8 << 2 << 1000 << 64 << 0 << "sum-probs"
            << "budget=64 chunk-size=4 rank=32";
        QTest::newRow("shadowkv per-head") << "shadowkv" << 4 << 2 << 600 << 32 << 0 << "per-head"
                                           << "budget=48 rank=24 local-chunks=2";
        QTest::newRow("shadowkv no chunks") << "shadowkv" << 2 << 2 << 30 << 32 << 0 << "max-probs"
                                            << "";
        QTest::newRow("rocketkv") << "rocketkv" << 4 << 4 << 800 << 64 << 64 << "sum-probs"
                                  << "prompt-budget=256 chunk-size=2 r=16";
        QTest::newRow("rocketkv gqa per-head")
            << "rocketkv" << 8 << 2 << 1000 << 64 << 40 << "per-head"
            << "prompt-budget=300 chunk-size=3";
        QTest::newRow("rocketkv token budget")
            << "rocketkv" << 4 << 2 << 2000 << 64 << 0 << "sum-probs"
            << "token-budget=128";
    }
    /// PQCache, MagicPIG, ShadowKV and RocketKV's second stage in the decode engine against
    /// attend() (METHODS2.md, METHODS3.md): their state made from the cache's keys (RocketKV's
    /// first stage given as attend() kept it), in every storage dtype.
    void methods23EqualReference() {
        QFETCH(QString, method);
        QFETCH(int, Hq);
        QFETCH(int, Hkv);
        QFETCH(int, S);
        QFETCH(int, D);
        QFETCH(int, k);
        QFETCH(QString, gqa);
        QFETCH(QString, extra);
        const Inputs in = randomInputs(2, Hq, Hkv, S, D, 71 + static_cast<uint64_t>(S));
        AttentionConfig c = attention::defaultConfig(attention::parseMethod(method.toStdString()));
        if (k > 0)
            c.k = k;
        c.gqa = attention::parseGroupSelect(gqa.toStdString());
        for (const QString& kv : extra.split(QLatin1Char(' '), Qt::SkipEmptyParts)) {
            const QStringList parts = kv.split(QLatin1Char('='));
            for (const auto& p : attention::parameters())
                if (parts[0] == QLatin1String(p.option))
                    attention::setParamValue(c, p.id, parts[1].toStdString());
        }
        QVERIFY(attention::decodeSupports(c));
        // RocketKV: the window's queries (random, the decode query last) for its first stage.
        at::Tensor qWin = at::randn({2, Hq, c.snapWindow, D});
        qWin.select(2, c.snapWindow - 1).copy_(in.q);
        for (const at::ScalarType st : {at::kFloat, at::kHalf, at::kBFloat16}) {
            attention::AttentionInputs ai;
            ai.q = in.q;
            ai.k = in.k.to(st).to(at::kFloat);
            ai.v = in.v.to(st).to(at::kFloat);
            ai.qWin = qWin;
            const attention::AttentionResult ref = attention::attend(ai, c);
            DecodeCache cache(2, Hkv, D, S + 3, st, false);
            cache.append(in.k, in.v);
            if (c.method == Method::RocketKV) { // its first stage's kept set, per KV head
                const at::Tensor idx = ref.output("kept").index_select(
                    1, at::arange(Hkv, at::kLong) * (Hq / Hkv)); // [B, Hkv, W]
                at::Tensor kept = at::zeros({2, Hkv, S + 1}, at::kBool);
                kept.scatter_(-1, at::where(idx.ge(0), idx, at::full_like(idx, S)), true);
                cache.setInput("rocketkv_kept", kept.narrow(-1, 0, S).contiguous());
            }
            attention::prepareDecodeCache(cache, c);
            DecodeAttention engine;
            const at::Tensor y = engine.run(in.q, cache, c);
            const QString e = test::compareClose(
                y, ref.y, kAtol, kRtol,
                QStringLiteral("%1 %2 y").arg(QString::fromUtf8(QTest::currentDataTag()),
                                              QString::fromStdString(c10::toString(st))));
            QVERIFY2(e.isEmpty(), qPrintable(e));
        }
        // A cache that grew since: the state is made again (not read stale).
        DecodeCache cache(2, Hkv, D, S + 3, at::kFloat, false);
        cache.append(in.k.narrow(2, 0, S - 2), in.v.narrow(2, 0, S - 2));
        attention::prepareDecodeCache(cache, c);
        cache.append(in.k.narrow(2, S - 2, 2), in.v.narrow(2, S - 2, 2));
        DecodeAttention engine;
        if (c.method != Method::RocketKV)
            QVERIFY_THROWS_EXCEPTION(attention::AttentionError, engine.run(in.q, cache, c));
    }

    void rejectsBadInput() {
        DecodeCache cache(1, 2, 16, 8);
        const at::Tensor k = at::randn({1, 2, 9, 16});
        QVERIFY_THROWS_EXCEPTION(attention::AttentionError, cache.append(k, k)); // over capacity
        QVERIFY_THROWS_EXCEPTION(attention::AttentionError,
                                 cache.append(at::randn({1, 3, 2, 16}), at::randn({1, 3, 2, 16})));
        at::Tensor bad = at::randn({1, 2, 2, 16});
        bad[0][0][1][3] = std::numeric_limits<float>::quiet_NaN();
        QVERIFY_THROWS_EXCEPTION(attention::AttentionError, cache.append(bad, bad));
        DecodeAttention engine;
        AttentionConfig c;
        QVERIFY_THROWS_EXCEPTION(attention::AttentionError,
                                 engine.run(at::randn({1, 2, 16}), cache, c)); // empty cache
        cache.append(at::randn({1, 2, 4, 16}), at::randn({1, 2, 4, 16}));
        QVERIFY_THROWS_EXCEPTION(attention::AttentionError,
                                 engine.run(at::randn({1, 3, 16}), cache, c)); // 3 % 2 ≠ 0
        c.method = Method::H2O;
        QVERIFY(!attention::decodeSupports(c));
        QVERIFY_THROWS_EXCEPTION(attention::AttentionError,
                                 engine.run(at::randn({1, 2, 16}), cache, c));
        // Loki without its basis, Quest on a cache without its pages, r beyond head_dim.
        c.method = Method::Loki;
        QVERIFY(!attention::decodeSupports(c));
        QVERIFY_THROWS_EXCEPTION(attention::AttentionError,
                                 engine.run(at::randn({1, 2, 16}), cache, c));
        c.calibration = lokiCalibration(2, 16, true, 1);
        QVERIFY_THROWS_EXCEPTION(attention::AttentionError,
                                 engine.run(at::randn({1, 2, 16}), cache, c)); // not projected
        c.r = 17;
        QVERIFY_THROWS_EXCEPTION(attention::AttentionError,
                                 attention::prepareDecodeCache(cache, c));
        c = AttentionConfig{};
        c.method = Method::Quest;
        QVERIFY_THROWS_EXCEPTION(attention::AttentionError,
                                 engine.run(at::randn({1, 2, 16}), cache, c)); // no pages
        c.pageSize = 0;
        QVERIFY_THROWS_EXCEPTION(attention::AttentionError,
                                 attention::prepareDecodeCache(cache, c));
        QVERIFY_THROWS_EXCEPTION(attention::AttentionError, DecodeCache(1, 1, 16, 4, at::kDouble));
    }
};

QTEST_GUILESS_MAIN(TestDecode)
#include "test_decode.moc"
