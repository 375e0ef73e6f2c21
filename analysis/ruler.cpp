#include "ruler.h"

#include "text/tokenizer.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <random>
#include <set>
#include <stdexcept>

namespace sparqlab::analysis::ruler {

namespace {

using Rng = std::mt19937_64;

const char* kNoise = "The grass is green. The sky is blue. The sun is yellow. Here we go. There "
                     "and back again.";

// The NIAH depths: round(linspace(0, 100, 40)).
std::vector<int> depths() {
    std::vector<int> d;
    for (int i = 0; i < 40; ++i)
        d.push_back(static_cast<int>(std::lround(100.0 * i / 39.0)));
    return d;
}

int64_t uniform(Rng& rng, int64_t lo, int64_t hi) { // [lo, hi]
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
}

/// `k` distinct indices of [0, n), in draw order (the callers make n ≥ k).
std::vector<int64_t> sampleDistinct(Rng& rng, int64_t n, int64_t k) {
    if (k > n)
        throw std::logic_error("ruler: " + std::to_string(k) + " distinct of " + std::to_string(n));
    std::vector<int64_t> all(static_cast<size_t>(n));
    std::iota(all.begin(), all.end(), 0);
    for (int64_t i = 0; i < k; ++i)
        std::swap(all[static_cast<size_t>(i)], all[static_cast<size_t>(uniform(rng, i, n - 1))]);
    all.resize(static_cast<size_t>(k));
    return all;
}

/// RULER's "fixed shuffle": a fresh generator of the seed each time, so the permutation
/// depends only on the length.
template <typename T> void fixedShuffle(std::vector<T>& v, uint64_t seed) {
    Rng fresh(seed);
    std::shuffle(v.begin(), v.end(), fresh);
}

std::string join(const std::vector<std::string>& v, const std::string& sep) {
    std::string out;
    for (size_t i = 0; i < v.size(); ++i)
        out += (i ? sep : "") + v[i];
    return out;
}

void replaceAll(std::string& s, const std::string& from, const std::string& to) {
    for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size()))
        s.replace(at, from.size(), to);
}

std::string number(Rng& rng) {
    return std::to_string(uniform(rng, 1000000, 9999999));
}

std::string uuid(Rng& rng) {
    const uint64_t hi = rng(), lo = rng();
    char buf[40];
    std::snprintf(buf, sizeof buf, "%08llx-%04llx-4%03llx-%04llx-%012llx",
                  static_cast<unsigned long long>(hi >> 32),
                  static_cast<unsigned long long>((hi >> 16) & 0xffff),
                  static_cast<unsigned long long>(hi & 0xfff),
                  static_cast<unsigned long long>(0x8000 | ((lo >> 48) & 0x3fff)),
                  static_cast<unsigned long long>(lo & 0xffffffffffffULL));
    return buf;
}

std::string wordKey(Rng& rng, const Resources& r) {
    const auto n = static_cast<int64_t>(r.words.size());
    return r.words[static_cast<size_t>(uniform(rng, 0, n - 1))] + "-" +
           r.words[static_cast<size_t>(uniform(rng, 0, n - 1))];
}

std::string draw(const char* type, Rng& rng, const Resources& r) {
    const std::string t = type;
    return t == "numbers" ? number(rng) : t == "uuids" ? uuid(rng) : wordKey(rng, r);
}

/// Sentences: split after . ! ? followed by a space and a capital letter or a quote.
std::vector<std::string> sentences(const std::string& text) {
    std::vector<std::string> out;
    size_t start = 0;
    for (size_t i = 0; i + 2 < text.size(); ++i) {
        const char c = text[i];
        if ((c == '.' || c == '!' || c == '?') && text[i + 1] == ' ' &&
            (std::isupper(static_cast<unsigned char>(text[i + 2])) || text[i + 2] == '"')) {
            out.push_back(text.substr(start, i + 1 - start));
            start = i + 2;
        }
    }
    if (start < text.size())
        out.push_back(text.substr(start));
    return out;
}

// ---- the size search (LONGCONTEXT.md §1) ----

/// A sample of `units` haystack units for sample `index` (the search's probes are sample 0).
using Make = std::function<Sample(int64_t units, Rng& rng, int64_t index)>;

