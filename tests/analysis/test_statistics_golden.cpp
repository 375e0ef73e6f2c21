// The statistics of SPARQ.md §6 against ../shared/refs/sparq/golden.h5: every case's stats/
// group (L = 1) and the three-layer stats_L3 case, within the float64 tolerances of §8.4.

#include "test_support.h"

#include "analysis/statistics.h"
#include "capture/h5.h"

#include <ATen/ATen.h>
#include <QtTest>

#include <limits>

#include <memory>

using namespace sparqlab;
namespace an = sparqlab::analysis;

namespace {
#define VERIFY_CLOSE(a, b, atol, rtol, what)                                                       \
    do {                                                                                           \
        const QString _e = sparqlab::test::compareClose((a), (b), (atol), (rtol), (what));         \
        QVERIFY2(_e.isEmpty(), qPrintable(_e));                                                    \
    } while (0)
} // namespace

class TestStatisticsGolden : public QObject {
    Q_OBJECT
    std::unique_ptr<h5::File> m_file;

private Q_SLOTS:
    void initTestCase() {
        const QString path =
            sparqlab::test::requireReference(QStringLiteral("refs/sparq/golden.h5"));
        m_file = std::make_unique<h5::File>(h5::File::openRead(path.toStdString()));
    }

    void statistics_data() {
        QTest::addColumn<QString>("group");
        for (const std::string& c : m_file->root().group("cases").children())
            QTest::newRow(c.c_str()) << QString::fromStdString("cases/" + c);
        // The many-layer cases (stats_L3 in the file shown); tests/data's compact golden.h5 has
        // none (2.4 MB): a row that says so.
        const bool any = m_file->root().has("stats_cases");
        for (const std::string& c :
             any ? m_file->root().group("stats_cases").children() : std::vector<std::string>{})
            QTest::newRow(c.c_str()) << QString::fromStdString("stats_cases/" + c);
        if (!any)
            QTest::newRow("stats_L3") << QStringLiteral("stats_cases/stats_L3");
    }

