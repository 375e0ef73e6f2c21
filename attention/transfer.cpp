#include "transfer.h"

#include <cmath>

namespace sparqlab::attention {

TransferCounts transferCounts(int64_t S, int64_t d, int64_t k, int64_t r) {
    TransferCounts c;
    c.dense = transferCount(Method::Dense, S, d, k, r);
    c.sparq = transferCount(Method::Sparq, S, d, k, r);
    c.h2o = transferCount(Method::H2O, S, d, k, r);
    c.lminf = transferCount(Method::LmInfinite, S, d, k, r);
    c.flexgen = transferCount(Method::FlexGen, S, d, k, r);
    return c;
}

int64_t transferCount(Method method, int64_t S, int64_t d, int64_t k, int64_t r) {
    TransferArgs a;
    a.S = S;
    a.d = d;
    a.k = k;
    a.r = r;
    return std::llround(transferElements(method, a));
}

double compressionRatio(Method method, int64_t S, int64_t d, int64_t k, int64_t r) {
    return static_cast<double>(transferCount(method, S, d, k, r)) /
           static_cast<double>(transferCount(Method::Dense, S, d, k, r));
}

} // namespace sparqlab::attention
