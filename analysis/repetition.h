#pragma once
/// \file repetition.h
/// The paper's Text Repetition task (App. G) and the demo model's copy probes: a passage of
/// text, then its first characters again; greedy decoding should go on reproducing the passage.
/// Scored by the characters reproduced before the continuation first differs.
///
/// Threading: reentrant.

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace sparqlab::analysis {

/// One probe: `prompt` = passage + " " + the passage's first cueChars characters; the
/// continuation should be `expected`, the passage's characters after the cue.
struct RepetitionProbe {
    std::string prompt;
    std::string expected;
    size_t offset = 0; ///< where the passage starts in the source text (bytes)
};

/// `count` probes spread evenly over `text`, each passage starting after a space (a word);
/// passages of passageChars, cues of cueChars, expected continuations of the rest of the
/// passage. Characters are UTF-8 code points. Fewer probes if the text is too short.
std::vector<RepetitionProbe> repetitionProbes(const std::string& text, int64_t count,
                                              size_t passageChars = 320, size_t cueChars = 64);

/// Characters (code points) of `continuation` equal to `expected` before the first difference.
int64_t reproducedChars(const std::string& continuation, const std::string& expected);

/// The first n code points of UTF-8 `s`.
std::string firstChars(const std::string& s, size_t n);

} // namespace sparqlab::analysis