    void statistics() {
        QFETCH(QString, group);
        SPARQLAB_SKIP_UNLESS(m_file->root().has(group.toStdString()),
                             "refs/sparq/golden.h5: " + group);
        const h5::Group g = m_file->root().group(group.toStdString());
        const h5::Group in = g.group("inputs"), st = g.group("stats");
        at::Tensor q = in.read("q"), K = in.read("K"), V = in.read("V");
        if (q.dim() == 3) { // a decode case: add the layer axis
            q = q.unsqueeze(1);
            K = K.unsqueeze(1);
            V = V.unsqueeze(1);
        }
        const at::Tensor valid = in.read("valid").to(at::kBool);
        const int64_t L = q.size(1);
        const std::vector<int64_t> covK{16, 32, 64}, agR{8, 16, 32}, agK{16, 32, 64},
            alR{8, 16, 32}, alK{16, 64, 128};
        const at::Tensor COV = st.read("coverage"), AG = st.read("topk_agreement"),
                         AGM = st.read("topk_agreement_margin_rel"), AA = st.read("alpha_approx"),
                         AT = st.read("alpha_true");
        const an::AgreementMethod methods[4] = {
            an::AgreementMethod::TopR, an::AgreementMethod::FirstR, an::AgreementMethod::LastR,
            an::AgreementMethod::RandomProj};
        const attention::TauMode taus[4] = {attention::TauMode::Adaptive,
                                            attention::TauMode::SqrtDh, attention::TauMode::SqrtR,
                                            attention::TauMode::One};
        std::vector<std::vector<std::vector<at::Tensor>>> approx(
            4, std::vector<std::vector<at::Tensor>>(3, std::vector<at::Tensor>(3)));
        std::vector<at::Tensor> trueAlpha(3);
        for (int64_t l = 0; l < L; ++l) {
            const at::Tensor ql = q.select(1, l), kl = K.select(1, l);
            const QString w = group + QStringLiteral(" layer %1").arg(l);
            for (size_t i = 0; i < 3; ++i)
                VERIFY_CLOSE(an::coverage(ql, kl, valid, covK[i]), COV[i].select(1, l), 1e-12, 0,
                             w + " coverage");
            for (int m = 0; m < 4; ++m)
                for (size_t ri = 0; ri < 3; ++ri)
                    for (size_t ki = 0; ki < 3; ++ki) {
                        const at::Tensor proj =
                            m == 3 ? in.read("proj_r" + std::to_string(agR[ri])) : at::Tensor();
                        at::Tensor mr;
                        const at::Tensor a = an::topkAgreement(ql, kl, valid, agR[ri], agK[ki],
                                                               methods[m], proj, &mr);
                        const at::Tensor want = AG[m][ri][ki].select(1, l);
                        // Exact where the golden selection is not decided by a near-tie (§8.4).
                        const at::Tensor decided = AGM[m][ri][ki].select(1, l).ge(1e-9);
                        const at::Tensor diff = (a - want).abs().gt(1e-12).logical_and(decided);
                        QVERIFY2(!diff.any().item<bool>(),
                                 qPrintable(w + QStringLiteral(" agreement method %1 r=%2 k=%3")
                                                    .arg(m)
                                                    .arg(agR[ri])
                                                    .arg(agK[ki])));
                    }
            for (size_t ki = 0; ki < 3; ++ki)
                for (size_t ri = 0; ri < 3; ++ri)
                    for (int t = 0; t < 4; ++t) {
                        const auto [at_, aa] =
                            an::alphaAgreement(ql, kl, valid, alR[ri], alK[ki], taus[t]);
                        VERIFY_CLOSE(aa, AA[t][ri][ki].select(1, l), 1e-12, 0, w + " alpha_approx");
                        VERIFY_CLOSE(at_, AT[ki].select(1, l), 1e-12, 0, w + " alpha_true");
                        approx[t][ri][ki] = l == 0
                                                ? aa.unsqueeze(1)
                                                : at::cat({approx[t][ri][ki], aa.unsqueeze(1)}, 1);
                        if (t == 0 && ri == 0)
                            trueAlpha[ki] = l == 0 ? at_.unsqueeze(1)
                                                   : at::cat({trueAlpha[ki], at_.unsqueeze(1)}, 1);
                    }
        }
        // RMSE over (b, l, h) of α_approx − α_true.
        const at::Tensor RMSE = st.read("alpha_rmse");
        for (int t = 0; t < 4; ++t)
            for (size_t ri = 0; ri < 3; ++ri)
                for (size_t ki = 0; ki < 3; ++ki) {
                    const double rmse =
                        (approx[t][ri][ki] - trueAlpha[ki]).pow(2).mean().sqrt().item<double>();
                    QVERIFY(std::abs(rmse - RMSE[t][ri][ki].item<double>()) < 1e-12);
                }
        // Kurtosis and z-mass pool over examples × head_dim: q [B, L, Hq, D] → [L, Hq].
        VERIFY_CLOSE(an::kurtosis(q), st.read("kurtosis"), 0, 1e-10, group + " kurtosis");
        VERIFY_CLOSE(an::zmassRatio(q), st.read("zmass_ratio"), 0, 1e-12, group + " zmass");
        VERIFY_CLOSE(an::zmassRatioNotebook(q), st.read("zmass_ratio_notebook"), 0, 1e-12,
                     group + " zmass notebook");
        // η on V [B, L, Hkv, S, D] restricted to the valid tail.
        const at::Tensor tail = an::validTail(V, valid);
        const at::Tensor eta = st.read("eta"), excess = st.read("eta_excess");
        for (int64_t a = 0; a < 5; ++a) {
            const auto [e, x] = an::correlationRatio(tail, a);
            QVERIFY2(std::abs(e - eta[a].item<double>()) < 1e-12,
                     qPrintable(group + QStringLiteral(" eta axis %1").arg(a)));
            QVERIFY(std::abs(x - excess[a].item<double>()) < 1e-12);
        }
    }

