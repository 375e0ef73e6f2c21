// The invariants of SPARQ.md §7 on random inputs, the input checks, and the dtypes.

#include "test_support.h"

#include "attention/attention.h"
#include "attention/method_table.h"
#include "attention/transfer.h"

#include <ATen/ATen.h>
#include <QtTest>

#include <algorithm>
#include <functional>
#include <set>

#include <limits>

namespace att = sparqlab::attention;
using sparqlab::test::compareClose;

namespace {

/// Random decode-step inputs with GQA and a left-padded second row (SPARQ.md §8.2 style).
att::AttentionInputs randomInputs(int64_t B, int64_t Hkv, int64_t g, int64_t S, int64_t D,
                                  at::ScalarType dtype, int64_t pad = 5, uint64_t seed = 7) {
    at::manual_seed(seed);
    att::AttentionInputs in;
    in.q = (at::randn({B, g * Hkv, D}, at::kDouble) * 1.5).to(dtype);
    in.k = at::randn({B, Hkv, S, D}, at::kDouble).to(dtype);
    in.v = (at::randn({B, Hkv, S, D}, at::kDouble) + 0.5).to(dtype);
    in.valid = at::ones({B, S}, at::kBool);
    if (B > 1 && pad > 0)
        in.valid[1].slice(0, 0, pad).fill_(false);
    return in;
}

att::AttentionConfig config(att::Method m, int64_t r, int64_t k, int64_t l = 0) {
    att::AttentionConfig c;
    c.method = m;
    c.r = r;
    c.k = k;
    c.local = l;
    return c;
}

#define VERIFY_CLOSE(a, b, atol, what)                                                             \
    do {                                                                                           \
        const QString _e = compareClose((a), (b), (atol), 0, QStringLiteral(what));                \
        QVERIFY2(_e.isEmpty(), qPrintable(_e));                                                    \
    } while (0)

} // namespace

