// The family table (model_family.h), built from the units of capture/families/ (the generated
// family_registry.inc).

#include "model_family.h"

#include <algorithm>
#include <sstream>
#include <stdexcept>

#define SPARQLAB_UNIT(unit)                                                                        \
    namespace sparqlab::capture::families {                                                        \
    ModelFamily unit();                                                                            \
    }
#include "family_registry.inc"
#undef SPARQLAB_UNIT

namespace sparqlab::capture {

namespace {

using UnitFn = ModelFamily (*)();
#define SPARQLAB_UNIT(unit) families::unit,
constexpr UnitFn kUnits[] = {
#include "family_registry.inc"
};
#undef SPARQLAB_UNIT

std::vector<ModelFamily> build() {
    std::vector<ModelFamily> all;
    for (UnitFn unit : kUnits) {
        ModelFamily f = unit();
        if (!f.name || !f.label || f.architectures.empty() || !f.parse)
            throw std::logic_error(std::string("the model family registry: unit '") +
                                   (f.name ? f.name : "?") + "' leaves a field unset");
        for (const ModelFamily& g : all)
            for (const std::string& a : f.architectures)
                if (std::find(g.architectures.begin(), g.architectures.end(), a) !=
                    g.architectures.end())
                    throw std::logic_error("the model family registry: " + a +
                                           " belongs to two families");
        all.push_back(std::move(f));
    }
    std::sort(all.begin(), all.end(), [](const ModelFamily& a, const ModelFamily& b) {
        return std::string(a.name) < b.name;
    });
    return all;
}

} // namespace

const std::vector<const ModelFamily*>& modelFamilies() {
    static const std::vector<ModelFamily> all = build();
    static const std::vector<const ModelFamily*> pointers = [] {
        std::vector<const ModelFamily*> v;
        for (const ModelFamily& f : all)
            v.push_back(&f);
        return v;
    }();
    return pointers;
}

const ModelFamily* findFamily(const std::string& architecture) {
    for (const ModelFamily* f : modelFamilies())
        if (std::find(f->architectures.begin(), f->architectures.end(), architecture) !=
            f->architectures.end())
            return f;
    return nullptr;
}

std::string familiesMarkdown() {
    std::ostringstream os;
    os << "| family | `architectures` in config.json | models |\n";
    os << "| --- | --- | --- |\n";
    for (const ModelFamily* f : modelFamilies()) {
        std::string names;
        for (const std::string& a : f->architectures)
            names += (names.empty() ? "`" : ", `") + a + "`";
        os << "| " << f->label << " (`" << f->name << "`) | " << names << " | " << f->examples
           << " |\n";
    }
    return os.str();
}

} // namespace sparqlab::capture