bool fits(const Sample& s, int64_t L, int64_t tgen, const CountTokens& count, int64_t* length) {
    *length = count(s.input + s.answerPrefix) + tgen;
    return *length <= L;
}

/// `probe` units give the tokens per unit tpu and the search's upper end is ⌊3·L/tpu⌋ (inc
/// units), or for CWE (`cwe`) 2·⌊L/tpu⌋ from a probe of 4,096 words (LONGCONTEXT.md §1,
/// common_words_extraction.py: a probe of inc = 10 words is mostly its one-shot example and
/// 300 common words, and set the bound far below the target).
std::vector<Sample> searchAndGenerate(const Make& make, int64_t inc, int64_t L, int64_t tgen,
                                      int64_t n, Rng& rng, const CountTokens& count,
                                      const std::string& name, bool cwe = false) {
    const int64_t probe = cwe ? 4096 : inc;
    int64_t length = 0;
    (void)fits(make(probe, rng, 0), L, tgen, count, &length);
    const double tpu =
        std::max(1e-9, static_cast<double>(length - tgen) / static_cast<double>(probe));
    const double Ld = static_cast<double>(L);
    const auto estimate =
        cwe ? 2 * static_cast<int64_t>(std::floor(Ld / tpu)) : static_cast<int64_t>(3.0 * Ld / tpu);
    int64_t lo = 1, hi = std::max(estimate, 2 * inc), best = 1;
    while (lo <= hi) { // the largest N whose fresh probe fits
        const int64_t mid = lo + (hi - lo) / 2;
        if (fits(make(mid, rng, 0), L, tgen, count, &length)) {
            best = mid;
            lo = mid + 1;
        } else {
            hi = mid - 1;
        }
    }
    // Per sample: shrink until it fits. RULER steps back a whole inc; a tenth of it keeps the
    // samples near the target (a stated deviation: an essay inc is 500 words, ~650 tokens).
    const int64_t back = std::max<int64_t>(1, inc / 10);
    std::vector<Sample> out;
    for (int64_t i = 0; i < n; ++i) {
        int64_t units = best;
        Sample s = make(units, rng, i);
        while (!fits(s, L, tgen, count, &length)) {
            if (units <= 1)
                throw std::invalid_argument(name + ": the smallest haystack does not fit " +
                                            std::to_string(L) + " tokens (" +
                                            std::to_string(length) + " with " +
                                            std::to_string(tgen) + " to generate)");
            units = std::max<int64_t>(1, units - back);
            s = make(units, rng, i);
        }
        s.length = length;
        out.push_back(std::move(s));
    }
    return out;
}

// ---- NIAH (§3) ----