    void invariants() {
        // [B11] agreement is 1 for top and first when r >= D; [B12] coverage is 1 when k >=
        // n_valid.
        at::manual_seed(3);
        const at::Tensor q = at::randn({2, 4, 16}), K = at::randn({2, 2, 30, 16});
        const at::Tensor valid = at::ones({2, 30}, at::kBool);
        QVERIFY(an::topkAgreement(q, K, valid, 16, 8, an::AgreementMethod::TopR)
                    .eq(1)
                    .all()
                    .item<bool>());
        QVERIFY(an::topkAgreement(q, K, valid, 16, 8, an::AgreementMethod::FirstR)
                    .eq(1)
                    .all()
                    .item<bool>());
        VERIFY_CLOSE(an::coverage(q, K, valid, 30), at::ones({2, 4}, at::kDouble), 1e-12, 0,
                     QStringLiteral("coverage k=S"));
        const at::Tensor c8 = an::coverage(q, K, valid, 8), c16 = an::coverage(q, K, valid, 16);
        QVERIFY(c16.ge(c8).all().item<bool>() && c8.gt(0).all().item<bool>());
        // [B13] r >= D with Eq. 9: α_approx == α_true; kurtosis ≥ −2.
        const auto [t, a] = an::alphaAgreement(q, K, valid, 16, 8, attention::TauMode::Adaptive);
        VERIFY_CLOSE(a, t, 1e-12, 0, QStringLiteral("alpha r=D"));
        QVERIFY(an::kurtosis(q.unsqueeze(1)).ge(-2).all().item<bool>());
        // A random projection is orthonormal.
        const at::Tensor P = an::randomProjection(2, 16, 8, 5).to(at::kDouble);
        VERIFY_CLOSE(at::matmul(P.transpose(1, 2), P), at::eye(8, at::kDouble).expand({2, 8, 8}),
                     1e-6, 0, QStringLiteral("P^T P"));
    }

    void badInputIsAnErrorNotNumbers() {
        // [B9] and SPARQ.md §2.1 (as attend() checks them): non-finite q, non-finite K at a valid
        // position and a row without a valid position are errors; K at invalid positions is not
        // read, whatever it holds.
        at::manual_seed(4);
        const at::Tensor q = at::randn({2, 4, 16}), K = at::randn({2, 2, 30, 16});
        at::Tensor valid = at::ones({2, 30}, at::kBool);
        valid[1].slice(0, 0, 5).fill_(false);
        const auto all = [&](const at::Tensor& qq, const at::Tensor& kk, const at::Tensor& vv) {
            an::coverage(qq, kk, vv, 8);
            an::topkAgreement(qq, kk, vv, 4, 8, an::AgreementMethod::TopR);
            an::alphaAgreement(qq, kk, vv, 4, 8, attention::TauMode::Adaptive);
        };
        at::Tensor kInvalid = K.clone();
        kInvalid[1][0][2][3] = std::numeric_limits<float>::infinity(); // row 1, position 2: invalid
        all(q, kInvalid, valid);
        QVERIFY(an::coverage(q, kInvalid, valid, 8).isfinite().all().item<bool>());
        at::Tensor qNan = q.clone();
        qNan[0][3][7] = std::numeric_limits<float>::quiet_NaN();
        at::Tensor kInf = K.clone();
        kInf[1][1][9][0] = -std::numeric_limits<float>::infinity(); // a valid position
        at::Tensor none = valid.clone();
        none[0].fill_(false);
        QVERIFY_THROWS_EXCEPTION(attention::NonFiniteInputError, an::coverage(qNan, K, valid, 8));
        QVERIFY_THROWS_EXCEPTION(
            attention::NonFiniteInputError,
            an::topkAgreement(q, kInf, valid, 4, 8, an::AgreementMethod::TopR));
        QVERIFY_THROWS_EXCEPTION(
            attention::NonFiniteInputError,
            an::alphaAgreement(qNan, K, valid, 4, 8, attention::TauMode::Adaptive));
        QVERIFY_THROWS_EXCEPTION(attention::AttentionError, an::coverage(q, K, none, 8));
        QVERIFY_THROWS_EXCEPTION(attention::AttentionError,
                                 an::topkAgreement(q, K, none, 4, 8, an::AgreementMethod::FirstR));
    }
};

QTEST_GUILESS_MAIN(TestStatisticsGolden)
#include "test_statistics_golden.moc"
