#pragma once
/// \file command_help.h
/// What a subcommand's --help prints after its usage line and summary: its own options, one
/// line each with the default and the range, the model options it shares with the other model
/// commands, and an example (the ATTN options follow, from the method table). Options are
/// named as the command's Args take them; test_cli gives each line's option to its command.

#include <string>

namespace sparqlab::cli {

/// "\noptions:\n  --seq LIST …\nexample: …\n", or empty for a command whose usage line says all.
std::string commandDetails(const std::string& command);

} // namespace sparqlab::cli
