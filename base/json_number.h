#pragma once
/// \file json_number.h
/// Numbers read from JSON files, checked for range before any conversion: what
/// attention::parseWholeNumber is for the command line. A JSON number may be an integer, an
/// unsigned integer beyond int64's range or a double of any size (9.04e82), and converting a
/// double outside the target's range is undefined behaviour; these helpers never convert one.

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdint>
#include <optional>
#include <string>

namespace sparqlab::base {

/// `v` as a whole number in [lo, hi]: an integer, or a double with an integral value; nullopt
/// for anything else (not a number, NaN, ±inf, a fraction, out of range).
template <typename Json>
std::optional<int64_t> jsonWholeNumber(const Json& v, int64_t lo, int64_t hi) {
    if (v.is_number_unsigned()) {
        const auto u = v.template get<uint64_t>();
        if (u > static_cast<uint64_t>(INT64_MAX))
            return std::nullopt;
        const auto x = static_cast<int64_t>(u);
        return x >= lo && x <= hi ? std::optional<int64_t>(x) : std::nullopt;
    }
    if (v.is_number_integer()) {
        const auto x = v.template get<int64_t>();
        return x >= lo && x <= hi ? std::optional<int64_t>(x) : std::nullopt;
    }
    if (v.is_number_float()) {
        const double d = v.template get<double>();
        // Compared as doubles first: only then is the conversion defined.
        if (!std::isfinite(d) || d != std::floor(d) || d < static_cast<double>(lo) ||
            d > static_cast<double>(hi) || std::fabs(d) >= 9.2e18)
            return std::nullopt;
        return static_cast<int64_t>(d);
    }
    return std::nullopt;
}

/// The same, or `Error(where + ": \"field\" must be a whole number in [lo, hi], got …")`.
template <typename Error, typename Json>
int64_t requireWholeNumber(const Json& v, const std::string& where, const std::string& field,
                           int64_t lo, int64_t hi) {
    if (const auto x = jsonWholeNumber(v, lo, hi))
        return *x;
    std::string got = v.dump();
    if (got.size() > 40)
        got = got.substr(0, 40) + "…";
    throw Error(where + ": \"" + field + "\" must be a whole number in [" + std::to_string(lo) +
                ", " + std::to_string(hi) + "], got " + got);
}

} // namespace sparqlab::base
