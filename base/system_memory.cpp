#include "system_memory.h"

#include <fstream>
#include <string>

namespace sparqlab::base {

int64_t availableMemoryBytes() {
    std::ifstream f("/proc/meminfo");
    std::string key;
    int64_t value = 0;
    std::string unit;
    while (f >> key >> value >> unit)
        if (key == "MemAvailable:")
            return value * 1024;
    return -1;
}

} // namespace sparqlab::base
