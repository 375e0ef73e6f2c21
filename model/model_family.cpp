// The family table (model_family.h), built from the units of model/families/ (the generated
// family_registry.inc).

#include "model_family.h"

#include "base/unit_table.h"

#include <algorithm>
#include <sstream>
#include <stdexcept>

#include "family_registry.inc" // each unit's function and kAll, the list of them

namespace sparqlab::model {

namespace {

void finish(std::vector<ModelFamily>& all) {
    for (size_t i = 0; i < all.size(); ++i) {
        const ModelFamily& f = all[i];
        if (!f.name || !f.label || f.architectures.empty() || !f.parse)
            throw std::logic_error(std::string("the model family registry: unit '") +
                                   (f.name ? f.name : "?") + "' leaves a field unset");
        for (size_t j = 0; j < i; ++j)
            for (const std::string& a : f.architectures)
                if (std::count(all[j].architectures.begin(), all[j].architectures.end(), a))
                    throw std::logic_error("the model family registry: " + a +
                                           " belongs to two families");
    }
    std::sort(all.begin(), all.end(), [](const ModelFamily& a, const ModelFamily& b) {
        return std::string(a.name) < b.name;
    });
}

} // namespace

const std::vector<const ModelFamily*>& modelFamilies() {
    return base::unitTable(families::kAll, finish);
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

} // namespace sparqlab::model