class TestAttentionInvariants : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void b1_fullRankFullKIsDense() {
        const auto in = randomInputs(2, 2, 4, 40, 32, at::kDouble);
        const at::Tensor dense = att::attend(in, {}).y;
        for (att::TauMode tau : {att::TauMode::Adaptive, att::TauMode::SqrtDh, att::TauMode::SqrtR})
            for (att::GroupSelect gs : {att::GroupSelect::SumProbs, att::GroupSelect::SumLogits,
                                        att::GroupSelect::PerHead}) {
                att::AttentionConfig c = config(att::Method::Sparq, 32, 40);
                c.tau = tau;
                c.gqa = gs;
                const att::AttentionResult r = att::attend(in, c);
                VERIFY_CLOSE(r.y, dense, 1e-12, "B1 y");
                VERIFY_CLOSE(r.alpha, at::ones_like(r.alpha), 1e-15, "B1 alpha");
            }
    }

    void b2_everyMethodIsDenseWhenKCoversEverything() {
        const auto in = randomInputs(2, 2, 2, 24, 16, at::kDouble);
        const at::Tensor dense = att::attend(in, {}).y;
        for (att::Method m : {att::Method::Sparq, att::Method::Oracle, att::Method::FlexGen,
                              att::Method::LmInfinite, att::Method::H2O}) {
            att::AttentionInputs x = in;
            x.acc = at::rand({2, 2, 24}, at::kDouble);
            for (int64_t r : {1, 4, 16}) {
                const att::AttentionResult res = att::attend(x, config(m, r, 24, 3));
                VERIFY_CLOSE(res.y, dense, 1e-12, "B2 y");
            }
        }
    }

    void b3_fullRankSparqIsOracleWithMeanValue() {
        const auto in = randomInputs(2, 2, 4, 50, 16, at::kDouble);
        for (int64_t l : {0, 3}) {
            att::AttendOptions o;
            o.keepScores = true;
            const att::AttentionResult s =
                att::attend(in, config(att::Method::Sparq, 16, 10, l), o);
            const att::AttentionResult orc =
                att::attend(in, config(att::Method::Oracle, 16, 10, l));
            VERIFY_CLOSE(s.sHat, s.probs, 1e-12, "B3 s_hat == s");
            QVERIFY(s.indices.equal(orc.indices));
            VERIFY_CLOSE(s.alpha, orc.mass, 1e-12, "B3 alpha == mass");
            VERIFY_CLOSE(s.yTopk, orc.y, 1e-12, "B3 y_topk == oracle y");
        }
    }

    void b4_selectionSizesAndLocalWindow() {
        const auto in = randomInputs(2, 2, 2, 30, 16, at::kFloat, /*pad=*/7);
        const at::Tensor nValid = in.valid.sum(-1);
        for (att::Method m : {att::Method::Sparq, att::Method::Oracle, att::Method::H2O}) {
            att::AttentionInputs x = in;
            x.acc = at::rand({2, 2, 30});
            for (int64_t k : {1, 5, 23, 40})
                for (int64_t l : {0, 1, 4}) {
                    const att::AttentionResult r = att::attend(x, config(m, 4, k, l));
                    const at::Tensor count = r.selected.sum(-1); // [B, Hq]
                    QVERIFY(count.eq(nValid.clamp_max(k).unsqueeze(1)).all().item<bool>());
                    QVERIFY(r.selected.logical_and(in.valid.unsqueeze(1).logical_not())
                                .any()
                                .item<bool>() == false);
                    QVERIFY(r.alpha.ge(0).all().item<bool>() &&
                            r.alpha.le(1 + 1e-6).all().item<bool>());
                    // The current token (last position) is kept whenever l >= 1.
                    if (l >= 1)
                        QVERIFY(r.selected.select(2, 29).all().item<bool>());
                    const int64_t lEff = std::min(l, std::min(k, int64_t{23}));
                    for (int64_t j = 0; j < lEff; ++j)
                        QVERIFY(r.selected.select(2, 29 - j).all().item<bool>());
                }
        }
    }

    void b5_outputsAreConvexCombinations() {
        const auto in = randomInputs(2, 2, 2, 64, 16, at::kDouble);
        const at::Tensor vm = in.valid.view({2, 1, 64, 1});
        const double inf = std::numeric_limits<double>::infinity();
        const at::Tensor vmax = at::where(vm, in.v, at::scalar_tensor(-inf, at::kDouble)).amax(2);
        const at::Tensor vmin = at::where(vm, in.v, at::scalar_tensor(inf, at::kDouble)).amin(2);
        att::AttentionInputs x = in;
        x.acc = at::rand({2, 2, 64}, at::kDouble);
        for (att::Method m :
             {att::Method::Sparq, att::Method::Oracle, att::Method::LmInfinite, att::Method::H2O}) {
            const at::Tensor y = att::attend(x, config(m, 4, 8, 2)).y.view({2, 2, 2, 16});
            QVERIFY(y.le(vmax.unsqueeze(2) + 1e-12).all().item<bool>());
            QVERIFY(y.ge(vmin.unsqueeze(2) - 1e-12).all().item<bool>());
        }
    }

    void b6_flexgenIsUnrenormalisedOracle() {
        const auto in = randomInputs(2, 2, 2, 40, 16, at::kDouble);
        const att::AttentionResult f = att::attend(in, config(att::Method::FlexGen, 4, 9));
        const att::AttentionResult o = att::attend(in, config(att::Method::Oracle, 4, 9, 0));
        QVERIFY(f.weightSum.le(1 + 1e-12).all().item<bool>());
        VERIFY_CLOSE(f.y, o.y * f.weightSum.unsqueeze(-1), 1e-12, "B6 y = y_oracle * weight_sum");
        att::AttentionConfig c = config(att::Method::FlexGen, 4, 9);
        c.flexgenReallocate = true;
        const att::AttentionResult fr = att::attend(in, c);
        const at::Tensor vbar = fr.meanV.repeat_interleave(2, 1);
        VERIFY_CLOSE(fr.y, f.y + (1 - f.weightSum.unsqueeze(-1)) * vbar, 1e-12, "B6 Eq. 6");
    }

    void b7_groupRulesAgreeWithoutGqa() {
        const auto in = randomInputs(2, 4, 1, 33, 16, at::kDouble);
        att::AttentionConfig c = config(att::Method::Sparq, 4, 7, 2);
        const att::AttentionResult base = att::attend(in, c);
        for (att::GroupSelect gs : {att::GroupSelect::SumLogits, att::GroupSelect::PerHead})
            for (att::ComponentSelect cs :
                 {att::ComponentSelect::Group, att::ComponentSelect::PerHead}) {
                c.gqa = gs;
                c.components = cs;
                const att::AttentionResult r = att::attend(in, c);
                QVERIFY(r.indices.equal(base.indices));
                VERIFY_CLOSE(r.y, base.y, 1e-12, "B7 y");
            }
    }

    void b8_invalidPositionsAreNeverRead() {
        auto in = randomInputs(2, 2, 2, 20, 8, at::kFloat, /*pad=*/6);
        in.acc = at::rand({2, 2, 20});
        auto garbage = in;
        garbage.k = in.k.clone();
        garbage.v = in.v.clone();
        garbage.acc = in.acc.clone();
        const float nan = std::numeric_limits<float>::quiet_NaN();
        garbage.k[1].slice(1, 0, 6).fill_(nan);
        garbage.v[1].slice(1, 0, 3).fill_(std::numeric_limits<float>::infinity());
        garbage.v[1].slice(1, 3, 6).fill_(1e30f);
        garbage.acc[1].slice(1, 0, 6).fill_(nan);
        for (att::Method m : {att::Method::Dense, att::Method::Sparq, att::Method::Oracle,
                              att::Method::FlexGen, att::Method::LmInfinite, att::Method::H2O}) {
            const att::AttentionResult a = att::attend(in, config(m, 3, 5, 1));
            const att::AttentionResult b = att::attend(garbage, config(m, 3, 5, 1));
            QVERIFY2(a.y.equal(b.y), qPrintable(QString::fromStdString(att::methodName(m))));
            QVERIFY(a.indices.equal(b.indices));
        }
    }

    void b9_nonFiniteInputsAreRejected() {
        auto in = randomInputs(1, 1, 2, 10, 8, at::kFloat, 0);
        auto badQ = in;
        badQ.q = in.q.clone();
        badQ.q[0][1][3] = std::numeric_limits<float>::quiet_NaN();
        QVERIFY_THROWS_EXCEPTION(att::NonFiniteInputError,
                                 att::attend(badQ, config(att::Method::Sparq, 4, 4)));
        auto badV = in;
        badV.v = in.v.clone();
        badV.v[0][0][9][0] = std::numeric_limits<float>::infinity();
        QVERIFY_THROWS_EXCEPTION(att::NonFiniteInputError, att::attend(badV, {}));
    }

    void attendChecksTheGroupRuleToo() {
        // The library's callers may skip validateFor: a rule a method does not take is refused
        // by attend() itself (before any input is read), not run as another.
        const auto in = randomInputs(1, 1, 2, 12, 8, at::kFloat, 0);
        int refused = 0;
        for (const att::MethodInfo& info : att::methods()) {
            if (!att::takes(info.id, att::Param::Gqa))
                continue;
            const std::vector<att::GroupSelect> rules = att::gqaRules(info.id);
            for (const att::GroupSelect gs :
                 {att::GroupSelect::SumProbs, att::GroupSelect::SumLogits,
                  att::GroupSelect::PerHead, att::GroupSelect::MaxProbs}) {
                if (std::find(rules.begin(), rules.end(), gs) != rules.end())
                    continue;
                att::AttentionConfig c = att::defaultConfig(info.id);
                c.gqa = gs;
                try {
                    att::attend(in, c);
                    QFAIL(qPrintable(QStringLiteral("%1 ran with %2")
                                         .arg(QLatin1String(info.name),
                                              QString::fromStdString(att::groupSelectName(gs)))));
                } catch (const att::AttentionError& e) {
                    QVERIFY2(std::string(e.what()).find("--gqa") != std::string::npos, e.what());
                    ++refused;
                }
            }
        }
        QVERIFY(refused >= 5); // expected-attention, pqcache, rocketkv (2), adakv at least
    }

    void b15_h2oWithFullLocalWindowIsLmInfiniteWithoutSinks() {
        auto in = randomInputs(2, 2, 2, 30, 8, at::kDouble);
        in.acc = at::rand({2, 2, 30}, at::kDouble);
        const att::AttentionResult h = att::attend(in, config(att::Method::H2O, 4, 6, 6));
        att::AttentionConfig c = config(att::Method::LmInfinite, 4, 6);
        c.values[att::Param::Sink] = 0;
        const att::AttentionResult l = att::attend(in, c);
        QVERIFY(h.indices.equal(l.indices));
        VERIFY_CLOSE(h.y, l.y, 1e-12, "B15");
        // Stateful H2O with one step equals the single step (§4.4.3).
        att::H2OState state(in.acc, in.valid);
        const att::AttentionResult s = state.step(in.q, in.k, in.v, 29, 6, 2);
        const att::AttentionResult single = att::attend(in, config(att::Method::H2O, 4, 6, 2));
        QVERIFY(s.indices.equal(single.indices));
        VERIFY_CLOSE(s.y, single.y, 1e-12, "stateful one step");
    }

    void lowPrecisionInputsComputeInFloat32() {
        for (at::ScalarType t : {at::kHalf, at::kBFloat16}) {
            const auto in = randomInputs(2, 2, 2, 40, 16, t);
            att::AttentionInputs asFloat = in;
            asFloat.q = in.q.to(at::kFloat);
            asFloat.k = in.k.to(at::kFloat);
            asFloat.v = in.v.to(at::kFloat);
            const att::AttentionResult a = att::attend(in, config(att::Method::Sparq, 4, 8, 2));
            const att::AttentionResult b =
                att::attend(asFloat, config(att::Method::Sparq, 4, 8, 2));
            QCOMPARE(a.y.scalar_type(), at::kFloat);
            QVERIFY(a.y.equal(b.y));
            QVERIFY(a.indices.equal(b.indices));
        }
    }

    void runningMeanMatchesTheMean() {
        const auto in = randomInputs(2, 2, 1, 12, 8, at::kFloat, 0);
        att::RunningMeanV mean(in.v.slice(2, 0, 5));
        for (int64_t j = 5; j < 12; ++j)
            mean.append(in.v.select(2, j));
        QCOMPARE(mean.count(), int64_t{12});
        VERIFY_CLOSE(mean.mean(), att::attend(in, {}).meanV, 1e-6, "running mean");
    }

    void userParametersAreChecked() {
        att::AttentionConfig c = config(att::Method::Sparq, 65, 16);
        QVERIFY_THROWS_EXCEPTION(att::AttentionError, c.validateFor(64)); // r > head_dim
        c.r = 0;
        QVERIFY_THROWS_EXCEPTION(att::AttentionError, c.validateFor(64));
        c = config(att::Method::Sparq, 16, 16, 17); // l > k: clamped to k (SPARQ.md §2.7)
        c.validateFor(64);
        {
            const auto in = randomInputs(1, 2, 2, 40, 64, at::kDouble, 3);
            const att::AttentionResult above = att::attend(in, c);
            c.local = 16;
            const att::AttentionResult at = att::attend(in, c);
            QVERIFY(above.indices.equal(at.indices));
            QVERIFY(above.y.equal(at.y));
        }
        c = config(att::Method::Sparq, 16, 16);
        c.tau = att::TauMode::Fixed;
        c.tauValue = std::numeric_limits<double>::quiet_NaN();
        QVERIFY_THROWS_EXCEPTION(att::AttentionError, c.validateFor(64));
        QVERIFY_THROWS_EXCEPTION(att::AttentionError, att::parseTauMode("-1", nullptr));
        QVERIFY_THROWS_EXCEPTION(att::AttentionError, att::parseMethod("sparse"));
        c = config(att::Method::Sparq, 16, 16, 4);
        c.validateFor(64); // fine
    }

    void theTableHoldsTheRulesBetweenParameters() {
        // The rules the lab's controls once wired by hand are the table's (an odd kernel, SnapKV's
        // and AdaKV's window within k, l above k taken as k) and every path checks them: the
        // command line's parser, validateFor and attend() itself, in one line naming the option.
        QVERIFY(att::paramInfo(att::Param::Kernel).odd);
        QVERIFY(att::paramInfo(att::Param::Local).clampedTo == att::Param::K);
        auto error = [](const std::function<void()>& f) {
            try {
                f();
            } catch (const att::AttentionError& e) {
                return std::string(e.what());
            }
            return std::string("accepted");
        };
        auto refused = [&](const std::function<void()>& f, const char* option) {
            const std::string e = error(f);
            if (e.find(option) == std::string::npos)
                qWarning("%s", e.c_str());
            return e.find(option) != std::string::npos;
        };
        const auto in = randomInputs(1, 2, 2, 40, 16, at::kFloat, 0);
        for (const att::Method m : {att::Method::SnapKV, att::Method::AdaKV}) {
            const att::MethodInfo& info = att::methodInfo(m);
            QCOMPARE(info.atMost.size(), size_t{1});
            att::AttentionConfig c = att::defaultConfig(m);
            c.k = 16;
            c.snapWindow = 17; // above k
            QVERIFY2(refused([&] { c.validateFor(16); }, "--window"), info.name);
            QVERIFY2(refused([&] { (void)att::attend(in, c); }, "--window"), info.name);
            c.snapWindow = 16;
            c.kernel = 4; // even
            QVERIFY2(refused([&] { c.validateFor(16); }, "--kernel"), info.name);
            QVERIFY2(refused([&] { (void)att::attend(in, c); }, "--kernel"), info.name);
            QVERIFY2(refused([&] { att::setParamValue(c, att::Param::Kernel, "6"); }, "odd"),
                     info.name);
        }
        att::AttentionConfig rocket = att::defaultConfig(att::Method::RocketKV);
        rocket.kernel = 62;
        QVERIFY(refused([&] { rocket.validateFor(64); }, "--kernel"));
        att::AttentionConfig ea = att::defaultConfig(att::Method::ExpectedAttention);
        QVERIFY(refused([&] { att::setParamValue(ea, att::Param::Ratio, "1"); }, "[0, 1)"));
        ea.values[att::Param::Ratio] = 1; // (as a session or the lab could set it)
        QVERIFY(refused([&] { ea.validateFor(16); }, "--ratio"));
        // Every pair names two parameters its method takes.
        for (const att::MethodInfo& m : att::methods())
            for (const auto& [a, b] : m.atMost)
                QVERIFY2(att::takes(m.id, a) && att::takes(m.id, b), m.name);
    }

    void everyParameterIsARowThatRoundTrips() {
        // The parameter table is the one home of each parameter: its option and attribute are
        // unique, and every value a method runs with reads back, as text and as a number,
        // through the row alone.
        std::set<std::string> options, attributes;
        for (const att::ParamInfo& p : att::parameters()) {
            QVERIFY2(options.insert(p.option).second, p.option);
            QVERIFY2(attributes.insert(p.attribute).second, p.attribute);
            QVERIFY2(p.label && *p.label && p.help && *p.help, p.option);
        }
        for (const att::MethodInfo& m : att::methods()) {
            att::AttentionConfig c = att::defaultConfig(m.id);
            // a value other than the default where the kind allows one
            for (const att::Param id : m.params) {
                const att::ParamInfo& p = att::paramInfo(id);
                if (p.kind == att::ParamKind::Integer)
                    att::setParamNumber(c, id, std::max(p.min, c.value(id)) + 2);
                else if (p.kind == att::ParamKind::Choice && p.choices.size() > 1 &&
                         id != att::Param::Gqa && id != att::Param::Tau)
                    att::setParamNumber(c, id, 1);
                else if (p.kind == att::ParamKind::Flag)
                    att::setParamNumber(c, id, 1);
            }
            att::AttentionConfig back = att::defaultConfig(m.id);
            for (const att::Param id : m.params) {
                if (att::paramInfo(id).kind == att::ParamKind::File)
                    continue;
                att::AttentionConfig viaNumber = att::defaultConfig(m.id);
                att::setParamNumber(viaNumber, id, c.value(id));
                const std::string text = att::paramValue(c, id);
                if (id == att::Param::MeanValue) { // the attribute says whether it is used
                    if (text == "0")
                        att::setParamValue(back, id, text);
                } else {
                    att::setParamValue(back, id, text);
                }
                const std::string what = std::string(m.name) + " --" + att::paramInfo(id).option;
                QVERIFY2(att::paramValue(back, id) == text, what.c_str());
                QVERIFY2(back.value(id) == c.value(id), what.c_str());
                QVERIFY2(att::paramValue(viaNumber, id) == text, what.c_str());
            }
        }
        // The parameters that only the code could set before are options now (CONTRACTS.md §6).
        att::AttentionConfig c = att::defaultConfig(att::Method::LmInfinite);
        QCOMPARE(c.integer(att::Param::Sink), int64_t{16});
        att::setParamValue(c, att::Param::Sink, "3");
        QCOMPARE(c.integer(att::Param::Sink), int64_t{3});
        c = att::defaultConfig(att::Method::Sparq);
        att::setParamValue(c, att::Param::Components, "per-head");
        QCOMPARE(c.components, att::ComponentSelect::PerHead);
        c = att::defaultConfig(att::Method::FlexGen);
        att::setParamValue(c, att::Param::Reallocate, "");
        QVERIFY(c.flexgenReallocate);
        c = att::defaultConfig(att::Method::SparqTopP);
        att::setParamValue(c, att::Param::K, "none");
        QCOMPARE(c.k, att::AttentionConfig::kNoCap);
        QCOMPARE(att::paramValue(c, att::Param::K), std::string("none"));
        QVERIFY_THROWS_EXCEPTION(att::AttentionError, att::setParamValue(c, att::Param::P, "0"));
    }

    void shapesAreChecked() {
        auto in = randomInputs(1, 2, 2, 10, 8, at::kFloat, 0);
        auto bad = in;
        bad.v = in.v.slice(2, 0, 9);
        QVERIFY_THROWS_EXCEPTION(att::AttentionError, att::attend(bad, {}));
        bad = in;
        bad.q = at::randn({1, 3, 8}); // 3 query heads over 2 KV heads
        QVERIFY_THROWS_EXCEPTION(att::AttentionError, att::attend(bad, {}));
        bad = in;
        bad.valid = at::zeros({1, 10}, at::kBool);
        QVERIFY_THROWS_EXCEPTION(att::AttentionError, att::attend(bad, {}));
        QVERIFY_THROWS_EXCEPTION(att::AttentionError,
                                 att::attend(in, config(att::Method::H2O, 4, 4)));
    }

    void transferHeadlineRatios() {
        // SPARQ.md §5 checks: 6.38× at S = 4096 (paper Table 4: 6.4×), 7.53× at S = 16384.
        QVERIFY(std::abs(att::compressionRatio(att::Method::Sparq, 4096, 128, 128, 32) - 0.1567) <
                5e-5);
        QVERIFY(std::abs(1.0 / att::compressionRatio(att::Method::Sparq, 16384, 128, 128, 32) -
                         7.53) < 1e-2);
        QCOMPARE(att::compressionRatio(att::Method::Dense, 77, 64, 3, 2), 1.0);
    }

    void aKeyThatIsItsValueCountsOnce() {
        // METHODS.md §10 checks at S = 4096, d = 128, k = 128, r = 32: a key and its value count
        // d (dense S·d + d, SparQ S·r + k·d + 3·d with v̄'s 2·d kept, the oracle's top-p S·d + d:
        // its values were read as keys); no method reads more than with keys and values apart.
        const att::AttentionConfig sparq = att::defaultConfig(att::Method::Sparq);
        att::TransferArgs a = att::literalTransferArgs(sparq, 4096, 128); // (it points at sparq)
        a.k = 128;
        a.r = 32;
        att::TransferArgs shared = a;
        shared.keyIsValue = true;
        QCOMPARE(att::transferElements(att::Method::Dense, shared), 4096.0 * 128 + 128);
        QCOMPARE(att::transferElements(att::Method::Sparq, shared),
                 4096.0 * 32 + 128.0 * 128 + 3 * 128);
        QCOMPARE(att::transferElements(att::Method::OracleTopP, shared), 4096.0 * 128 + 128);
        for (const att::MethodInfo& m : att::methods()) {
            const att::AttentionConfig c = att::defaultConfig(m.id);
            att::TransferArgs ma = att::literalTransferArgs(c, 4096, 128), ms = ma;
            ms.keyIsValue = true;
            const double apart = att::transferElements(m.id, ma),
                         once = att::transferElements(m.id, ms);
            QVERIFY2(once < apart && once > 0, m.name);
        }
    }
};

QTEST_GUILESS_MAIN(TestAttentionInvariants)
#include "test_attention_invariants.moc"
