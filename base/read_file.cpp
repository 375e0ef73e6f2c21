// A whole file's bytes (read_file.h).

#include "read_file.h"

#include <fstream>
#include <sstream>

namespace sparqlab::base {

std::optional<std::string> readWholeFile(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in)
        return std::nullopt;
    std::ostringstream ss;
    ss << in.rdbuf();
    if (in.bad())
        return std::nullopt;
    return ss.str();
}

} // namespace sparqlab::base
