// The head view (widgets/head_view.h): SparQ's three steps for the chosen layer and
// head, as the window draws them from its head worker.

#include "app/gui/lab_view.h"

#include <QWidget>

namespace sparqlab::app {
namespace {

class HeadUnit : public LabView {
public:
    HeadUnit(QWidget* widget, QObject* parent) : LabView(parent), m_widget(widget) {}
    QWidget* widget() override { return m_widget; }

private:
    QWidget* m_widget; // the window's own head view: it draws every head state
};

} // namespace
} // namespace sparqlab::app

SPARQLAB_VIEW(head) {
    return {.name = "head",
            .label = "Head view",
            .menu = "&Head View",
            .order = 0,
            .create = [](LabHost& host, QWidget* parent) -> LabView* {
                return new HeadUnit(host.headWidget(), parent);
            }};
}
