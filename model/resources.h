#pragma once
/// \file resources.h
/// Files the project ships under resources/ (the demo model, the held-out evaluation text).
/// No libtorch here: the widgets include it.

#include <string>

namespace sparqlab::model {

/// A file under resources/ (the environment variable SPARQLAB_RESOURCES overrides where that
/// folder is).
std::string resourcePath(const std::string& relative);

} // namespace sparqlab::model
