#pragma once
/// \file job.h
/// The one convention of long work in SparQ Lab (capture, generate, eval, bench, calibrate, the
/// lab's workers, the demo trainer): a Job reports progress through an optional callback and is
/// cancelled through an optional atomic flag that the work polls between units of work; a
/// cancelled job throws Cancelled (and leaves no half-written file behind: atomic_file.h).
/// whisper.cpp's progress_callback / abort_callback, as ARCHITECTURE.md asks.
///
/// Threading: the flag may be set from any thread; progress is called on the working thread.

#include <atomic>
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>

namespace sparqlab::base {

/// Thrown by work whose Job was cancelled (the one error type of cancellation).
class Cancelled : public std::runtime_error {
public:
    Cancelled() : std::runtime_error("cancelled") {}
};

/// (done, total) units of work and what is being done ("layer 3 of 12", "example 4"): a
/// caller shows it; the return value is ignored.
using ProgressFn = std::function<void(int64_t done, int64_t total, const std::string& what)>;

/// What long work takes: where to report and when to stop. Copyable; both parts optional.
struct Job {
    ProgressFn progress;
    const std::atomic<bool>* cancel = nullptr;

    /// Whether cancellation was asked for.
    bool cancelled() const { return cancel && cancel->load(std::memory_order_relaxed); }
    /// Throws Cancelled when cancellation was asked for: called between units of work.
    void check() const {
        if (cancelled())
            throw Cancelled();
    }
    /// Reports progress, then check().
    void step(int64_t done, int64_t total, const std::string& what = {}) const {
        if (progress)
            progress(done, total, what);
        check();
    }
    /// The same job with progress mapped into [from, from + span) of `total` (a part of a
    /// larger job: the prefill of a generation, one example of an evaluation).
    Job part(int64_t from, int64_t span, int64_t total) const;
};

} // namespace sparqlab::base
