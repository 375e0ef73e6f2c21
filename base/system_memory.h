#pragma once
/// \file system_memory.h
/// What the machine has to offer now: the memory available to this process (the model's
/// load and the benchmark size themselves by it). Reads /proc; no libtorch.

#include <cstdint>

namespace sparqlab::base {

/// Bytes of memory available to this process now (MemAvailable), or −1 if unknown.
int64_t availableMemoryBytes();

} // namespace sparqlab::base
