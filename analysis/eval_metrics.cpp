// The metrics of the evaluation (eval_task_table.h): QA exact match as the paper's harness scores
// it, ROUGE-L F with NLTK's Porter stemmer as rouge_score computes it, the characters a repetition
// reproduces, the needle found.

#include "eval_task_table.h"
#include "eval_text.h"

#include <algorithm>
#include <map>

namespace sparqlab::analysis {

using namespace evaltext;

namespace {

// ---- ROUGE-L's Porter stemmer (NLTK's default mode) ----

class Porter {
public:
    static std::string stem(const std::string& word) {
        static const std::map<std::string, std::string> irregular{
            {"skies", "sky"},      {"sky", "sky"},          {"dying", "die"},
            {"lying", "lie"},      {"tying", "tie"},        {"news", "news"},
            {"innings", "inning"}, {"inning", "inning"},    {"outings", "outing"},
            {"outing", "outing"},  {"cannings", "canning"}, {"canning", "canning"},
            {"howe", "howe"},      {"proceed", "proceed"},  {"exceed", "exceed"},
            {"succeed", "succeed"}};
        if (const auto it = irregular.find(word); it != irregular.end())
            return it->second;
        if (word.size() <= 2)
            return word;
        std::string w = step1a(word);
        w = step1b(w);
        w = step1c(w);
        w = step2(w);
        w = step3(w);
        w = step4(w);
        w = step5a(w);
        return step5b(w);
    }

private:
    using Cond = std::function<bool(const std::string&)>;
    struct Rule {
        std::string suffix, replacement;
        Cond cond;
    };

