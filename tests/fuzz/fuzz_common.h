#pragma once
// Shared by the fuzz targets: inputs that must be files are written to a per-process path.
#include <cstdint>
#include <cstdio>
#include <string>
#include <unistd.h>

namespace sparqlab::fuzz {
inline std::string writeTemp(const uint8_t* data, size_t size, const char* name) {
    static const std::string path = "/tmp/sparqlab-fuzz-" + std::to_string(::getpid()) + "-" + name;
    FILE* f = std::fopen(path.c_str(), "wb");
    if (f) {
        std::fwrite(data, 1, size, f);
        std::fclose(f);
    }
    return path;
}
} // namespace sparqlab::fuzz
