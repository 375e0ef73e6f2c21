/// \file resources.cpp
/// resourcePath(): the one translation unit that knows where the checkout's resources/ folder
/// is. Its absolute path is a compile definition of this file alone, so a second checkout
/// compiles every other file of the model library to the same object (ccache hits).

#include "resources.h"

#include <cstdlib>

namespace sparqlab::model {

std::string resourcePath(const std::string& relative) {
    if (const char* env = std::getenv("SPARQLAB_RESOURCES"); env && *env)
        return std::string(env) + "/" + relative;
    return std::string(SPARQLAB_RESOURCES_DIR) + "/" + relative;
}

} // namespace sparqlab::model