Sample niahSample(const NiahSettings& c, int64_t N, Rng& rng, uint64_t seed, const Resources& r) {
    std::vector<std::string> keys, needles;
    std::vector<std::vector<std::string>> values;
    const std::string plural = c.value;
    for (int i = 0; i < std::max(c.keys, c.queries); ++i) {
        std::string key;
        do // distinct keys (a repeated one would make two answers)
            key = draw(c.key, rng, r);
        while (std::find(keys.begin(), keys.end(), key) != keys.end());
        keys.push_back(key);
        values.emplace_back();
        for (int j = 0; j < c.values; ++j) {
            values.back().push_back(draw(c.value, rng, r));
            needles.push_back("One of the special magic " + plural + " for " + key +
                              " is: " + values.back().back() + ".");
        }
    }
    fixedShuffle(needles, seed);
    N = std::max<int64_t>(N, static_cast<int64_t>(needles.size())); // a place per needle
    std::string context;
    const std::string hay = c.haystack;
    if (hay == "essay") {
        std::vector<std::string> words;
        for (int64_t i = 0; i < N; ++i)
            words.push_back(r.essayWords[static_cast<size_t>(i) % r.essayWords.size()]);
        const std::vector<std::string> sents = sentences(join(words, " "));
        const int64_t S = static_cast<int64_t>(sents.size());
        const std::vector<int> D = depths();
        std::vector<int64_t> at;
        for (const int64_t d : sampleDistinct(rng, static_cast<int64_t>(D.size()),
                                              static_cast<int64_t>(needles.size())))
            at.push_back(S * D[static_cast<size_t>(d)] / 100);
        std::sort(at.begin(), at.end());
        std::vector<std::string> parts;
        int64_t from = 0;
        for (size_t i = 0; i < needles.size(); ++i) {
            std::vector<std::string> run(sents.begin() + from, sents.begin() + at[i]);
            parts.push_back(join(run, " "));
            parts.push_back(needles[i]);
            from = at[i];
        }
        parts.push_back(join(std::vector<std::string>(sents.begin() + from, sents.end()), " "));
        context = join(parts, " ");
    } else {
        std::vector<std::string> items;
        for (int64_t i = 0; i < N; ++i) {
            if (hay == "noise") {
                items.push_back(kNoise);
                continue;
            }
            std::string key; // a distractor's key is never a real one (a stated deviation)
            do
                key = draw(c.key, rng, r);
            while (std::find(keys.begin(), keys.end(), key) != keys.end());
            items.push_back("One of the special magic " + plural + " for " + key +
                            " is: " + draw(c.value, rng, r) + ".");
        }
        std::vector<int64_t> at = sampleDistinct(rng, N, static_cast<int64_t>(needles.size()));
        std::sort(at.rbegin(), at.rend());
        for (size_t i = 0; i < needles.size(); ++i)
            items.insert(items.begin() + at[i], needles[i]);
        context = join(items, "\n");
    }
    // The queried keys, in random order; their values, key by key.
    Sample s;
    std::vector<std::string> queried;
    for (const int64_t k : sampleDistinct(rng, static_cast<int64_t>(keys.size()), c.queries)) {
        queried.push_back(keys[static_cast<size_t>(k)]);
        for (const std::string& v : values[static_cast<size_t>(k)])
            s.outputs.push_back(v);
    }
    std::string query = queried.front();
    if (queried.size() > 1)
        query = join(std::vector<std::string>(queried.begin(), queried.end() - 1), ", ") +
                ", and " + queried.back();
    std::string t = "Some special magic {type_needle_v} are hidden within the following text. "
                    "Make sure to memorize it. I will quiz you about the {type_needle_v} "
                    "afterwards.\n{context}\nWhat are all the special magic {type_needle_v} for "
                    "{query} mentioned in the provided text?";
    std::string p = " The special magic {type_needle_v} for {query} mentioned in the provided text "
                    "are";
    std::string type = plural;
    if (c.queries * c.values == 1) { // singular: the template rewritten before it is filled
        for (std::string* x : {&t, &p}) {
            replaceAll(*x, "Some", "A");
            replaceAll(*x, "are all", "is");
            replaceAll(*x, "are", "is");
            replaceAll(*x, "answers", "answer");
        }
        type.pop_back();
    }
    for (std::string* x : {&t, &p}) {
        replaceAll(*x, "{type_needle_v}", type);
        replaceAll(*x, "{query}", query);
    }
    const size_t at = t.find("{context}"); // filled last: the context is never re-parsed
    s.input = t.substr(0, at) + context + t.substr(at + 9);
    s.answerPrefix = p;
    return s;
}

// ---- variable tracking (§4) ----

std::string letters(Rng& rng, int n) {
    std::string s;
    for (int i = 0; i < n; ++i)
        s += static_cast<char>('A' + uniform(rng, 0, 25));
    return s;
}

std::vector<std::string> names(Rng& rng, int letterCount) {
    std::vector<std::string> out;
    while (out.size() < 5) {
        const std::string n = letters(rng, letterCount);
        if (std::find(out.begin(), out.end(), n) == out.end()) // redrawn (a stated deviation)
            out.push_back(n);
    }
    return out;
}

const char* kVtTemplate = "Memorize and track the chain(s) of variable assignment hidden in the "
                          "following text.\n\n{context}\nQuestion: Find all variables that are "
                          "assigned the value {query} in the text above.";

std::string vtPrefix(const std::string& value) {
    return " Answer: According to the chain(s) of variable assignment in the text above, 5 "
           "variables are assigned the value " +
           value + ", they are: ";
}

