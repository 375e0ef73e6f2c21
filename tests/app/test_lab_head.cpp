// The head view as a lecture shows it, on the demo model through the lab's controls: the
// scores plot's legend over no point of the data, also the moment it moves, and the word strip
// with the query in view below the words it attends to.

#include "lab_fixture.h"
#include "test_support.h"

#include "app/gui/main_window.h"
#include "attention/method_table.h"
#include "widgets/head_view.h"
#include "widgets/plot_checks.h"

#include <QComboBox>
#include <QScrollBar>
#include <QTextBrowser>
#include <QtTest>

#include <utility>

class TestLabHead : public sparqlab::test::LabFixture {
    Q_OBJECT

private Q_SLOTS:
    void initTestCase() { openLab(); }

    void theLegendCoversNoPeak() {
        // On every head of two layers, with SparQ's ŝ drawn beside the exact scores, the
        // scores plot's legend lies over no point of either curve (nor of their marks).
        m_w->controls()->setMethod(sparqlab::attention::Method::Sparq);
        m_w->controls()->setR(8);
        for (const int layer : {0, 3})
            for (int h = 0; h < m_w->lab()->labCapture()->heads(); ++h) {
                m_w->controls()->setLayerHead(layer, h);
                QVERIFY(!head().approx.empty());
                QCOMPARE(m_w->headView()->pointsUnderLegend(), 0);
            }
    }

    void aLegendThatMovesIsDrawnWhereItGoes() {
        // Made short, the scores plot lays out its legend above the axes within the replot of
        // its resize, and back inside when tall again: no second replot is needed to draw it
        // there (one frame showed it at its old place).
        sparqlab::widgets::HeadView* view = m_w->headView();
        auto* plot = view->findChild<QWidget*>(QStringLiteral("step2Plot"));
        const QSize tall = plot->size();
        plot->resize(tall.width(), 150); // (a shown child: its resize event, and replot, now)
        QVERIFY(!view->legendRect().intersects(view->axesRect()));
        QVERIFY(view->legendRect().bottom() < view->axesRect().top());
        plot->resize(tall);
        QVERIFY(view->axesRect().contains(view->legendRect()));
        QCOMPARE(view->pointsUnderLegend(), 0);
    }

    void aShortPlotsAxisStaysLegible() {
        // At its least height (what a teaching page at 125 % gives it) and taller, the scores
        // plot keeps its value labels apart and its axis label whole (it read "attention scor").
        auto* plot = m_w->headView()->findChild<QWidget*>(QStringLiteral("step2Plot"));
        const QSize tall = plot->size();
        for (const int height : {plot->minimumHeight(), 200, tall.height()}) {
            plot->resize(tall.width(), height);
            QMetaObject::invokeMethod(plot, "replot"); // (laid out, its ticks and label fitted)
            const QString wrong = sparqlab::widgets::style::illegibleLeftAxis(plot);
            QVERIFY2(wrong.isEmpty(),
                     qPrintable(QStringLiteral("%1 px: %2").arg(height).arg(wrong)));
        }
    }

    void theWordStripShowsTheWordsBeforeTheQuery() {
        // A strip too short for the prompt shows the query low in view and the tinted words
        // before it above (it put the query's line at the top, its context scrolled away).
        QTextBrowser* strip = m_w->headView()->tokenView();
        auto* tint = m_w->headView()->findChild<QComboBox*>(QStringLiteral("tintChoice"));
        // Where the strip is scrolled against where its query's line is at the top: above it,
        // by less than the strip's height (and 0, 0 where it holds the prompt whole).
        const auto scrolled = [strip]() {
            QScrollBar* bar = strip->verticalScrollBar();
            const int shown = bar->value();
            strip->scrollToAnchor(QStringLiteral("query"));
            const int query = bar->value();
            bar->setValue(shown); // (as it was: the probe moves nothing)
            return std::pair{shown, query};
        };
        const auto queryLow = [strip](std::pair<int, int> at) {
            return at.first < at.second && at.second - at.first < strip->viewport()->height();
        };
        const QSize was = strip->size();
        strip->resize(was.width(), 40);                  // (two lines of the prompt's five)
        tint->setCurrentIndex(1 - tint->currentIndex()); // (the strip drawn again)
        const std::pair<int, int> at = scrolled();
        QVERIFY2(at.second > 0, "the strip holds the prompt without scrolling");
        QVERIFY2(queryLow(at), qPrintable(QStringLiteral("shown from %1, the query's line at %2")
                                              .arg(at.first)
                                              .arg(at.second)));
        tint->setCurrentIndex(1 - tint->currentIndex());
        strip->resize(was);

        // Drawn while another view is shown: scrolled so once the head view shows again.
        strip->setMaximumHeight(40);
        QVERIFY(m_w->showView(QStringLiteral("overview")));
        tint->setCurrentIndex(1 - tint->currentIndex()); // (the strip drawn, hidden)
        QVERIFY(m_w->showView(QStringLiteral("head")));
        QTest::qWait(50);
        const std::pair<int, int> again = scrolled();
        QVERIFY2(queryLow(again),
                 qPrintable(QStringLiteral("shown again from %1, the query's line at %2")
                                .arg(again.first)
                                .arg(again.second)));

        // Made wider (the columns beside the view hidden, View menu): the words flow anew and
        // the strip is scrolled again, its query still low in view; so when they show again.
        using Side = sparqlab::app::MainWindow::Side;
        for (const bool shown : {false, true}) {
            m_w->setSideShown(Side::Left, shown);
            m_w->setSideShown(Side::Right, shown);
            QTest::qWait(50);
            const std::pair<int, int> wide = scrolled();
            QVERIFY2(queryLow(wide), qPrintable(QStringLiteral("columns %1: from %2, the query's "
                                                               "line at %3")
                                                    .arg(shown ? "shown" : "hidden")
                                                    .arg(wide.first)
                                                    .arg(wide.second)));
        }
        tint->setCurrentIndex(1 - tint->currentIndex());
        strip->setMaximumHeight(QWIDGETSIZE_MAX);
    }
};

QTEST_MAIN(TestLabHead)
#include "test_lab_head.moc"
