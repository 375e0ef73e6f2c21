#include "transfer.h"

namespace sparqlab::attention {

TransferCounts transferCounts(int64_t S, int64_t d, int64_t k, int64_t r) {
    TransferCounts c;
    c.dense = 2 * S * d + 2 * d;         // Eq. 3
    c.sparq = S * r + 2 * k * d + 4 * d; // Eq. 11
    c.h2o = 2 * k * d + 2 * d + 2 * S;   // App. G
    c.lminf = 2 * k * d + 2 * d;         // App. G
    c.flexgen = S * d + k * d + 2 * d;   // App. G
    return c;
}

int64_t transferCount(Method method, int64_t S, int64_t d, int64_t k, int64_t r) {
    const TransferCounts c = transferCounts(S, d, k, r);
    switch (method) {
    case Method::Dense:
        return c.dense;
    case Method::Sparq:
        return c.sparq;
    case Method::H2O:
        return c.h2o;
    case Method::LmInfinite:
        return c.lminf;
    case Method::FlexGen:
    case Method::Oracle:
        return c.flexgen;
    }
    return c.dense;
}

double compressionRatio(Method method, int64_t S, int64_t d, int64_t k, int64_t r) {
    return static_cast<double>(transferCount(method, S, d, k, r)) /
           static_cast<double>(transferCounts(S, d, k, r).dense);
}

} // namespace sparqlab::attention