/// The chain in N noise paragraphs (HEAD: statements on lines of their own).
std::string vtContext(const std::vector<std::string>& n, const std::string& value, int64_t N,
                      Rng& rng) {
    N = std::max<int64_t>(N, 5); // a paragraph after each statement
    std::vector<std::string> statements{"VAR " + n[0] + " = " + value};
    for (size_t j = 1; j < 5; ++j)
        statements.push_back("VAR " + n[j] + " = VAR " + n[j - 1] + " ");
    std::vector<std::string> items(static_cast<size_t>(N), kNoise);
    std::vector<int64_t> at = sampleDistinct(rng, N, 5);
    std::sort(at.begin(), at.end());
    for (size_t j = 5; j-- > 0;) // from the last, so that earlier indices stay
        items.insert(items.begin() + at[j], statements[j]);
    return join(items, "\n");
}

std::string fill(std::string t, const std::string& context, const std::string& query) {
    replaceAll(t, "{query}", query);
    const size_t at = t.find("{context}");
    return t.substr(0, at) + context + t.substr(at + 9);
}

// ---- common words (§5) ----

std::string numbered(const std::vector<std::string>& words) {
    std::string out;
    for (size_t i = 0; i < words.size(); ++i)
        out += (i ? " " : "") + std::to_string(i + 1) + ". " + words[i];
    return out;
}

const char* kCweTemplate = "Below is a numbered list of words. In these words, some appear more "
                           "often than others. Memorize the ones that appear most often.\n"
                           "{context}\nQuestion: What are the 10 most common words in the above "
                           "list?";
const char* kCwePrefix = " Answer: The top 10 words that appear most often in the list are:";

/// A list of `n` distinct pool words, the first 10 `common` times each, the rest `rare` times.
std::pair<std::vector<std::string>, std::vector<std::string>>
cweList(const std::vector<std::string>& pool, int64_t n, int common, int rare, Rng& rng,
        uint64_t seed) {
    std::vector<std::string> chosen;
    for (const int64_t i : sampleDistinct(rng, static_cast<int64_t>(pool.size()),
                                          std::min<int64_t>(n, static_cast<int64_t>(pool.size()))))
        chosen.push_back(pool[static_cast<size_t>(i)]);
    std::vector<std::string> list;
    for (size_t i = 0; i < chosen.size(); ++i)
        for (int t = 0; t < (i < 10 ? common : rare); ++t)
            list.push_back(chosen[i]);
    fixedShuffle(list, seed);
    chosen.resize(std::min<size_t>(10, chosen.size()));
    return {list, chosen};
}

// ---- frequent words (§6) ----

std::string fweContext(const std::vector<std::string>& vocab, int64_t M, uint64_t seed) {
    const double zeta = M_PI * M_PI / 6;
    std::vector<std::string> all;
    for (size_t k = 0; k < vocab.size(); ++k) {
        const auto times = static_cast<int64_t>(
            std::floor(static_cast<double>(M) * std::pow(static_cast<double>(k + 1), -2.0) / zeta));
        for (int64_t t = 0; t < times; ++t)
            all.push_back(vocab[k]);
    }
    fixedShuffle(all, seed);
    return join(all, " ");
}

const char* kFweTemplate =
    "Read the following coded text and track the frequency of each coded word. Find the three "
    "most frequently appeared coded words. {context}\nQuestion: Do not provide any explanation. "
    "Please ignore the dots '....'. What are the three most frequently appeared words in the "
    "above coded text?";
const char* kFwePrefix =
    " Answer: According to the coded text above, the three most frequently appeared words are:";

