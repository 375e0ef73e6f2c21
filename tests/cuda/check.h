#pragma once
// A minimal check harness for the tests of tests/cuda/: they build without Qt (the GPU machine
// has none), so they count failures themselves and exit with CTest's skip code 77 when there is
// nothing to run on, saying why on one line.

#include <cstdio>
#include <cstdlib>
#include <string>

namespace sparqlab::test {

inline int& failures() {
    static int n = 0;
    return n;
}
inline int& checks() {
    static int n = 0;
    return n;
}

inline void check(bool ok, const std::string& what) {
    ++checks();
    if (!ok) {
        ++failures();
        if (failures() <= 50)
            std::fprintf(stderr, "FAIL: %s\n", what.c_str());
    }
}

/// The exit code: 0 when every check passed, 1 otherwise.
inline int finish(const char* name) {
    std::printf("%s: %d checks, %d failed\n", name, checks(), failures());
    return failures() == 0 ? 0 : 1;
}

/// Skips the whole test (CTest SKIP_RETURN_CODE 77).
[[noreturn]] inline void skip(const std::string& why) {
    std::printf("SKIPPED: %s\n", why.c_str());
    std::exit(77);
}

} // namespace sparqlab::test