    static bool consonant(const std::string& w, size_t i) {
        const char c = w[i];
        if (c == 'a' || c == 'e' || c == 'i' || c == 'o' || c == 'u')
            return false;
        if (c == 'y')
            return i == 0 ? true : !consonant(w, i - 1);
        return true;
    }
    static int measure(const std::string& s) {
        int m = 0;
        for (size_t i = 0; i + 1 < s.size(); ++i)
            m += !consonant(s, i) && consonant(s, i + 1);
        return m;
    }
    static bool positive(const std::string& s) { return measure(s) > 0; }
    static bool hasVowel(const std::string& s) {
        for (size_t i = 0; i < s.size(); ++i)
            if (!consonant(s, i))
                return true;
        return false;
    }
    static bool endsWith(const std::string& w, const std::string& s) {
        return w.size() >= s.size() && w.compare(w.size() - s.size(), s.size(), s) == 0;
    }
    static bool doubleConsonant(const std::string& w) {
        return w.size() >= 2 && w[w.size() - 1] == w[w.size() - 2] && consonant(w, w.size() - 1);
    }
    static bool cvc(const std::string& w) {
        const size_t n = w.size();
        if (n >= 3 && consonant(w, n - 3) && !consonant(w, n - 2) && consonant(w, n - 1) &&
            w[n - 1] != 'w' && w[n - 1] != 'x' && w[n - 1] != 'y')
            return true;
        return n == 2 && !consonant(w, 0) && consonant(w, 1);
    }
    /// The first rule whose suffix the word has decides (its condition failing keeps the word).
    static std::string apply(const std::string& w, const std::vector<Rule>& rules) {
        for (const Rule& r : rules) {
            if (r.suffix == "*d") {
                if (doubleConsonant(w)) {
                    const std::string stem = w.substr(0, w.size() - 2);
                    return !r.cond || r.cond(stem) ? stem + r.replacement : w;
                }
                continue;
            }
            if (endsWith(w, r.suffix)) {
                const std::string stem = w.substr(0, w.size() - r.suffix.size());
                return !r.cond || r.cond(stem) ? stem + r.replacement : w;
            }
        }
        return w;
    }
    static std::string step1a(const std::string& w) {
        if (endsWith(w, "ies") && w.size() == 4)
            return w.substr(0, 1) + "ie";
        return apply(w, {{"sses", "ss", {}}, {"ies", "i", {}}, {"ss", "ss", {}}, {"s", "", {}}});
    }
    static std::string step1b(const std::string& w) {
        if (endsWith(w, "ied"))
            return w.substr(0, w.size() - 3) + (w.size() == 4 ? "ie" : "i");
        if (endsWith(w, "eed")) {
            const std::string stem = w.substr(0, w.size() - 3);
            return measure(stem) > 0 ? stem + "ee" : w;
        }
        std::string mid;
        bool ok = false;
        for (const char* suffix : {"ed", "ing"})
            if (endsWith(w, suffix)) {
                mid = w.substr(0, w.size() - std::string(suffix).size());
                if (hasVowel(mid)) {
                    ok = true;
                    break;
                }
            }
        if (!ok)
            return w;
        const char last = mid.empty() ? '\0' : mid.back();
        return apply(
            mid,
            {{"at", "ate", {}},
             {"bl", "ble", {}},
             {"iz", "ize", {}},
             {"*d", std::string(1, last),
              [last](const std::string&) { return last != 'l' && last != 's' && last != 'z'; }},
             {"", "e", [](const std::string& s) { return measure(s) == 1 && cvc(s); }}});
    }
    static std::string step1c(const std::string& w) {
        return apply(w, {{"y", "i", [](const std::string& s) {
                              return s.size() > 1 && consonant(s, s.size() - 1);
                          }}});
    }
    static std::string step2(const std::string& w) {
        if (endsWith(w, "alli") && positive(w.substr(0, w.size() - 4)))
            return step2(w.substr(0, w.size() - 4) + "al");
        const Cond p = positive;
        return apply(w, {{"ational", "ate", p},
                         {"tional", "tion", p},
                         {"enci", "ence", p},
                         {"anci", "ance", p},
                         {"izer", "ize", p},
                         {"bli", "ble", p},
                         {"alli", "al", p},
                         {"entli", "ent", p},
                         {"eli", "e", p},
                         {"ousli", "ous", p},
                         {"ization", "ize", p},
                         {"ation", "ate", p},
                         {"ator", "ate", p},
                         {"alism", "al", p},
                         {"iveness", "ive", p},
                         {"fulness", "ful", p},
                         {"ousness", "ous", p},
                         {"aliti", "al", p},
                         {"iviti", "ive", p},
                         {"biliti", "ble", p},
                         {"fulli", "ful", p},
                         {"logi", "log", [w](const std::string&) {
                              return positive(w.substr(0, w.size() - 3));
                          }}});
    }
    static std::string step3(const std::string& w) {
        const Cond p = positive;
        return apply(w, {{"icate", "ic", p},
                         {"ative", "", p},
                         {"alize", "al", p},
                         {"iciti", "ic", p},
                         {"ical", "ic", p},
                         {"ful", "", p},
                         {"ness", "", p}});
    }
    static std::string step4(const std::string& w) {
        const Cond m1 = [](const std::string& s) { return measure(s) > 1; };
        return apply(w, {{"al", "", m1},
                         {"ance", "", m1},
                         {"ence", "", m1},
                         {"er", "", m1},
                         {"ic", "", m1},
                         {"able", "", m1},
                         {"ible", "", m1},
                         {"ant", "", m1},
                         {"ement", "", m1},
                         {"ment", "", m1},
                         {"ent", "", m1},
                         {"ion", "",
                          [](const std::string& s) {
                              return measure(s) > 1 && !s.empty() &&
                                     (s.back() == 's' || s.back() == 't');
                          }},
                         {"ou", "", m1},
                         {"ism", "", m1},
                         {"ate", "", m1},
                         {"iti", "", m1},
                         {"ous", "", m1},
                         {"ive", "", m1},
                         {"ize", "", m1}});
    }
    static std::string step5a(const std::string& w) {
        if (endsWith(w, "e")) {
            const std::string stem = w.substr(0, w.size() - 1);
            if (measure(stem) > 1 || (measure(stem) == 1 && !cvc(stem)))
                return stem;
        }
        return w;
    }
    static std::string step5b(const std::string& w) {
        return apply(w, {{"ll", "l", [w](const std::string&) {
                              return measure(w.substr(0, w.size() - 1)) > 1;
                          }}});
    }
};

/// Python's re.sub of `^[\s"'_.,]*(the |a |an )?|[\s"'_.,]*$` with "" on lower-case text.
std::u32string qaNormalise(const std::u32string& s) {
    auto junk = [](char32_t c) {
        return isSpace(c) || c == '"' || c == '\'' || c == '_' || c == '.' || c == ',';
    };
    size_t b = 0;
    while (b < s.size() && junk(s[b]))
        ++b;
    for (const std::u32string article : {U"the ", U"a ", U"an "})
        if (s.compare(b, article.size(), article) == 0) {
            b += article.size();
            break;
        }
    size_t e = s.size();
    while (e > b && junk(s[e - 1]))
        --e;
    return s.substr(b, e - b);
}

} // namespace

double qaExactMatchScore(const std::string& output, const EvalExample& example) {
    return qaExactMatch(output, example.answers) ? 1.0 : 0.0;
}

bool qaExactMatch(const std::string& output, const std::vector<std::string>& answers) {
    const std::u32string out = qaNormalise(lowerAll(toU32(output)));
    for (const std::string& a : answers) {
        const std::u32string ans = qaNormalise(lowerAll(toU32(a)));
        if (!ans.empty() && out.compare(0, ans.size(), ans) == 0)
            return true;
    }
    return false;
}

std::string porterStem(const std::string& word) {
    return Porter::stem(word);
}

std::vector<std::string> rougeTokens(const std::string& text) {
    std::vector<std::string> tokens;
    std::string cur;
    for (char32_t c : lowerAll(toU32(text))) {
        if ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9')) {
            cur.push_back(static_cast<char>(c));
        } else if (!cur.empty()) {
            tokens.push_back(cur);
            cur.clear();
        }
    }
    if (!cur.empty())
        tokens.push_back(cur);
    for (std::string& t : tokens)
        if (t.size() > 3)
            t = Porter::stem(t);
    return tokens;
}