std::vector<Sample> frequentWords(int64_t L, int64_t tgen, int64_t n, Rng& rng, uint64_t seed,
                                  const CountTokens& count) {
    const int64_t budget = L - tgen, V = std::max<int64_t>(5, budget / 50),
                  step = std::max<int64_t>(1, budget / 32);
    auto vocabulary = [&] {
        std::set<std::string> distinct;
        while (static_cast<int64_t>(distinct.size()) < V) {
            std::string w;
            for (int i = 0; i < 6; ++i)
                w += static_cast<char>('a' + uniform(rng, 0, 25));
            distinct.insert(w);
        }
        std::vector<std::string> v(distinct.begin(), distinct.end());
        fixedShuffle(v, seed);
        v.front() = "...";
        return v;
    };
    auto sample = [&](const std::vector<std::string>& v, int64_t M) {
        Sample s;
        s.input = fill(kFweTemplate, fweContext(v, M, seed), "");
        s.answerPrefix = kFwePrefix;
        s.outputs = {v[1], v[2], v[3]};
        return s;
    };
    auto tokens = [&](const Sample& s) { return count(s.input + s.answerPrefix); };
    int64_t M = std::max<int64_t>(1, budget / 6);
    {
        const std::vector<std::string> v = vocabulary();
        while (tokens(sample(v, M)) < budget)
            M += step;
        M = std::max<int64_t>(step, M - step);
    }
    std::vector<Sample> out;
    for (int64_t i = 0; i < n; ++i) {
        const std::vector<std::string> v = vocabulary();
        int64_t m = M;
        Sample s = sample(v, m);
        while (tokens(s) > budget && m > step) {
            m -= step;
            s = sample(v, m);
        }
        s.length = tokens(s) + tgen;
        if (s.length > L)
            throw std::invalid_argument("fwe: the smallest text does not fit " + std::to_string(L) +
                                        " tokens");
        out.push_back(std::move(s));
    }
    return out;
}

// ---- qa (§7) ----

const char* kQaInstruction = "Answer the question based on the given documents. Only give me the "
                             "answer and do not output any other words.";

/// The documents of sample `q` with D documents: its gold documents, then the article's others,
/// then random ones (or D − |gold| of the article's others), in a fixed shuffle.
Sample qaSample(const QaData& d, size_t q, int64_t D, Rng& rng, uint64_t seed) {
    const QaData::Question& question = d.questions[q];
    std::vector<size_t> chosen = question.gold;
    const auto wanted = static_cast<size_t>(std::max<int64_t>(D, 0));
    const size_t rest = wanted > chosen.size() ? wanted - chosen.size() : 0;
    if (rest > question.more.size()) {
        chosen.insert(chosen.end(), question.more.begin(), question.more.end());
        std::vector<size_t> others;
        std::vector<bool> taken(d.docs.size(), false);
        for (const size_t i : chosen)
            taken[i] = true;
        for (size_t i = 0; i < d.docs.size(); ++i)
            if (!taken[i])
                others.push_back(i);
        const auto extra = static_cast<int64_t>(std::min(others.size(), wanted - chosen.size()));
        for (const int64_t i : sampleDistinct(rng, static_cast<int64_t>(others.size()), extra))
            chosen.push_back(others[static_cast<size_t>(i)]);
    } else {
        for (const int64_t i : sampleDistinct(rng, static_cast<int64_t>(question.more.size()),
                                              static_cast<int64_t>(rest)))
            chosen.push_back(question.more[static_cast<size_t>(i)]);
    }
    fixedShuffle(chosen, seed);
    std::vector<std::string> documents;
    for (size_t i = 0; i < chosen.size(); ++i)
        documents.push_back("Document " + std::to_string(i + 1) + ":\n" + d.docs[chosen[i]]);
    Sample s;
    s.input = std::string(kQaInstruction) + "\n\nThe following are given documents.\n\n" +
              join(documents, "\n\n") + "\n\n" + kQaInstruction + "\n\nQuestion: " + question.query;
    s.answerPrefix = " Answer:";
    s.outputs = question.outputs;
    return s;
}

} // namespace

