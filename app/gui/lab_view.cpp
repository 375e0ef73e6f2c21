// The view table (lab_view.h), built from the units of app/gui/views/ (the generated
// view_registry.inc).

#include "lab_view.h"

#include <algorithm>
#include <stdexcept>

#define SPARQLAB_UNIT(unit)                                                                        \
    namespace sparqlab::app::views {                                                               \
    ViewSpec unit();                                                                               \
    }
#include "view_registry.inc"
#undef SPARQLAB_UNIT

namespace sparqlab::app {

namespace {

using UnitFn = ViewSpec (*)();
#define SPARQLAB_UNIT(unit) views::unit,
constexpr UnitFn kUnits[] = {
#include "view_registry.inc"
};
#undef SPARQLAB_UNIT

std::vector<ViewSpec> build() {
    std::vector<ViewSpec> all;
    for (UnitFn unit : kUnits) {
        ViewSpec v = unit();
        if (!v.name || !v.label || !v.create)
            throw std::logic_error(std::string("the view registry: unit '") +
                                   (v.name ? v.name : "?") + "' leaves a field unset");
        all.push_back(v);
    }
    std::stable_sort(all.begin(), all.end(),
                     [](const ViewSpec& a, const ViewSpec& b) { return a.order < b.order; });
    return all;
}

} // namespace

const std::vector<const ViewSpec*>& viewSpecs() {
    static const std::vector<ViewSpec> all = build();
    static const std::vector<const ViewSpec*> pointers = [] {
        std::vector<const ViewSpec*> v;
        for (const ViewSpec& s : all)
            v.push_back(&s);
        return v;
    }();
    return pointers;
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
