#pragma once
/// \file lab_view.h
/// The lab's views as units (app/gui/views/, one file a view; docs/adding-a-view.md): each
/// registers its name (what --view and a session store), its tab and menu labels and a factory
/// of a LabView — the widget and what it draws when the lab's capture or settings change. The
/// window (LabHost) builds its tabs and its View menu from the table, and sessions store the
/// view's name, never its index.
///
/// Threading: GUI thread only. A view that computes does it in a worker (LabHost::runWorker);
/// nothing that can take a frame runs on the GUI thread (docs/ARCHITECTURE.md).

#include "analysis/lab.h"
#include "analysis/session.h"
#include "attention/job.h"

#include <QObject>
#include <QString>

#include <functional>
#include <memory>
#include <string>
#include <vector>

class QWidget;

namespace sparqlab::capture {
class Model;
}

namespace sparqlab::app {

/// What a view may ask of the window.
class LabHost {
public:
    virtual ~LabHost() = default;
    /// The capture the views show (the lab's, or its view at the decode step); null before a
    /// run.
    virtual std::shared_ptr<const analysis::LabCapture> shownCapture() const = 0;
    /// The lab's method and parameters, and the head shown.
    virtual attention::AttentionConfig labConfig() const = 0;
    virtual int labLayer() const = 0;
    virtual int labHead() const = 0;
    /// The whole capture (every position; shownCapture() ends at the query shown); null before
    /// a run.
    virtual std::shared_ptr<const analysis::LabCapture> wholeCapture() const = 0;
    /// The position whose query the views show (−1 before a run), and choosing another (a
    /// position whose query is not held is a status line).
    virtual int queryPosition() const = 0;
    virtual void setQueryPosition(int position) = 0;
    /// The head view's state for the lab's method (null before the first is drawn).
    virtual const analysis::HeadState* headState() const = 0;
    /// Shows another head (the overview's click) or view.
    virtual void selectHead(int layer, int head) = 0;
    virtual void showViewNamed(const QString& name) = 0;
    /// Asks for a redraw of what is shown (coalesced).
    virtual void scheduleRedraw() = 0;
    virtual void showStatus(const QString& message, int milliseconds = 0) = 0;
    /// The model open (null: none, as for a session opened without it), and how it was named.
    virtual std::shared_ptr<capture::Model> model() const = 0;
    virtual QString modelSpec() const = 0;
    /// Runs `work` with the model in the model's worker (one user of the model at a time; the
    /// prompt box's Cancel stops it through the job), then `done` on the GUI thread with the
    /// error ("" when none) and whether it was cancelled. False (and a status line) when the
    /// model is busy or none is open.
    virtual bool runModelWork(std::function<void(const attention::Job& job)> work,
                              std::function<void(const QString& error, bool cancelled)> done) = 0;
    /// Stops the model's work (what Cancel does).
    virtual void cancelModelWork() = 0;
    /// Whether the timing panel is measuring (timings share the cores: one at a time).
    virtual bool timingBusy() const = 0;
    /// The window's head view widget (it draws every head state the head worker computes).
    virtual QWidget* headWidget() = 0;
};

/// One view of the lab: a tab's widget and what it draws.
class LabView : public QObject {
public:
    using QObject::QObject;
    /// The tab's widget (owned by the view's parent window).
    virtual QWidget* widget() = 0;
    /// The capture or the settings changed while this view is shown, or it was just shown:
    /// draw what it shows (in a worker when it computes).
    virtual void refresh() {}
    /// The capture or the settings changed while another view is shown: draw on refresh().
    virtual void invalidate() {}
    /// Waits for the work it started (tests, screenshots), then draws its result.
    virtual void flush() {}
    /// Whether work it started is still running.
    virtual bool busy() const { return false; }
    /// Whether it is timing (the timing panel waits: timings share the cores).
    virtual bool measuring() const { return false; }
    /// What it keeps in a session (the overview's measure, the compared method), and back.
    virtual void saveTo(analysis::Session&) const {}
    virtual void restoreFrom(const analysis::Session&) {}
};

/// One view of the table.
struct ViewSpec {
    const char* name = nullptr;  ///< --view, the session's view: "head", "overview", …
    const char* label = nullptr; ///< the tab
    const char* menu = nullptr;  ///< the View menu's entry (null: none)
    int order = 0;               ///< the tab's position
    LabView* (*create)(LabHost& host, QWidget* parent) = nullptr;
};

/// Every view, in tab order.
const std::vector<const ViewSpec*>& viewSpecs();
/// The view named `name`; null if none.
const ViewSpec* findView(const QString& name);
/// "head, overview, …": the names, for help and messages.
QString viewNames();

} // namespace sparqlab::app

/// Registers a view unit: `SPARQLAB_VIEW(overview) { ViewSpec v; …; return v; }` at file scope
/// defines sparqlab::app::views::overview(), which the generated registry
/// (app/CMakeLists.txt, view_registry.inc) calls.
#define SPARQLAB_VIEW(unit)                                                                        \
    namespace sparqlab::app::views {                                                               \
    ViewSpec unit();                                                                               \
    }                                                                                              \
    ::sparqlab::app::ViewSpec sparqlab::app::views::unit()
