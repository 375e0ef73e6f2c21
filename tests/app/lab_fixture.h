#pragma once
// What the lab's GUI tests share (test_lab, test_lab_files): the demo model opened in one window
// offscreen with a passage of the 2012 address captured, the head view after a redraw, and a
// session round trip into a second window.

#include "app/gui/main_window.h"
#include "app/lab/lab_export.h"
#include "widgets/compare_view.h"
#include "widgets/controls_panel.h"
#include "widgets/head_view.h"
#include "widgets/overview_view.h"
#include "widgets/transfer_panel.h"

#include <QObject>
#include <QStandardPaths>
#include <QTemporaryDir>
#include <QtTest>

#include <memory>

namespace sparqlab::test {

inline constexpr const char* kLabPrompt =
    "Mr. Speaker, Mr. Vice President, Members of Congress, distinguished guests, and fellow "
    "Americans: Last month, I went to Andrews Air Force Base and welcomed home some of our last "
    "troops to serve in Iraq. Together, we offered a final, proud salute to the colors under "
    "which more than a million of our fellow citizens fought and several thousand gave their "
    "lives. We gather tonight knowing that this generation of heroes has made the United States "
    "safer and more respected around the world.";

class LabFixture : public QObject {
protected:
    std::unique_ptr<app::MainWindow> m_w;

    /// The window with the demo model open and kLabPrompt captured (initTestCase's work).
    void openLab() {
        QStandardPaths::setTestModeEnabled(true); // settings of tests stay out of the user's
        m_w = std::make_unique<app::MainWindow>();
        m_w->resize(1400, 900);
        m_w->show();
        m_w->lab()->openModel(QStringLiteral("demo"));
        QTRY_VERIFY_WITH_TIMEOUT(!m_w->lab()->isLoading(), 60000);
        m_w->runPrompt(QString::fromLatin1(kLabPrompt));
        QTRY_VERIFY_WITH_TIMEOUT(!m_w->lab()->isBusy(), 120000);
        QVERIFY2(m_w->lab()->labCapture() && m_w->lab()->lastError().isEmpty(),
                 qPrintable(m_w->lab()->lastError()));
    }

    /// The head view after the redraw the last control change asked for (redraws are
    /// coalesced: they run on the next turn of the event loop, or now when flushed).
    const analysis::HeadState& head() const {
        m_w->flushRedraw();
        return m_w->headView()->state();
    }

    /// Saves the lab as a session and opens it in `w2` (no model), drawn.
    void reopen(app::MainWindow& w2) {
        QTemporaryDir dir;
        const QString path = dir.filePath(QStringLiteral("session.h5"));
        m_w->saveSessionTo(path);
        QTRY_VERIFY_WITH_TIMEOUT(!m_w->lab()->isExporting(), 60000);
        w2.lab()->openSession(path);
        QTRY_VERIFY_WITH_TIMEOUT(!w2.lab()->isBusy(), 60000);
        w2.flushRedraw();
        QVERIFY2(w2.lab()->lastError().isEmpty(), qPrintable(w2.lab()->lastError()));
    }
};

} // namespace sparqlab::test
