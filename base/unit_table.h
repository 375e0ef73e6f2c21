#pragma once
/// \file unit_table.h
/// What the registries of the unit tables share (the methods, the eval tasks, the model
/// families, the GUI views): the generated list of a folder's unit functions turned once into
/// the table, checked and ordered, with addresses that stay fixed. A table's own rules (which
/// fields must be set, its order, what it derives) are its `finish`.
///
/// Threading: built on first use (thread-safe statics); immutable after.

#include <cstddef>
#include <vector>

namespace sparqlab::base {

/// The table of `units` (each returns its unit's spec): made once, then `finish` checks it
/// (throwing std::logic_error naming the unit), fills what it derives and orders it.
template <class Spec, std::size_t N>
const std::vector<const Spec*>& unitTable(Spec (*const (&units)[N])(),
                                          void (*finish)(std::vector<Spec>& all)) {
    static const std::vector<Spec> all = [&] {
        std::vector<Spec> v;
        v.reserve(N);
        for (Spec (*unit)() : units)
            v.push_back(unit());
        finish(v);
        return v;
    }();
    static const std::vector<const Spec*> pointers = [] {
        std::vector<const Spec*> v;
        for (const Spec& s : all)
            v.push_back(&s);
        return v;
    }();
    return pointers;
}

} // namespace sparqlab::base
