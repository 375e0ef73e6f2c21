#pragma once
/// \file config_keys.h
/// Reading config.json keys as Hugging Face does: HF's default for a key the file omits (HF
/// writes only values that differ from a config class's defaults), and one ConfigError naming
/// the file and the key for a value of the wrong kind or out of range. The model family units
/// (model/families/) read their keys through it.

#include "model/model_config.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

namespace sparqlab::model {

using json = nlohmann::json;

/// Reads keys with HF's defaults and reports bad values with the file and key.
class ConfigKeys {
public:
    /// `prefix` names where the object sits (e.g. "text_config.") in messages.
    ConfigKeys(const json& j, std::string path, std::string prefix = {})
        : m_j(j), m_path(std::move(path)), m_prefix(std::move(prefix)) {}

    [[noreturn]] void fail(const std::string& key, const std::string& what) const {
        throw ConfigError(m_path + ": key '" + m_prefix + key + "' " + what);
    }
    bool has(const std::string& key) const { return m_j.contains(key) && !m_j[key].is_null(); }
    /// Given, as null (for keys whose default is not null).
    bool isNull(const std::string& key) const { return m_j.contains(key) && m_j[key].is_null(); }

    /// The most layers (or heads, experts) a config may name: more is a broken file, and every
    /// per-layer list is made before any weight is read.
    static constexpr int64_t kMaxLayers = int64_t{1} << 16;

    int64_t integer(const std::string& key, int64_t def, int64_t min = 1,
                    int64_t max = int64_t{1} << 40) const {
        if (!has(key))
            return def;
        const json& v = m_j[key];
        if (!v.is_number_integer() &&
            !(v.is_number_float() && std::floor(v.get<double>()) == v.get<double>()))
            fail(key, "must be an integer");
        // Range-checked before any conversion: a huge float or unsigned value does not fit
        // int64 (found by fuzz_config).
        constexpr int64_t kMax = int64_t{1} << 40;
        if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(kMax))
            fail(key, "is out of range (" + v.dump() + ")");
        if (v.is_number_float() && std::abs(v.get<double>()) > static_cast<double>(kMax))
            fail(key, "is out of range (" + v.dump() + ")");
        const int64_t x =
            v.is_number_integer() ? v.get<int64_t>() : static_cast<int64_t>(v.get<double>());
        if (x < min || x > kMax || x > max)
            fail(key, "is out of range (" + std::to_string(x) + ")");
        return x;
    }
    int64_t required(const std::string& key, int64_t def) const {
        // HF has a default for every key; `def < 0` marks a key we insist on.
        if (def < 0 && !has(key))
            fail(key, "is missing");
        return integer(key, def);
    }
    double number(const std::string& key, double def) const {
        if (!has(key))
            return def;
        if (!m_j[key].is_number())
            fail(key, "must be a number");
        const double x = m_j[key].get<double>();
        if (!std::isfinite(x))
            fail(key, "must be finite");
        return x;
    }
    bool boolean(const std::string& key, bool def) const {
        if (!has(key))
            return def;
        if (!m_j[key].is_boolean())
            fail(key, "must be true or false");
        return m_j[key].get<bool>();
    }
    std::string string(const std::string& key, const std::string& def) const {
        if (!has(key))
            return def;
        if (!m_j[key].is_string())
            fail(key, "must be a string");
        return m_j[key].get<std::string>();
    }
    std::vector<int64_t> ids(const std::string& key) const {
        std::vector<int64_t> out;
        if (!has(key))
            return out;
        const json& v = m_j[key];
        if (v.is_number_integer())
            out.push_back(v.get<int64_t>());
        else if (v.is_array())
            for (const json& x : v) {
                if (!x.is_number_integer())
                    fail(key, "must hold integers");
                out.push_back(x.get<int64_t>());
            }
        else
            fail(key, "must be an integer or a list of integers");
        return out;
    }
    std::vector<double> numbers(const std::string& key) const {
        std::vector<double> out;
        if (!has(key))
            return out;
        if (!m_j[key].is_array())
            fail(key, "must be a list of numbers");
        for (const json& x : m_j[key]) {
            if (!x.is_number() || !std::isfinite(x.get<double>()))
                fail(key, "must hold finite numbers");
            out.push_back(x.get<double>());
        }
        return out;
    }
    const json& raw(const std::string& key) const { return m_j[key]; }
    /// The keys of a nested object (e.g. rope_scaling), its name in messages.
    ConfigKeys nested(const std::string& key) const {
        return ConfigKeys(m_j[key], m_path, m_prefix + key + ".");
    }

private:
    const json& m_j;
    std::string m_path;
    std::string m_prefix;
};

} // namespace sparqlab::model