const std::vector<TaskDef>& tasks() {
    static const std::vector<TaskDef> all{
        {"niah_single_1", Kind::Niah, {"noise", "words", "numbers", 1, 1, 1}, 128},
        {"niah_single_2", Kind::Niah, {"essay", "words", "numbers", 1, 1, 1}, 128},
        {"niah_single_3", Kind::Niah, {"essay", "words", "uuids", 1, 1, 1}, 128},
        {"niah_multikey_1", Kind::Niah, {"essay", "words", "numbers", 4, 1, 1}, 128},
        {"niah_multikey_2", Kind::Niah, {"needle", "words", "numbers", 1, 1, 1}, 128},
        {"niah_multikey_3", Kind::Niah, {"needle", "uuids", "uuids", 1, 1, 1}, 128},
        {"niah_multivalue", Kind::Niah, {"essay", "words", "numbers", 1, 4, 1}, 128},
        {"niah_multiquery", Kind::Niah, {"essay", "words", "numbers", 4, 1, 4}, 128},
        {"vt", Kind::VariableTracking, {}, 30},
        {"cwe", Kind::CommonWords, {}, 120},
        {"fwe", Kind::FrequentWords, {}, 50},
    };
    return all;
}

const std::vector<std::string>& taskNames() {
    static const std::vector<std::string> all = [] {
        std::vector<std::string> v;
        for (const TaskDef& t : tasks())
            v.emplace_back(t.name);
        v.emplace_back("qa_1");
        v.emplace_back("qa_2");
        return v;
    }();
    return all;
}

const TaskDef* findTask(const std::string& name) {
    for (const TaskDef& t : tasks())
        if (name == t.name)
            return &t;
    return nullptr;
}

Resources makeResources(const std::string& haystack, const std::string& wordList,
                        const std::string& where) {
    Resources r;
    std::string w;
    for (const char c : haystack + " ") {
        if (std::isspace(static_cast<unsigned char>(c))) {
            if (!w.empty())
                r.essayWords.push_back(w);
            w.clear();
        } else {
            w += c;
        }
    }
    std::set<std::string> words;
    std::string line;
    for (const char c : wordList + "\n") {
        if (c != '\n') {
            line += c;
            continue;
        }
        if (line.size() >= 3 && line.size() <= 12 &&
            std::all_of(line.begin(), line.end(), [](char x) { return x >= 'a' && x <= 'z'; }))
            words.insert(line);
        line.clear();
    }
    r.words.assign(words.begin(), words.end());
    if (r.essayWords.empty())
        throw std::invalid_argument(where + ": the haystack text is empty");
    if (r.words.size() < 100)
        throw std::invalid_argument(where + ": the word list has " +
                                    std::to_string(r.words.size()) +
                                    " lower-case words of 3 to 12 letters, fewer than 100");
    return r;
}

