// The decode engine's device path (decodeOnDevice, attention/decode/torch.cpp: what runs on a
// CUDA cache for the methods without CUDA kernels) against the CPU kernels (DecodeAttention::run)
// on the same cache: called on a CPU cache, its libtorch operations run on the CPU, over the state
// the methods' prepareCache made (PQCache's codebook, MagicPIG's tables, ShadowKV's landmarks and
// factors, RocketKV's kept set), so both must compute the same y and α.

#include "test_support.h"

#include "attention/attention.h"
#include "attention/decode/engine.h"
#include "attention/method_table.h"

#include <ATen/ATen.h>
#include <QtTest>

using namespace sparqlab;
using attention::AttentionConfig;
using attention::DecodeAttention;
using attention::DecodeCache;
using attention::Method;

namespace {

/// The float32 tolerances of the golden tests (SPARQ.md §8.4).
constexpr double kAtol = 2e-5, kRtol = 1e-4;

/// `c` with the options of "option=value …" set.
void setOptions(AttentionConfig& c, const QString& options) {
    for (const QString& kv : options.split(QLatin1Char(' '), Qt::SkipEmptyParts)) {
        const QStringList parts = kv.split(QLatin1Char('='));
        bool known = false;
        for (const auto& p : attention::parameters())
            if (parts[0] == QLatin1String(p.option)) {
                attention::setParamValue(c, p.id, parts[1].toStdString());
                known = true;
            }
        if (parts[0] == QLatin1String("gqa")) {
            c.gqa = attention::parseGroupSelect(parts[1].toStdString());
            known = true;
        }
        QVERIFY2(known, qPrintable(QStringLiteral("unknown option ") + parts[0]));
    }
}

/// max |a − b| / max |b| (0 when both vanish).
double relError(const at::Tensor& a, const at::Tensor& b) {
    const double num = (a.to(at::kDouble) - b.to(at::kDouble)).abs().max().item<double>();
    const double den = b.to(at::kDouble).abs().max().item<double>();
    return den > 0 ? num / den : num;
}

} // namespace

class TestDecodeDevicePath : public QObject {
    Q_OBJECT

    double m_worst = 0; // the largest relative error of y over every case

private Q_SLOTS:
    void deviceEqualsKernel_data() {
        QTest::addColumn<QString>("method");
        QTest::addColumn<int>("Hq");
        QTest::addColumn<int>("Hkv");
        QTest::addColumn<int>("S");
        QTest::addColumn<QString>("storage");
        QTest::addColumn<QString>("options"); // beyond the method's defaults
        QTest::addColumn<bool>("givenKept");  // RocketKV: a kept set as the cache's input
        struct Shape {
            int Hq, Hkv, S;
        };
        const Shape shapes[] = {{4, 2, 300}, {4, 4, 300}, {4, 2, 1000}, {4, 4, 1000}};
        // Each method's defaults with a sparse budget (ShadowKV's 48 outlier chunks leave no
        // chunk to rank at S = 300, so fewer there).
        const auto opts = [](const QString& m, int S) -> QString {
            if (m == QLatin1String("pqcache"))
                return S < 500 ? QStringLiteral("k=64") : QStringLiteral("k=128");
            if (m == QLatin1String("shadowkv"))
                return S < 500 ? QStringLiteral("budget=64 outlier-chunks=8")
                               : QStringLiteral("budget=128");
            if (m == QLatin1String("rocketkv"))
                return S < 500 ? QStringLiteral("prompt-budget=128 k=32") : QStringLiteral("k=64");
            if (m == QLatin1String("dense"))
                return QString();
            if (m == QLatin1String("sparq"))
                return QStringLiteral("k=32 r=16");
            return QString(); // magicpig: its budget varies
        };
        for (const char* m : {"dense", "sparq", "pqcache", "magicpig", "shadowkv", "rocketkv"})
            for (const Shape& s : shapes) {
                const QString method = QString::fromLatin1(m);
                const QString o = opts(method, s.S);
                for (const char* st : {"float32", "float16"}) {
                    if (QLatin1String(st) == QLatin1String("float16") && s.S > 500)
                        continue; // float16 at the short length
                    QTest::addRow("%s Hq=%d Hkv=%d S=%d %s", m, s.Hq, s.Hkv, s.S, st)
                        << method << s.Hq << s.Hkv << s.S << QString::fromLatin1(st) << o << false;
                }
            }
        // Beyond the defaults: every GQA rule, more sampling, lossy factors, bfloat16, the
        // token budget, a kept set given as the cache's input (as test_decode gives it).
        QTest::newRow("pqcache sum-logits m=4 b=5") << "pqcache" << 8 << 2 << 1000 << "float32"
                                                    << "k=96 gqa=sum-logits pq-subspaces=4 "
                                                       "pq-bits=5"
                                                    << false;
        QTest::newRow("pqcache per-head bfloat16") << "pqcache" << 4 << 2 << 300 << "bfloat16"
                                                   << "k=40 gqa=per-head sink=2" << false;
        QTest::newRow("pqcache 16 bits") << "pqcache" << 2 << 1 << 300 << "float32"
                                         << "k=64 pq-bits=16 pq-iters=2" << false;
        QTest::newRow("magicpig 6 bits 24 tables")
            << "magicpig" << 4 << 2 << 1000 << "float32"
            << "hash-bits=6 hash-tables=24 sink=4 local=17" << false;
        QTest::newRow("magicpig 6 bits float16") << "magicpig" << 4 << 4 << 300 << "float16"
                                                 << "hash-bits=6 hash-tables=40" << false;
        QTest::newRow("magicpig all exact") << "magicpig" << 4 << 2 << 60 << "float32"
                                            << "local=100" << false;
        QTest::newRow("shadowkv sum-probs rank 24")
            << "shadowkv" << 4 << 2 << 1000 << "float32"
            << "budget=64 chunk-size=4 rank=24 gqa=sum-probs" << false;
        QTest::newRow("shadowkv per-head")
            << "shadowkv" << 4 << 2 << 600 << "float32"
            << "budget=48 rank=24 local-chunks=2 outlier-chunks=8 gqa=per-head" << false;
        QTest::newRow("shadowkv no chunks") << "shadowkv" << 4 << 2 << 30 << "float32"
                                            << "" << false;
        QTest::newRow("rocketkv per-head chunk 3")
            << "rocketkv" << 4 << 2 << 1000 << "float32"
            << "prompt-budget=300 chunk-size=3 k=40 gqa=per-head" << false;
        QTest::newRow("rocketkv token budget") << "rocketkv" << 4 << 2 << 1000 << "float32"
                                               << "token-budget=128" << false;
        QTest::newRow("rocketkv given kept") << "rocketkv" << 4 << 2 << 1000 << "float32"
                                             << "prompt-budget=256 k=64" << true;
        QTest::newRow("rocketkv given kept float16 per-head")
            << "rocketkv" << 4 << 4 << 300 << "float16"
            << "prompt-budget=100 k=24 gqa=per-head" << true;
    }

