// The shipped demo model (resources/demo-model): it loads through the same path as any
// Hugging Face folder, has the shape the lab needs, and still produces the generation and the
// held-out bits per character recorded when it was trained (see its model card).

#include "test_support.h"

#include "model/model.h"
#include "text/tokenizer.h"

#include <ATen/ATen.h>
#include <QFile>
#include <QFileInfo>
#include <QtTest>

using namespace sparqlab;

namespace {
/// Recorded with the shipped weights (float32) on the development machine.
const std::vector<int64_t> kGreedyIds = {46,  351,  1305, 395, 398, 259, 975, 267,
                                         259, 1107, 280,  793, 329, 258, 975, 280,
                                         793, 329,  258,  975, 280, 793, 329, 258};
constexpr double kExcerptBpc = 1.3983704999;
/// Float32 rounding differs between BLAS builds; the BPC of 2,000 characters moves by far less.
constexpr double kBpcTolerance = 2e-3;
} // namespace

class TestDemoModel : public QObject {
    Q_OBJECT
    std::unique_ptr<model::Model> m_model;

private Q_SLOTS:
    void initTestCase() { m_model = model::Model::open("demo"); }

    void shapeForTheLab() {
        const model::ModelConfig& c = m_model->config();
        QCOMPARE(c.architectureName, std::string("LlamaForCausalLM"));
        QVERIFY(c.nKvHeads < c.nHeads);   // grouped-query attention
        QCOMPARE(c.headDim, int64_t{64}); // r sweeps 4…64
        QVERIFY(c.maxPositions >= 1024);
        QVERIFY(c.vocabSize >= 2048 && c.vocabSize <= 8192);
        const QFileInfo weights(QString::fromStdString(m_model->folder() + "/model.safetensors"));
        QVERIFY(weights.size() <= 40 * 1000 * 1000);
        QVERIFY(m_model->hasTokenizer());
        // The tokenizer round-trips held-out text (byte-level BPE loses nothing).
        const std::string text =
            "Mr. Speaker, Members of Congress: the state of our Union is strong.";
        QCOMPARE(m_model->tokenizer().decode(m_model->tokenizer().encode(text, false)), text);
    }

    void recordedGreedyGeneration() {
        const auto prompt = m_model->tokenizer().encode("The state of our Union", true);
        const model::Generation g =
            m_model->generate(prompt, static_cast<int64_t>(kGreedyIds.size()), {}, false);
        QCOMPARE(g.newIds, kGreedyIds);
    }

    void recordedHeldOutBpc() {
        QFile f(sparqlab::test::sourcePath(QStringLiteral("tests/data/sotu_2012_excerpt.txt")));
        QVERIFY(f.open(QIODevice::ReadOnly));
        const model::BpcResult r = m_model->bitsPerCharacter(f.readAll().toStdString());
        QVERIFY2(
            std::abs(r.bpc() - kExcerptBpc) <= kBpcTolerance,
            qPrintable(
                QStringLiteral("bpc %1, recorded %2").arg(r.bpc(), 0, 'f', 5).arg(kExcerptBpc)));
    }

    void tokenHealingRespellsTheCutWord() {
        // A prompt cut inside a word: the tokens back to the word's start are taken off and
        // the first generated tokens spell them again, whatever the weights.
        const std::vector<int64_t> ids =
            m_model->tokenizer().encode("Members of Congress, distinguishe", true);
        const model::HealedPrompt h = model::healPrompt(ids, m_model->tokenTexts());
        QCOMPARE(h.removed, std::string(" distinguishe"));
        QVERIFY(h.ids.size() < ids.size());
        const model::Generation g = m_model->generateHealed(ids, 6, {}, false);
        QCOMPARE(g.healed, std::string(" distinguishe"));
        QCOMPARE(g.promptIds, h.ids);
        const std::string all = m_model->tokenizer().decode(g.newIds, true);
        QVERIFY2(all.compare(0, g.healed.size(), g.healed) == 0, all.c_str());
        QCOMPARE(m_model->continuationText(g), all.substr(g.healed.size()));
        // No new token asked for: nothing is generated, nor healed (a healed token would spell
        // more than was taken off).
        const model::Generation none = m_model->generateHealed(ids, 0, {}, false);
        QVERIFY(none.newIds.empty());
        QCOMPARE(none.promptIds, ids);
        QCOMPARE(m_model->continuationText(none), std::string());
        // A prompt that ends a word heals its last word only.
        const model::HealedPrompt whole = model::healPrompt(
            m_model->tokenizer().encode("The state of our Union", true), m_model->tokenTexts());
        QCOMPARE(whole.removed, std::string(" Union"));
    }

    // The capture reports each layer and stops at the first refusal (the GUI's Cancel).
    void captureCanBeCancelledBetweenLayers() {
        const std::vector<int64_t> ids =
            m_model->tokenizer().encode("The state of our Union", true);
        const int64_t L = m_model->config().nLayers;
        std::vector<int64_t> seen;
        base::Job report;
        report.progress = [&](int64_t done, int64_t total, const std::string&) {
            seen.push_back(done);
            QCOMPARE(total, L);
        };
        const model::CaptureExample e = m_model->capture(ids, false, -1, report);
        QCOMPARE(static_cast<int64_t>(seen.size()), L);
        for (int64_t l = 0; l < L; ++l)
            QCOMPARE(seen[static_cast<size_t>(l)], l + 1);
        QCOMPARE(e.k.size(0), L);
        int calls = 0;
        std::atomic<bool> stop{false};
        base::Job cancel; // Cancel pressed during the first layer
        cancel.cancel = &stop;
        cancel.progress = [&](int64_t, int64_t, const std::string&) {
            ++calls;
            stop = true;
        };
        QVERIFY_THROWS_EXCEPTION(base::Cancelled, m_model->capture(ids, false, -1, cancel));
        QCOMPARE(calls, 1);
    }
};

QTEST_GUILESS_MAIN(TestDemoModel)
#include "test_demo_model.moc"
