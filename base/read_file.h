#pragma once
/// \file read_file.h
/// A whole file's bytes, for the readers of capture/ (config.json, tokenizer.json, chat
/// templates): each names the file in its own error type when there is nothing to read.

#include <optional>
#include <string>

namespace sparqlab::base {

/// The file's bytes; nullopt when it cannot be opened or read.
std::optional<std::string> readWholeFile(const std::string& path);

} // namespace sparqlab::base