std::vector<Sample> generate(const TaskDef& t, int64_t L, int64_t n, uint64_t seed,
                             const Resources& r, const CountTokens& count) {
    Rng rng(seed);
    const int64_t tgen = t.tokensToGenerate;
    if (L <= tgen)
        throw std::invalid_argument(std::string(t.name) + ": a length of " + std::to_string(L) +
                                    " leaves nothing beside the " + std::to_string(tgen) +
                                    " tokens to generate");
    switch (t.kind) {
    case Kind::Niah: {
        const std::string hay = t.niah.haystack;
        const int64_t inc = hay == "essay" ? 500 : L < 4096 ? 5 : 25;
        return searchAndGenerate(
            [&](int64_t N, Rng& g, int64_t) { return niahSample(t.niah, N, g, seed, r); }, inc, L,
            tgen, n, rng, count, t.name);
    }
    case Kind::VariableTracking: {
        // The one-shot example: 3-letter names, value 12345, sized to min(500, L/4) tokens.
        const int64_t exampleBudget = std::min<int64_t>(500, L / 4);
        const std::vector<std::string> exNames = names(rng, 3);
        std::string example;
        for (int64_t N = 5;; N += 5) {
            Rng g(seed ^ 0x5654ULL);
            const std::string e = fill(kVtTemplate, vtContext(exNames, "12345", N, g), "12345") +
                                  vtPrefix("12345") + " " + join(exNames, " ");
            if (!example.empty() && count(e) > exampleBudget)
                break;
            example = e;
            if (count(e) > exampleBudget)
                break; // the smallest example, even when over the budget
        }
        const int64_t inc = L < 4096 ? 5 : 10;
        return searchAndGenerate(
            [&](int64_t N, Rng& g, int64_t) {
                // Per sample: fresh names and value in the example (HEAD).
                std::string ex = example;
                const std::vector<std::string> fresh = names(g, 3);
                const std::string exValue = std::to_string(uniform(g, 10000, 99998));
                for (size_t i = 0; i < 5; ++i)
                    replaceAll(ex, exNames[i], "\x01" + std::to_string(i) + "\x02");
                for (size_t i = 0; i < 5; ++i)
                    replaceAll(ex, "\x01" + std::to_string(i) + "\x02", fresh[i]);
                replaceAll(ex, "12345", exValue);
                const std::vector<std::string> n5 = names(g, 5);
                const std::string value = std::to_string(uniform(g, 10000, 99998));
                Sample s;
                s.input = ex + "\n\n" + fill(kVtTemplate, vtContext(n5, value, N, g), value);
                s.answerPrefix = vtPrefix(value);
                s.outputs = n5;
                return s;
            },
            inc, L, tgen, n, rng, count, t.name);
    }
    case Kind::CommonWords: {
        const bool small = L < 4096;
        const int common = small ? 6 : 30, rare = small ? 1 : 3;
        std::vector<std::string> pool = r.words;
        fixedShuffle(pool, seed);
        return searchAndGenerate(
            [&](int64_t N, Rng& g, int64_t) {
                // A one-shot example of its own for each draw, as RULER's generate_input_output
                // makes one every call: 40 words (20 for small L), 10 common.
                const auto [exList, exCommon] =
                    cweList(pool, small ? 20 : 40, small ? 3 : 10, small ? 1 : 3, g, seed);
                const std::string example = fill(kCweTemplate, numbered(exList), "") + kCwePrefix +
                                            " " + numbered(exCommon);
                const auto [list, top] = cweList(pool, N, common, rare, g, seed);
                Sample s;
                s.input = example + "\n" + fill(kCweTemplate, numbered(list), "");
                s.answerPrefix = kCwePrefix;
                s.outputs = top;
                return s;
            },
            10, L, tgen, n, rng, count, t.name, /*cwe=*/true);
    }
    case Kind::FrequentWords:
        return frequentWords(L, tgen, n, rng, seed, count);
    }
    return {};
}

std::vector<Sample> generateQa(const QaData& d, const std::string& name, int64_t L, int64_t n,
                               uint64_t seed, const CountTokens& count) {
    if (d.questions.empty() || d.docs.empty())
        throw std::invalid_argument(name + ": no questions with documents");
    if (L <= kQaTokensToGenerate)
        throw std::invalid_argument(name + ": a length of " + std::to_string(L) +
                                    " leaves nothing beside the " +
                                    std::to_string(kQaTokensToGenerate) + " tokens to generate");
    Rng rng(seed);
    return searchAndGenerate(
        [&](int64_t D, Rng& g, int64_t index) {
            // Sample i asks question i (the probes question 0); more samples than questions
            // cycle.
            return qaSample(d, static_cast<size_t>(index) % d.questions.size(), D, g, seed);
        },
        10, L, kQaTokensToGenerate, n, rng, count, name);
}

std::string postprocess(const std::string& prediction) {
    auto trim = [](std::string s) {
        const char* ws = " \t\n\r\f\v";
        const size_t a = s.find_first_not_of(ws);
        if (a == std::string::npos)
            return std::string();
        return s.substr(a, s.find_last_not_of(ws) - a + 1);
    };
    std::string s = trim(prediction);
    for (char& c : s)
        if (static_cast<unsigned char>(c) < 0x20)
            c = '\n';
    return trim(s);
}

double stringMatchAll(const std::string& prediction, const std::vector<std::string>& refs) {
    if (refs.empty())
        return 0;
    const std::string p = text::lowerCase(postprocess(prediction));
    int64_t found = 0;
    for (const std::string& r : refs)
        found += p.find(text::lowerCase(r)) != std::string::npos ? 1 : 0;
    return static_cast<double>(found) / static_cast<double>(refs.size());
}

double stringMatchPart(const std::string& prediction, const std::vector<std::string>& refs) {
    const std::string p = text::lowerCase(postprocess(prediction));
    for (const std::string& r : refs)
        if (p.find(text::lowerCase(r)) != std::string::npos)
            return 1;
    return 0;
}

} // namespace sparqlab::analysis::ruler
