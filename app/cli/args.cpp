#include "args.h"

#include "attention/attention.h"

#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace sparqlab::cli {

Args::Args(const std::vector<std::string>& argv, const std::set<std::string>& valued,
           const std::set<std::string>& flags) {
    for (size_t i = 0; i < argv.size(); ++i) {
        const std::string& a = argv[i];
        if (a.rfind("--", 0) != 0 || a.size() == 2) {
            m_positional.push_back(a);
            continue;
        }
        std::string name = a.substr(2);
        std::optional<std::string> inlineValue;
        if (const size_t eq = name.find('='); eq != std::string::npos) {
            inlineValue = name.substr(eq + 1);
            name = name.substr(0, eq);
        }
        if (m_values.count(name) || m_flags.count(name)) // the last would win, unseen
            throw UsageError("option --" + name + " is given twice");
        if (valued.count(name)) {
            if (inlineValue) {
                m_values[name] = *inlineValue;
            } else {
                if (i + 1 >= argv.size())
                    throw UsageError("option --" + name + " needs a value");
                // The next word is one of the command's options: the value was left out
                // (`stats --json --seed 1` wrote its JSON to a file named --seed).
                const std::string& next = argv[i + 1];
                if (next.rfind("--", 0) == 0 && next.size() > 2) {
                    const std::string other = next.substr(2, next.find('=') - 2);
                    if (valued.count(other) || flags.count(other))
                        throw UsageError("option --" + name + " needs a value; the next word is " +
                                         "the option --" + other + " (a value that is one: --" +
                                         name + "=" + next + ")");
                }
                m_values[name] = argv[++i];
            }
        } else if (flags.count(name)) {
            if (inlineValue)
                throw UsageError("option --" + name + " takes no value");
            m_flags.insert(name);
        } else {
            throw UsageError("unknown option --" + name);
        }
    }
}

bool Args::has(const std::string& name) const {
    return m_flags.count(name) > 0 || m_values.count(name) > 0;
}

std::optional<std::string> Args::get(const std::string& name) const {
    const auto it = m_values.find(name);
    if (it == m_values.end())
        return std::nullopt;
    return it->second;
}

std::string Args::required(const std::string& name) const {
    const auto v = get(name);
    if (!v)
        throw UsageError("missing required option --" + name);
    return *v;
}

std::optional<int64_t> Args::integer(const std::string& name) const {
    const auto v = get(name);
    if (!v)
        return std::nullopt;
    const std::optional<int64_t> x = attention::parseWholeNumber(*v);
    if (!x)
        throw UsageError("option --" + name + " needs a whole number, got '" + *v + "'");
    return x;
}

std::optional<double> Args::number(const std::string& name) const {
    const auto v = get(name);
    if (!v)
        return std::nullopt;
    const std::optional<double> x = attention::parseFiniteNumber(*v);
    if (!x)
        throw UsageError("option --" + name + " needs a finite number, got '" + *v + "'");
    return x;
}

std::optional<std::vector<int64_t>> Args::integerList(const std::string& name, int64_t min) const {
    const auto v = get(name);
    if (!v)
        return std::nullopt;
    std::vector<int64_t> out;
    std::stringstream ss(*v);
    std::string item;
    while (std::getline(ss, item, ',')) {
        const std::optional<int64_t> x = attention::parseWholeNumber(item);
        if (!x || *x < min)
            throw UsageError("--" + name + " needs comma-separated integers" +
                             (min > INT64_MIN ? " of at least " + std::to_string(min) : "") +
                             ", got '" + item + "'");
        out.push_back(*x);
    }
    return out;
}

std::string readTextFile(const std::string& path) {
    std::error_code ec;
    if (std::filesystem::is_directory(path, ec))
        throw std::runtime_error(path + ": is a folder, not a text file");
    std::ifstream in(path, std::ios::binary);
    if (!in)
        throw std::runtime_error(path + ": cannot read (missing?)");
    std::ostringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

} // namespace sparqlab::cli