    void deviceEqualsKernel() {
        QFETCH(QString, method);
        QFETCH(int, Hq);
        QFETCH(int, Hkv);
        QFETCH(int, S);
        QFETCH(QString, storage);
        QFETCH(QString, options);
        QFETCH(bool, givenKept);
        constexpr int64_t B = 2, D = 64;
        AttentionConfig c = attention::defaultConfig(attention::parseMethod(method.toStdString()));
        setOptions(c, options);
        QVERIFY(attention::decodeSupports(c));
        const at::ScalarType st = storage == QLatin1String("float16")    ? at::kHalf
                                  : storage == QLatin1String("bfloat16") ? at::kBFloat16
                                                                         : at::kFloat;
        at::manual_seed(1234 + S + 7 * Hkv);
        // Heavy-tailed q (as real queries are), K and V of standard normals.
        const at::Tensor q = at::randn({B, Hq, D}) * at::randn({1, 1, D}).abs().pow(2);
        const at::Tensor k = at::randn({B, Hkv, S, D}), v = at::randn({B, Hkv, S, D});
        DecodeCache cache(B, Hkv, D, S + 3, st,
                          attention::decodeNeedsDimensionMajor(c) || c.method == Method::Dense);
        cache.append(k, v);
        if (givenKept) { // a random first-stage set of prompt-budget positions per KV head
            const int64_t k1 = std::min<int64_t>(c.integer(attention::Param::PromptBudget), S);
            const at::Tensor order =
                at::rand({B, Hkv, S}).argsort(/*dim=*/int64_t{-1}).narrow(-1, 0, k1);
            const at::Tensor kept = at::zeros({B, Hkv, S}, at::kBool).scatter_(-1, order, true);
            cache.setInput("rocketkv_kept", kept);
        }
        // As the engine's owner does (bench.cpp: RocketKV's kept set then the last k₁ positions).
        attention::prepareDecodeCache(cache, c);

        DecodeAttention engine;
        at::Tensor alphaCpu, alphaDev;
        const at::Tensor yCpu = engine.run(q, cache, c, &alphaCpu);
        const double scale = c.scale ? *c.scale : 1.0 / std::sqrt(static_cast<double>(D));
        const at::Tensor yDev = attention::decodeOnDevice(q, cache, c, scale, &alphaDev);
        QCOMPARE(yDev.sizes(), yCpu.sizes());
        QVERIFY(alphaDev.defined());
        const double err = relError(yDev, yCpu);
        m_worst = std::max(m_worst, err);
        qInfo("%s: max relative error of y %.3g, of alpha %.3g", QTest::currentDataTag(), err,
              relError(alphaDev, alphaCpu));
        const QString what = QString::fromUtf8(QTest::currentDataTag());
        QVERIFY2(err <= kRtol, qPrintable(what + QStringLiteral(": relative error %1").arg(err)));
        const QString e = test::compareClose(yDev, yCpu, kAtol, kRtol, what + " y");
        QVERIFY2(e.isEmpty(), qPrintable(e));
        const QString ea = test::compareClose(alphaDev, alphaCpu, kAtol, kRtol, what + " alpha");
        QVERIFY2(ea.isEmpty(), qPrintable(ea));
    }

