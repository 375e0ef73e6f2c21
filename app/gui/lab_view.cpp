// The view table (lab_view.h), built from the units of app/gui/views/ (the generated
// view_registry.inc).

#include "lab_view.h"

#include "base/unit_table.h"

#include <algorithm>
#include <stdexcept>

#include "view_registry.inc" // each unit's function and kAll, the list of them

namespace sparqlab::app {

namespace {

void finish(std::vector<ViewSpec>& all) {
    for (const ViewSpec& v : all)
        if (!v.name || !v.label || !v.create)
            throw std::logic_error(std::string("the view registry: unit '") +
                                   (v.name ? v.name : "?") + "' leaves a field unset");
    std::stable_sort(all.begin(), all.end(),
                     [](const ViewSpec& a, const ViewSpec& b) { return a.order < b.order; });
}

} // namespace

const std::vector<const ViewSpec*>& viewSpecs() {
    return base::unitTable(views::kAll, finish);
}

const ViewSpec* findView(const QString& name) {
    for (const ViewSpec* v : viewSpecs())
        if (name == QLatin1String(v->name))
            return v;
    return nullptr;
}

QString viewNames() {
    QStringList names;
    for (const ViewSpec* v : viewSpecs())
        names << QString::fromUtf8(v->name);
    return names.join(QStringLiteral(", "));
}

} // namespace sparqlab::app
