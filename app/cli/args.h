#pragma once
/// \file args.h
/// Command-line options of sparqlab-cli: `--name value`, `--name=value` and `--flag`.
/// Unknown options and missing values are usage errors (exit status 2, CONTRACTS.md §2).

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

namespace sparqlab::cli {

/// A usage error: the caller prints "error: <what>" and exits with status 2.
class UsageError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

/// Parsed options of one subcommand.
class Args {
public:
    /// valued: options that take a value; flags: options that take none.
    Args(const std::vector<std::string>& argv, const std::set<std::string>& valued,
         const std::set<std::string>& flags);

    bool has(const std::string& name) const;
    std::optional<std::string> get(const std::string& name) const;
    std::string required(const std::string& name) const;
    /// An integer option, checked to be a whole number (UsageError otherwise).
    std::optional<int64_t> integer(const std::string& name) const;
    std::optional<double> number(const std::string& name) const;
    /// A comma-separated list of integers, each at least `min` (UsageError otherwise).
    std::optional<std::vector<int64_t>> integerList(const std::string& name,
                                                    int64_t min = INT64_MIN) const;
    const std::vector<std::string>& positional() const { return m_positional; }

private:
    std::map<std::string, std::string> m_values;
    std::set<std::string> m_flags;
    std::vector<std::string> m_positional;
};

/// The whole content of a file an option names; throws "<path>: cannot read (missing?)" or
/// "<path>: is a folder, not a text file".
std::string readTextFile(const std::string& path);

} // namespace sparqlab::cli