    /// The device path reads the prepared state and says so when it is missing (a cache that grew
    /// since), as the kernel does.
    void deviceNeedsThePreparedState() {
        for (const char* m : {"pqcache", "magicpig", "shadowkv", "rocketkv"}) {
            AttentionConfig c = attention::defaultConfig(attention::parseMethod(m));
            setOptions(c, QStringLiteral("k=32"));
            at::manual_seed(5);
            DecodeCache cache(1, 2, 32, 300, at::kFloat, false);
            cache.append(at::randn({1, 2, 200, 32}), at::randn({1, 2, 200, 32}));
            attention::prepareDecodeCache(cache, c);
            cache.append(at::randn({1, 2, 1, 32}), at::randn({1, 2, 1, 32}));
            const at::Tensor q = at::randn({1, 4, 32});
            QVERIFY_THROWS_EXCEPTION(attention::AttentionError,
                                     attention::decodeOnDevice(q, cache, c, 0.125, nullptr));
            attention::prepareDecodeCache(cache, c);
            DecodeAttention engine;
            const at::Tensor y = engine.run(q, cache, c);
            const at::Tensor yDev =
                attention::decodeOnDevice(q, cache, c, 1 / std::sqrt(32.0), nullptr);
            QVERIFY2(relError(yDev, y) <= kRtol, m);
        }
    }

    /// The named inputs the device path gives attend() are checked like a file's.
    void givenStateIsChecked() {
        at::manual_seed(9);
        attention::AttentionInputs in;
        in.q = at::randn({1, 4, 32});
        in.k = at::randn({1, 2, 100, 32});
        in.v = at::randn({1, 2, 100, 32});
        {
            AttentionConfig c = attention::defaultConfig(Method::RocketKV);
            attention::AttentionInputs bad = in;
            bad.extra["rocketkv_kept"] = at::ones({1, 2, 99}, at::kBool);
            QVERIFY_THROWS_EXCEPTION(attention::AttentionError, attention::attend(bad, c));
            bad.extra["rocketkv_kept"] = at::ones({1, 2, 100}, at::kBool); // everything kept
            c.k = 100;
            const attention::AttentionResult all = attention::attend(bad, c);
            attention::AttentionConfig dense;
            SPARQLAB_VERIFY_CLOSE(all.y, attention::attend(in, dense).y, kAtol, "rocketkv all");
        }
        {
            AttentionConfig c = attention::defaultConfig(Method::MagicPIG);
            attention::AttentionInputs bad = in;
            bad.extra["key_codes"] = at::zeros({1, 2, 150, 100}); // floats
            QVERIFY_THROWS_EXCEPTION(attention::AttentionError, attention::attend(bad, c));
            bad.extra["key_codes"] = at::zeros({1, 2, 149, 100}, at::kLong);
            QVERIFY_THROWS_EXCEPTION(attention::AttentionError, attention::attend(bad, c));
        }
        {
            AttentionConfig c = attention::defaultConfig(Method::ShadowKV);
            setOptions(c, QStringLiteral("budget=16 outlier-chunks=2"));
            attention::AttentionInputs bad = in;
            bad.extra["landmarks"] = at::zeros({1, 2, 7, 32}); // 8 chunks: 99 / 8 − 4
            bad.extra["outlier_mask"] = at::zeros({1, 2, 7}, at::kBool);
            QVERIFY_THROWS_EXCEPTION(attention::AttentionError, attention::attend(bad, c));
            bad.extra.erase("outlier_mask");
            QVERIFY_THROWS_EXCEPTION(attention::AttentionError, attention::attend(bad, c));
            bad.extra.erase("landmarks");
            bad.extra["svd_a"] = at::zeros({1, 99, 4});
            bad.extra["svd_vt"] = at::zeros({1, 4, 63});
            QVERIFY_THROWS_EXCEPTION(attention::AttentionError, attention::attend(bad, c));
            bad.extra["svd_vt"] = at::full({1, 4, 64}, std::numeric_limits<float>::quiet_NaN());
            QVERIFY_THROWS_EXCEPTION(attention::AttentionError, attention::attend(bad, c));
        }
    }

    void cleanupTestCase() { qInfo("largest relative error of y over the cases: %.3g", m_worst); }
};

QTEST_GUILESS_MAIN(TestDecodeDevicePath)
#include "test_decode_device_path.moc"
