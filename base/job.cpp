#include "job.h"

namespace sparqlab::base {

Job Job::part(int64_t from, int64_t span, int64_t total) const {
    Job j;
    j.cancel = cancel;
    if (progress) {
        const ProgressFn outer = progress;
        j.progress = [outer, from, span, total](int64_t done, int64_t of, const std::string& w) {
            const int64_t inner = of > 0 ? span * done / of : 0;
            outer(from + inner, total, w);
        };
    }
    return j;
}

} // namespace sparqlab::base
