#pragma once
/// \file expert_keeper.h
/// Which decoded experts stay in memory within a budget of bytes (gpt-oss's MXFP4 experts on
/// the CPU, moe.cpp): the experts reached in the most forward calls. No tensors here: the
/// decoder asks, and holds or drops the tensors as told.

#include <cstdint>
#include <vector>

namespace sparqlab::model {

/// The rule: an expert is counted once per call that routes tokens to it. A reached expert that
/// is not held is decoded; it is kept if it fits the budget beside those held, or in place of
/// held ones reached in fewer calls (the fewest first; among equals the longest unreached).
/// Held ones reached as often are never dropped for it: when more experts take turns than fit
/// (every layer's, in order, each call), the same ones stay, so a fraction budget / total of
/// the reaches find their expert decoded instead of none.
class ExpertKeeper {
public:
    explicit ExpertKeeper(int64_t budget) : m_budget(budget) {}

    /// Expert `id` (≥ 0) is reached: counts it, and says whether it is held (decoded already).
    bool reach(int64_t id);

    /// What to do with expert `id` just decoded (`bytes` once decoded), after reach() said it
    /// was not held.
    struct Admission {
        bool keep = false;         ///< hold it (after dropping `drop`)
        std::vector<int64_t> drop; ///< held experts to drop first, as told
    };
    Admission admit(int64_t id, int64_t bytes);

    int64_t held() const { return m_held; }       ///< bytes held
    int64_t reaches() const { return m_reaches; } ///< reach() calls
    int64_t hits() const { return m_hits; }       ///< of them, experts held

private:
    struct Entry {
        int64_t calls = 0, last = 0, bytes = 0;
        bool held = false;
    };
    Entry& entry(int64_t id);

    int64_t m_budget, m_held = 0, m_clock = 0, m_reaches = 0, m_hits = 0;
    std::vector<Entry> m_entries; ///< by id
};

} // namespace sparqlab::model
