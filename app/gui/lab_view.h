#pragma once
/// \file lab_view.h
/// The lab's views as units (app/gui/views/, one file a view; docs/adding-a-view.md): each
/// registers its name (what --view and a session store), its tab and menu labels and a factory
/// of a LabView — the widget and what it draws when the lab's capture or settings change. Views
/// observe the lab through LabHost (app/lab/lab_host.h). The window builds its tabs and its View
/// menu from the table, and sessions store the view's name, never its index.
///
/// Threading: GUI thread only. A view that computes does it in a worker (ComputedView,
/// computed_view.h); nothing that can take a frame runs on the GUI thread (docs/ARCHITECTURE.md).

#include "app/lab/lab_host.h"

#include <QObject>
#include <QString>

#include <functional>
#include <memory>
#include <string>
#include <vector>

class QWidget;

namespace sparqlab::app {

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
    /// Computes whenever the capture or the settings change, shown or not (the head view: the
    /// panels and the other views follow the state it hands the lab).
    bool live = false;
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