double rougeLF(const std::string& reference, const std::string& candidate) {
    const std::vector<std::string> r = rougeTokens(reference), c = rougeTokens(candidate);
    if (r.empty() || c.empty())
        return 0.0;
    std::vector<int64_t> prev(c.size() + 1, 0), cur(c.size() + 1, 0);
    for (size_t i = 1; i <= r.size(); ++i) {
        for (size_t j = 1; j <= c.size(); ++j)
            cur[j] = r[i - 1] == c[j - 1] ? prev[j - 1] + 1 : std::max(prev[j], cur[j - 1]);
        std::swap(prev, cur);
    }
    const double lcs = static_cast<double>(prev[c.size()]);
    const double precision = lcs / static_cast<double>(c.size());
    const double recall = lcs / static_cast<double>(r.size());
    return precision + recall > 0 ? 2 * precision * recall / (precision + recall) : 0.0;
}

int64_t matchLengthChars(const std::string& generation, const std::string& reference) {
    std::u32string g = toU32(generation), r = toU32(reference);
    auto strip = [](std::u32string& s) {
        size_t b = 0;
        while (b < s.size() && isSpace(s[b]))
            ++b;
        s.erase(0, b);
    };
    strip(g);
    strip(r);
    const size_t n = std::min(g.size(), r.size());
    for (size_t i = 0; i < n; ++i)
        if (g[i] != r[i])
            return static_cast<int64_t>(i);
    return static_cast<int64_t>(r.size());
}

bool needleFound(const std::string& output, const std::string& key) {
    return !key.empty() && output.find(key) != std::string::npos;
}

int64_t utf8Length(const std::string& s) {
    int64_t n = 0;
    for (unsigned char c : s)
        n += (c & 0xC0) != 0x80;
    return n;
}

} // namespace sparqlab::analysis
