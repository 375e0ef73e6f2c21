// The head view as a lecture shows it, on the demo model through the lab's controls: the
// scores plot's legend over no point of the data, also the moment it moves, a zoom that stays
// (here and in the compare view), and the word strip with the query in view below the words it
// attends to.

#include "lab_fixture.h"
#include "test_support.h"

#include "app/gui/main_window.h"
#include "attention/method_table.h"
#include "widgets/compare_view.h"
#include "widgets/head_view.h"
#include "widgets/map_view.h"
#include "widgets/panels.h"
#include "widgets/plot_checks.h"
#include "widgets/slider_box.h"

#include <QComboBox>
#include <QLabel>
#include <QScrollBar>
#include <QSettings>
#include <QSpinBox>
#include <QTextBrowser>
#include <QWheelEvent>
#include <QtTest>

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

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
                QCOMPARE(m_w->headView()->curveUnderLegend(), 0);
            }
    }

    void queryKeyMapShowsEveryQueryOfTheHead() {
        // The map's rows are the head view of each query: the row of the query shown is the
        // head view's exact attention, blank after the query; a click on a row examines it.
        m_w->controls()->setMethod(sparqlab::attention::Method::Sparq);
        m_w->controls()->setLayerHead(2, 3);
        const auto* cap = m_w->lab()->labCapture();
        const int64_t S = cap->positions();
        m_w->lab()->setQueryPosition(static_cast<int>(S - 1));
        QVERIFY(m_w->showView(QStringLiteral("map")));
        m_w->flushRedraw();
        auto* view = m_w->findChild<sparqlab::widgets::QueryKeyMapView*>();
        QVERIFY(view);
        const sparqlab::analysis::QueryKeyMap& map = view->map();
        QCOMPARE(map.rows(), std::min<int64_t>(S, 512));
        QCOMPARE(map.lastQuery, S - 1);
        for (int64_t j = 0; j < S; ++j)
            QVERIFY(std::abs(view->value(S - 1, j) - head().exact[static_cast<size_t>(j)]) < 1e-6);
        const int64_t q = S / 3;
        QVERIFY(std::isnan(view->value(q, q + 1))); // after the query: blank
        view->setMode(sparqlab::widgets::MapMode::Chosen);
        for (const int64_t j : head().chosen)
            QVERIFY(!std::isnan(view->value(S - 1, j)));
        int64_t blank = 0;
        for (int64_t j = 0; j < S; ++j)
            blank += std::isnan(view->value(S - 1, j)) ? 1 : 0;
        QCOMPARE(blank, S - static_cast<int64_t>(head().chosen.size()));
        view->setMode(sparqlab::widgets::MapMode::Exact);
        QVERIFY(view->tipFor(q, 1).contains(QStringLiteral("exact s = ")));
        QVERIFY(view->caption()->text().contains(QStringLiteral("Layer 2, head 3")));
        // A click on row q shows that query in the head view.
        QTest::mouseClick(view->plotWidget(), Qt::LeftButton, {}, view->pixelOf(q, 0));
        QCOMPARE(m_w->lab()->queryPosition(), static_cast<int>(q));
        QCOMPARE(head().exact.size(), static_cast<size_t>(q + 1));
        // The dashed row's label lies where the map is blank: above the row, right of the
        // query's own key (every key after the query is blank in the rows above it).
        m_w->flushRedraw();
        const QRect label = view->rowLabelRect();
        QVERIFY(!label.isEmpty());
        QVERIFY2(view->pixelOf(q, S - 1).x() - view->pixelOf(q, q + 1).x() > label.width(),
                 "the test's prompt leaves no room beside the row");
        const auto at = [](const QRect& r) {
            return QStringLiteral("label at x %1-%2, y %3-%4")
                .arg(r.left())
                .arg(r.right())
                .arg(r.top())
                .arg(r.bottom());
        };
        QVERIFY2(label.left() > view->pixelOf(q, q).x() &&
                     label.bottom() <= view->pixelOf(q, 0).y(),
                 qPrintable(QStringLiteral("%1; the query's key at x %2, its row at y %3")
                                .arg(at(label))
                                .arg(view->pixelOf(q, q).x())
                                .arg(view->pixelOf(q, 0).y())));
        // The last query (the lab's first, the decode step's) leaves no room beside its row:
        // the label goes up to the first row whose blank keys hold it, and is still over none
        // of the map's weights (before, at the row's right end, it covered the latest keys of
        // the rows above).
        m_w->lab()->setQueryPosition(static_cast<int>(S - 1));
        m_w->flushRedraw();
        const QRect high = view->rowLabelRect();
        QVERIFY(!high.isEmpty());
        QVERIFY2(high.bottom() < view->pixelOf(S - 1, 0).y(), "the label is not above the row");
        int64_t lowest = 0; // the lowest row the label may reach down into
        while (lowest + 1 < S && view->pixelOf(lowest, 0).y() <= high.bottom())
            ++lowest;
        QVERIFY2(high.left() > view->pixelOf(lowest, lowest).x(),
                 qPrintable(QStringLiteral("%1, down into row %2, whose own key is at x %3")
                                .arg(at(high))
                                .arg(lowest)
                                .arg(view->pixelOf(lowest, lowest).x())));
        m_w->showView(QStringLiteral("head"));
    }

    void aLogScaleShowsTheSmallScoresApart() {
        // On a logarithmic axis the scores plot spans four decades under the peak in sight, its
        // legend over no point still, and the linear axis comes back from 0.
        sparqlab::widgets::HeadView* view = m_w->headView();
        m_w->controls()->setMethod(sparqlab::attention::Method::Sparq);
        m_w->controls()->setLayerHead(2, 1);
        const QWidget* plot = view->findChild<QWidget*>(QStringLiteral("step2Plot"));
        using sparqlab::widgets::style::yLogarithmic;
        using sparqlab::widgets::style::yRange;
        const sparqlab::analysis::HeadState& shown = head(); // (drawn once computed)
        const double linearTop = yRange(plot).second;
        QCOMPARE(yRange(plot).first, 0.0);
        float peak = *std::max_element(shown.exact.begin(), shown.exact.end());
        if (!shown.approx.empty()) // (the highest of the curves drawn)
            peak = std::max(peak, *std::max_element(shown.approx.begin(), shown.approx.end()));
        view->setLogScores(true);
        QVERIFY(yLogarithmic(plot));
        QVERIFY(yRange(plot).second >= peak);
        QVERIFY2(std::abs(yRange(plot).first / (peak * 1.05) - 1e-4) < 1e-6,
                 qPrintable(QString::number(yRange(plot).first)));
        QCOMPARE(view->curveUnderLegend(), 0);
        // Another head keeps the scale.
        m_w->controls()->setLayerHead(2, 0);
        head();
        QVERIFY(yLogarithmic(plot));
        QCOMPARE(view->curveUnderLegend(), 0);
        view->setLogScores(false);
        m_w->controls()->setLayerHead(2, 1);
        head();
        QVERIFY(!yLogarithmic(plot));
        QCOMPARE(yRange(plot).first, 0.0);
        QCOMPARE(yRange(plot).second, linearTop);
    }

    void aLegendThatMovesIsDrawnWhereItGoes() {
        // Made short, the scores plot lays out its legend above the axes within the replot of
        // its resize, and back inside when tall again: no second replot is needed to draw it
        // there (one frame showed it at its old place). Layer 2's head 1 under SparQ has its
        // legend change corners as it comes back, with no room to make above the peaks.
        m_w->controls()->setMethod(sparqlab::attention::Method::Sparq);
        m_w->controls()->setLayerHead(2, 1);
        head();
        sparqlab::widgets::HeadView* view = m_w->headView();
        auto* plot = view->findChild<QWidget*>(QStringLiteral("step2Plot"));
        const QSize tall = plot->size();
        plot->resize(tall.width(), 150); // (a shown child: its resize event, and replot, now)
        QVERIFY(!view->legendRect().intersects(view->axesRect()));
        QVERIFY(view->legendRect().bottom() < view->axesRect().top());
        plot->resize(tall);
        QVERIFY(view->axesRect().contains(view->legendRect()));
        QCOMPARE(view->curveUnderLegend(), 0);
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

    void aZoomStaysWhileThePositionsDo() {
        // A lecturer zooms the scores plot to where the peak is and moves k and the head: the
        // zoom stays (each redraw showed every position again), the legend away from the peak
        // now in sight; a double-click shows every position, and so does another query.
        namespace att = sparqlab::attention;
        using sparqlab::widgets::style::setXRange, sparqlab::widgets::style::xRange,
            sparqlab::widgets::style::yTop;
        sparqlab::widgets::HeadView* view = m_w->headView();
        auto* plot = view->findChild<QWidget*>(QStringLiteral("step2Plot"));
        m_w->controls()->setMethod(att::Method::Sparq);
        m_w->controls()->setLayerHead(3, 0);
        m_w->controls()->setK(16);
        const std::vector<float> s = head().exact, approx = head().approx;
        const auto S = static_cast<double>(s.size());
        using Range = std::pair<double, double>;
        const Range all(-0.5, S - 0.5);
        QCOMPARE(xRange(plot), all);
        const auto legendRight = [view] {
            return view->legendRect().center().x() > view->axesRect().center().x();
        };
        QVERIFY2(!legendRight(), "the whole range has its peaks on the right");
        // 24 positions whose left third's peak is above their right third's, the lines to the
        // positions beyond it included (drawn up to the edge): zoomed there, the legend goes to
        // the right.
        const auto peak = [&](size_t from, size_t to) {
            float m = 0;
            for (size_t i = from; i < to; ++i)
                m = std::max({m, s[i], approx[i]});
            return m;
        };
        size_t at = 0;
        while (at + 25 <= s.size() && peak(at, at + 8) <= peak(at + 15, at + 25))
            ++at;
        QVERIFY2(at + 25 <= s.size(), "no 24 positions with a peak on their left");
        const Range zoom(static_cast<double>(at) - 0.5, static_cast<double>(at) + 23.5);
        const double wholeTop = yTop(plot);
        setXRange(plot, zoom.first, zoom.second);
        QTRY_VERIFY(legendRight());
        QCOMPARE(view->curveUnderLegend(), 0);
        // The scores axis fits the curves in sight (with the lines to the positions beside
        // them), not the whole range's peak.
        const float near = peak(at > 0 ? at - 1 : 0, at + 25);
        QVERIFY2(near < 0.5 * wholeTop, "the whole range's peak is in sight");
        QVERIFY(yTop(plot) >= peak(at, at + 24));
        QVERIFY2(yTop(plot) < 0.6 * wholeTop,
                 qPrintable(QStringLiteral("top %1, in sight %2, whole %3")
                                .arg(yTop(plot))
                                .arg(near)
                                .arg(wholeTop)));
        for (const int k : {32, 8}) {
            m_w->controls()->setK(k);
            QCOMPARE(head().kEff, k);
            QCOMPARE(xRange(plot), zoom);
            QVERIFY(legendRight());
        }
        m_w->controls()->setLayerHead(2, 1);
        QVERIFY(head().exact != s);
        QCOMPARE(xRange(plot), zoom);
        QCOMPARE(view->curveUnderLegend(), 0);

        // Zoomed just right of a peak, the line down from it is drawn up to the range's edge: the
        // axis holds it there too.
        size_t p = 0;
        for (size_t i = 0; i + 22 < s.size(); ++i)
            if (peak(i, i + 1) > peak(p, p + 1))
                p = i;
        setXRange(plot, static_cast<double>(p) + 0.5, static_cast<double>(p) + 3.5);
        const float edge = (peak(p, p + 1) + peak(p + 1, p + 2)) / 2;
        QTRY_VERIFY2(
            yTop(plot) >= edge,
            qPrintable(
                QStringLiteral("top %1, the line at the edge %2").arg(yTop(plot)).arg(edge)));

        QTest::mouseDClick(plot, Qt::LeftButton, {}, view->axesRect().center());
        QCOMPARE(xRange(plot), all);
        // Zoomed by the wheel, as a user does: kept too, then another query shows all.
        const QPoint mid = view->axesRect().center();
        QWheelEvent wheel(mid, plot->mapToGlobal(mid), {}, QPoint(0, 120), Qt::NoButton, {},
                          Qt::NoScrollPhase, false);
        QCoreApplication::sendEvent(plot, &wheel);
        const Range wheeled = xRange(plot);
        QVERIFY(wheeled.second - wheeled.first < 0.9 * S);
        m_w->controls()->setK(16);
        QCOMPARE(head().kEff, 16);
        QCOMPARE(xRange(plot), wheeled);
        const int last = static_cast<int>(m_w->lab()->labCapture()->positions()) - 1;
        m_w->lab()->setQueryPosition(last - 20);
        QCOMPARE(head().exact.size(), s.size() - 20);
        QCOMPARE(xRange(plot), Range(-0.5, S - 20.5));
        m_w->lab()->setQueryPosition(last);
        QCOMPARE(head().exact.size(), s.size());
        m_w->controls()->setK(16);
        m_w->controls()->setLayerHead(3, 0);
    }

    void theComparePlotKeepsItsZoomToo() {
        // The compare view's scores plot, zoomed into the first quarter of the positions, keeps
        // the zoom while the head changes; its score axis fits the curves in sight (the last
        // positions' peaks are out of it); a double-click shows every position again.
        namespace att = sparqlab::attention;
        using sparqlab::widgets::style::setXRange, sparqlab::widgets::style::xRange;
        m_w->controls()->setMethod(att::Method::Sparq);
        m_w->controls()->setLayerHead(3, 1);
        auto* cv = m_w->viewWidget<sparqlab::widgets::CompareView>("compare");
        cv->setSecond(att::Method::Quest);
        QVERIFY(m_w->showView(QStringLiteral("compare")));
        m_w->flushRedraw();
        auto* plot = cv->findChild<QWidget*>(QStringLiteral("comparePlot"));
        const auto S = static_cast<double>(cv->first().exact.size());
        const std::pair<double, double> all(-0.5, S - 0.5), zoom(-0.5, S / 4);
        QCOMPARE(xRange(plot), all);
        // The curves' peak at the positions up to x = `upto` (the line to the one after the
        // range's edge reaches at most that one's value).
        const auto peakUpTo = [cv](double upto) {
            float m = 0;
            for (const std::vector<float>* c :
                 {&cv->first().exact, &cv->first().approx, &cv->secondState().approx})
                for (size_t i = 0; i < c->size() && static_cast<double>(i) <= upto; ++i)
                    m = std::max(m, (*c)[i]);
            return m;
        };
        const auto fitted = [&] {
            return peakUpTo(zoom.second) <= cv->plotTop() &&
                   cv->plotTop() < 1.1 * peakUpTo(std::ceil(zoom.second));
        };
        setXRange(plot, zoom.first, zoom.second);
        QTRY_VERIFY(fitted()); // (after the drag, as after a redraw)
        for (const int hh : {0, 1}) {
            m_w->controls()->setLayerHead(3, hh);
            m_w->flushRedraw();
            QCOMPARE(xRange(plot), zoom);
            QVERIFY2(fitted(), qPrintable(QStringLiteral("top %1, the curves in sight reach %2")
                                              .arg(cv->plotTop())
                                              .arg(peakUpTo(zoom.second))));
        }
        QTest::mouseDClick(plot, Qt::LeftButton, {}, plot->rect().center());
        QCOMPARE(xRange(plot), all);
        QVERIFY(m_w->showView(QStringLiteral("head")));
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
        // The query's token in view, low (a third of the way down or more) where the strip
        // scrolled at all: the words before it above. (`at` for the messages.)
        const auto queryLow = [strip](std::pair<int, int>) {
            const QRect q = sparqlab::widgets::queryTokenRect(strip);
            return q.isValid() && strip->viewport()->rect().contains(q.center()) &&
                   (strip->verticalScrollBar()->value() == 0 ||
                    q.top() >= strip->viewport()->height() / 3);
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

    void entriesAreBarsOverThePositionsTheyPool() {
        // A DeepSeek-V4 compressed layer's head (a state made here: 3 entries of 4 positions
        // each, then 16 positions, the window their last 4): the scores plot's x axis stays the
        // positions, each entry a bar over the 4 it pools, its marks there; hovering a position
        // names its own key and its entry; the word strip tints a token by the stronger of the
        // two.
        namespace an = sparqlab::analysis;
        an::HeadState h;
        h.method = sparqlab::attention::Method::Sparq;
        h.entries = 3;
        h.entryRate = 4;
        h.entryTopK = 1;
        h.exact.assign(19, 0.0f);
        for (const auto& [key, s] : std::vector<std::pair<size_t, float>>{
                 {0, 0.1f}, {1, 0.3f}, {2, 0.05f}, {15, 0.1f}, {16, 0.15f}, {17, 0.2f}, {18, 0.1f}})
            h.exact[key] = s;
        h.approx = h.exact;
        h.chosen = h.trueTopK = {1, 17, 18};
        h.modelChosen = {1, 15, 16, 17, 18};
        h.count = 3;
        h.localFrom = 19;
        h.qAbs = h.qRanked = std::vector<float>(8, 1.0f);
        h.components = {0, 1};
        sparqlab::widgets::HeadView view;
        view.resize(1000, 800);
        view.show();
        view.showHead(h, std::vector<std::string>(20, " w"));
        namespace st = sparqlab::widgets::style;
        const QWidget* plot = view.findChild<QWidget*>(QStringLiteral("step2Plot"));
        using Points = std::vector<std::pair<double, double>>;
        const Points bars =
            st::seriesPoints(plot, QStringLiteral("exact s of an entry (4 positions)"));
        QCOMPARE(bars, (Points{{1.5, 0.1f}, {5.5, 0.3f}, {9.5, 0.05f}})); // positions 0–3, 4–7, …
        QVERIFY(st::xRange(plot).first <= 0 && st::xRange(plot).second >= 15 &&
                st::xRange(plot).second < 16);
        const Points chosen = st::seriesPoints(plot, QStringLiteral("chosen (attended)"));
        QCOMPARE(chosen, (Points{{5.5, 0.3f}, {14, 0.2f}, {15, 0.1f}})); // entry 1, 14 and 15
        QCOMPARE(st::seriesPoints(plot, QStringLiteral("the model's own keys")).size(), size_t{5});
        QCOMPARE(view.curveUnderLegend(), 0);
        const QString five = view.scoreTip(5);
        QVERIFY2(five.contains(QStringLiteral("its own key: outside the window")) &&
                     five.contains(QStringLiteral("entry 1 (positions 4–7)")) &&
                     five.contains(QStringLiteral("chosen (attended)")) &&
                     five.contains(QStringLiteral("the model attends it")),
                 qPrintable(five));
        const QString fourteen = view.scoreTip(14);
        QVERIFY2(fourteen.contains(QStringLiteral("its own key (in the window)")) &&
                     fourteen.contains(QStringLiteral("its entry is not complete yet")),
                 qPrintable(fourteen));
        const std::vector<float> tint = view.state().byPosition(h.exact);
        QCOMPARE(tint.size(), size_t{16});
        QCOMPARE(tint[5], 0.3f);  // its entry's
        QCOMPARE(tint[14], 0.2f); // its own
        QCOMPARE(tint[11], 0.05f);
    }

    void kFollowsAShortPromptUntilTheUserSetsIt() {
        // With no k remembered, k follows the prompt (analysis::promptK): half the positions of a
        // short prompt, so that SparQ still leaves some out, and 64 on a long one, with "auto"
        // beside the box; a first screen picks its head at that k. A k the user types stays and
        // is remembered; a window that followed k to its close remembers none.
        namespace an = sparqlab::analysis;
        const QString shortPrompt = QStringLiteral("Mr. Speaker, Mr. Vice President");
        QSettings().remove(QStringLiteral("lab/k"));
        {
            sparqlab::app::MainWindow w;
            w.lab()->openModel(QStringLiteral("demo"));
            QTRY_VERIFY_WITH_TIMEOUT(!w.lab()->isLoading(), 60000);
            QVERIFY(w.controls()->kFollowsPrompt());
            QCOMPARE(w.controls()->config().k, an::kLabK); // before a capture
            w.runPrompt(shortPrompt, /*firstScreen=*/true);
            QTRY_VERIFY_WITH_TIMEOUT(!w.lab()->isBusy(), 60000);
            w.flushRedraw();
            const int64_t S = w.lab()->labCapture()->positions();
            QVERIFY(S > 2 && S < 2 * an::kLabK);
            QCOMPARE(w.controls()->config().k, (S + 1) / 2);
            const auto* kRow = w.findChild<sparqlab::widgets::SliderBox*>(QStringLiteral("k"));
            QCOMPARE(kRow->note(), QStringLiteral("auto"));
            QVERIFY(w.lab()->firstHead().has_value());
            QCOMPARE(w.lab()->firstHead()->k, (S + 1) / 2);
            const an::HeadState& st = w.headView()->state();
            QCOMPARE(static_cast<int64_t>(st.chosen.size()), (S + 1) / 2); // not all S
            QVERIFY(st.outputError > 0);
            w.runPrompt(sparqlab::widgets::PromptPanel::defaultPrompt()); // the passage
            QTRY_VERIFY_WITH_TIMEOUT(!w.lab()->isBusy(), 60000);
            QVERIFY(w.lab()->labCapture()->positions() >= 2 * an::kLabK);
            QCOMPARE(w.controls()->config().k, an::kLabK);
            QVERIFY(w.controls()->kFollowsPrompt());
            // The controls' own config set again (a session made while k followed, the command
            // line's --method over it) keeps k following.
            w.controls()->setConfig(w.controls()->config());
            QVERIFY(w.controls()->kFollowsPrompt());
            // A method whose default l follows k (H2O's k/4) shows the l of the k this capture
            // took, not the last one's clamped.
            w.controls()->setMethod(sparqlab::attention::Method::H2O);
            w.runPrompt(shortPrompt);
            QTRY_VERIFY_WITH_TIMEOUT(!w.lab()->isBusy(), 60000);
            QCOMPARE(w.controls()->config().k, (S + 1) / 2);
            const auto* lRow = w.findChild<sparqlab::widgets::SliderBox*>(QStringLiteral("local"));
            QCOMPARE(static_cast<int64_t>(lRow->value()), w.controls()->config().effectiveLocal());
            QCOMPARE(lRow->note(), QString());
            w.controls()->setMethod(sparqlab::attention::Method::Sparq);
            // Teaching's retrieval page sets k = 16; leaving it gives k back to the prompt.
            w.setTeachingStep(4);
            QTRY_COMPARE_WITH_TIMEOUT(w.controls()->config().k, 16, 60000);
            QVERIFY(!w.controls()->kFollowsPrompt());
            w.setTeachingStep(0);
            QTRY_VERIFY_WITH_TIMEOUT(!w.lab()->isBusy(), 60000);
            QVERIFY(w.controls()->kFollowsPrompt());
            QCOMPARE(w.controls()->config().k, an::kLabK);
        }
        QVERIFY(!QSettings().contains(QStringLiteral("lab/k")));
        {
            sparqlab::app::MainWindow w;
            w.lab()->openModel(QStringLiteral("demo"));
            QTRY_VERIFY_WITH_TIMEOUT(!w.lab()->isLoading(), 60000);
            auto* kRow = w.findChild<sparqlab::widgets::SliderBox*>(QStringLiteral("k"));
            kRow->box()->setValue(40); // as typed
            QVERIFY(!w.controls()->kFollowsPrompt());
            w.runPrompt(shortPrompt);
            QTRY_VERIFY_WITH_TIMEOUT(!w.lab()->isBusy(), 60000);
            const int64_t S = w.lab()->labCapture()->positions();
            QCOMPARE(w.controls()->config().k, std::min<int64_t>(40, S)); // the user's, clamped
            QCOMPARE(kRow->note(), S < 40 ? QStringLiteral("40 → %1").arg(S) : QString());
            // Closed on teaching's page 4 (k = 16 there): the user's k is what is remembered.
            w.setTeachingStep(4);
            QTRY_COMPARE_WITH_TIMEOUT(w.controls()->config().k, 16, 60000);
        }
        QCOMPARE(QSettings().value(QStringLiteral("lab/k")).toInt(), 40);
        QSettings().remove(QStringLiteral("lab/k"));
    }
};

QTEST_MAIN(TestLabHead)
#include "test_lab_head.moc"
