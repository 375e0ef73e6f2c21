#include "repetition.h"

namespace sparqlab::analysis {

namespace {

bool isContinuation(unsigned char c) {
    return (c & 0xC0) == 0x80;
}

/// Byte offset of the n-th code point from `from` (or s.size()).
size_t advanceChars(const std::string& s, size_t from, size_t n) {
    size_t i = from;
    for (size_t k = 0; k < n && i < s.size(); ++k) {
        ++i;
        while (i < s.size() && isContinuation(static_cast<unsigned char>(s[i])))
            ++i;
    }
    return i;
}

} // namespace

std::string firstChars(const std::string& s, size_t n) {
    return s.substr(0, advanceChars(s, 0, n));
}

std::vector<RepetitionProbe> repetitionProbes(const std::string& text, int64_t count,
                                              size_t passageChars, size_t cueChars) {
    std::vector<RepetitionProbe> probes;
    if (count < 1 || text.size() < 2 * passageChars)
        return probes;
    const size_t span = text.size() - 2 * passageChars;
    for (int64_t p = 0; p < count; ++p) {
        size_t start = span * static_cast<size_t>(p) / static_cast<size_t>(count);
        while (start < text.size() && text[start] != ' ')
            ++start;
        ++start; // the first character of a word
        if (start >= text.size())
            break;
        const size_t end = advanceChars(text, start, passageChars);
        const std::string passage = text.substr(start, end - start);
        const size_t cue = advanceChars(passage, 0, cueChars);
        RepetitionProbe r;
        r.prompt = passage + " " + passage.substr(0, cue);
        r.expected = passage.substr(cue);
        r.offset = start;
        probes.push_back(std::move(r));
    }
    return probes;
}

int64_t reproducedChars(const std::string& continuation, const std::string& expected) {
    int64_t chars = 0;
    size_t i = 0;
    while (i < continuation.size() && i < expected.size()) {
        // One code point at a time: all of its bytes must agree.
        const size_t next = advanceChars(expected, i, 1);
        if (next > continuation.size() ||
            continuation.compare(i, next - i, expected, i, next - i) != 0)
            break;
        i = next;
        ++chars;
    }
    return chars;
}

} // namespace sparqlab::analysis
