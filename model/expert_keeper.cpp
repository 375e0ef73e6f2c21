// Which decoded experts stay in memory within a budget (expert_keeper.h).

#include "model/expert_keeper.h"

#include <algorithm>
#include <stdexcept>

namespace sparqlab::model {

ExpertKeeper::Entry& ExpertKeeper::entry(int64_t id) {
    if (id < 0)
        throw std::invalid_argument("ExpertKeeper: an expert's id is ≥ 0");
    if (static_cast<size_t>(id) >= m_entries.size())
        m_entries.resize(static_cast<size_t>(id) + 1);
    return m_entries[static_cast<size_t>(id)];
}

bool ExpertKeeper::reach(int64_t id) {
    Entry& e = entry(id);
    ++e.calls;
    e.last = ++m_clock;
    ++m_reaches;
    m_hits += e.held ? 1 : 0;
    return e.held;
}

ExpertKeeper::Admission ExpertKeeper::admit(int64_t id, int64_t bytes) {
    Admission a;
    Entry& self = entry(id);
    if (self.held || bytes > m_budget)
        return a;
    // Held experts reached in fewer calls than this one, the fewest (then the longest
    // unreached) first, dropped until it fits; if they cannot make room, nothing is dropped.
    std::vector<int64_t> fewer;
    for (size_t i = 0; i < m_entries.size(); ++i)
        if (m_entries[i].held && m_entries[i].calls < self.calls)
            fewer.push_back(static_cast<int64_t>(i));
    std::sort(fewer.begin(), fewer.end(), [&](int64_t x, int64_t y) {
        const Entry &a1 = m_entries[static_cast<size_t>(x)],
                    &b1 = m_entries[static_cast<size_t>(y)];
        return a1.calls != b1.calls ? a1.calls < b1.calls : a1.last < b1.last;
    });
    int64_t freed = 0;
    size_t n = 0;
    while (m_held - freed + bytes > m_budget && n < fewer.size())
        freed += m_entries[static_cast<size_t>(fewer[n++])].bytes;
    if (m_held - freed + bytes > m_budget)
        return a;
    a.drop.assign(fewer.begin(), fewer.begin() + static_cast<std::ptrdiff_t>(n));
    for (int64_t d : a.drop) {
        Entry& e = m_entries[static_cast<size_t>(d)];
        e.held = false;
        m_held -= e.bytes;
    }
    self.held = true;
    self.bytes = bytes;
    m_held += bytes;
    a.keep = true;
    return a;
}

} // namespace sparqlab::model
