#include "tokenizer.h"
#include "base/read_file.h"

#include "base/json_number.h"

#include "text/text_pieces.h"
#include "text/unicode_normalize.h"

#include <QString>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <queue>
#include <sstream>
#include <tuple>
#include <unordered_map>

namespace sparqlab::text {

namespace {

/// Ids above this are refused: no vocabulary has 16M entries.
constexpr int64_t kMaxId = int64_t{1} << 24;

using json = nlohmann::json;
using namespace pieces;

/// A pattern given as {"String": s} or {"Regex": r}.
std::shared_ptr<Regex> patternOf(const json& p, const std::string& where) {
    if (p.is_object() && p.contains("String") && p["String"].is_string())
        return std::make_shared<Regex>(escapeRegex(p["String"].get<std::string>()), where);
    if (p.is_object() && p.contains("Regex") && p["Regex"].is_string())
        return std::make_shared<Regex>(p["Regex"].get<std::string>(), where);
    throw TokenizerError(where + ": a pattern must be {\"String\": …} or {\"Regex\": …}");
}

std::string str(const json& j, const char* key, const std::string& def = {}) {
    return j.contains(key) && j[key].is_string() ? j[key].get<std::string>() : def;
}
bool flag(const json& j, const char* key, bool def) {
    return j.contains(key) && j[key].is_boolean() ? j[key].get<bool>() : def;
}

// --- normalizers ------------------------------------------------------------------------------

struct Normalizer {
    std::string type;
    std::string text; // Prepend / Replace content
    std::shared_ptr<Regex> pattern;
    bool left = false, right = false;
    std::vector<Normalizer> children;

    std::string apply(const std::string& s) const {
        if (type == "Sequence") {
            std::string out = s;
            for (const Normalizer& n : children)
                out = n.apply(out);
            return out;
        }
        if (type == "Prepend")
            return s.empty() ? s : text + s;
        if (type == "Replace")
            return replaceAll(s, *pattern, text);
        if (type == "NFC" || type == "NFD" || type == "NFKC" || type == "NFKD")
            return normalizeUnicode9(s, type == "NFC"    ? NormalForm::C
                                        : type == "NFD"  ? NormalForm::D
                                        : type == "NFKC" ? NormalForm::KC
                                                         : NormalForm::KD);
        if (type == "Lowercase")
            return lowerCase(s);
        if (type == "Strip") {
            const size_t b = left ? whiteSpaceRunAfter(s, 0) : 0;
            const size_t e = right ? whiteSpaceRunBefore(s, b, s.size()) : s.size();
            return s.substr(b, e - b);
        }
        return s;
    }
};

Normalizer parseNormalizer(const json& j, const std::string& where) {
    Normalizer n;
    if (!j.is_object() || !j.contains("type") || !j["type"].is_string())
        throw TokenizerError(where + ": normalizer without a type");
    n.type = j["type"].get<std::string>();
    if (n.type == "Sequence") {
        if (!j.contains("normalizers") || !j["normalizers"].is_array())
            throw TokenizerError(where + ": Sequence normalizer without normalizers");
        for (const json& c : j["normalizers"])
            n.children.push_back(parseNormalizer(c, where));
    } else if (n.type == "Prepend") {
        n.text = str(j, "prepend");
    } else if (n.type == "Replace") {
        n.pattern = patternOf(j.value("pattern", json()), where);
        n.text = str(j, "content");
    } else if (n.type == "Strip") {
        n.left = flag(j, "strip_left", true);
        n.right = flag(j, "strip_right", true);
    } else if (n.type != "NFC" && n.type != "NFD" && n.type != "NFKC" && n.type != "NFKD" &&
               n.type != "Lowercase") {
        throw TokenizerError(where + ": normalizer '" + n.type + "' is not supported");
    }
    return n;
}

// --- pre-tokenizers ---------------------------------------------------------------------------

struct PreTokenizer {
    std::string type;
    std::shared_ptr<Regex> pattern;
    Behavior behavior = Behavior::Isolated;
    bool invert = false;
    bool addPrefixSpace = false;
    bool useRegex = true;
    std::string replacement; // Metaspace
    std::string prependScheme = "always";
    bool split = true;
    std::vector<PreTokenizer> children;

    void apply(std::vector<std::string>& pieces, bool firstSegment) const {
        if (type == "Sequence") {
            for (const PreTokenizer& p : children)
                p.apply(pieces, firstSegment);
            return;
        }
        std::vector<std::string> out;
        for (size_t i = 0; i < pieces.size(); ++i) {
            std::string s = pieces[i];
            if (type == "ByteLevel") {
                if (addPrefixSpace && !s.empty() && s[0] != ' ')
                    s = " " + s;
                std::vector<std::string> parts =
                    useRegex ? splitBy(s, *pattern, Behavior::Isolated, false)
                             : std::vector<std::string>{s};
                for (const std::string& p : parts) {
                    std::string mapped;
                    for (unsigned char c : p)
                        mapped += byteMap().toChar[c];
                    out.push_back(std::move(mapped));
                }
            } else if (type == "Split" || type == "Whitespace" || type == "WhitespaceSplit" ||
                       type == "Digits" || type == "Punctuation") {
                for (std::string& p : splitBy(s, *pattern, behavior, invert))
                    out.push_back(std::move(p));
            } else if (type == "Metaspace") {
                std::string r;
                for (char c : s)
                    r += c == ' ' ? replacement : std::string(1, c);
                const bool prepend = prependScheme == "always" ||
                                     (prependScheme == "first" && firstSegment && i == 0);
                if (prepend && r.rfind(replacement, 0) != 0)
                    r = replacement + r;
                if (split) {
                    const Regex re(escapeRegex(replacement), "Metaspace");
                    for (std::string& p : splitBy(r, re, Behavior::MergedWithNext, false))
                        out.push_back(std::move(p));
                } else {
                    out.push_back(r);
                }
            } else {
                out.push_back(s);
            }
        }
        pieces.swap(out);
    }
};

Behavior parseBehavior(const std::string& b, const std::string& where) {
    if (b == "Removed")
        return Behavior::Removed;
    if (b == "Isolated")
        return Behavior::Isolated;
    if (b == "MergedWithPrevious")
        return Behavior::MergedWithPrevious;
    if (b == "MergedWithNext")
        return Behavior::MergedWithNext;
    if (b == "Contiguous")
        return Behavior::Contiguous;
    throw TokenizerError(where + ": split behavior '" + b + "' is not supported");
}

PreTokenizer parsePreTokenizer(const json& j, const std::string& where) {
    PreTokenizer p;
    if (!j.is_object() || !j.contains("type") || !j["type"].is_string())
        throw TokenizerError(where + ": pre_tokenizer without a type");
    p.type = j["type"].get<std::string>();
    if (p.type == "Sequence") {
        if (!j.contains("pretokenizers") || !j["pretokenizers"].is_array())
            throw TokenizerError(where + ": Sequence pre_tokenizer without pretokenizers");
        for (const json& c : j["pretokenizers"])
            p.children.push_back(parsePreTokenizer(c, where));
    } else if (p.type == "ByteLevel") {
        p.addPrefixSpace = flag(j, "add_prefix_space", false);
        p.useRegex = flag(j, "use_regex", true);
        p.pattern = std::make_shared<Regex>(kGpt2Pattern, where);
    } else if (p.type == "Split") {
        p.pattern = patternOf(j.value("pattern", json()), where);
        p.behavior = parseBehavior(str(j, "behavior", "Isolated"), where);
        p.invert = flag(j, "invert", false);
    } else if (p.type == "Whitespace") {
        // The regex crate's \w (whitespace.rs), Oniguruma's with the joiners.
        p.pattern =
            std::make_shared<Regex>(R"([\w\p{Join_Control}]+|[^\w\s\p{Join_Control}]+)", where);
        p.invert = true;
        p.behavior = Behavior::Removed;
    } else if (p.type == "WhitespaceSplit") {
        p.pattern = std::make_shared<Regex>(R"(\s+)", where);
        p.behavior = Behavior::Removed;
    } else if (p.type == "Digits") {
        p.pattern = std::make_shared<Regex>(
            flag(j, "individual_digits", false) ? R"(\p{N})" : R"(\p{N}+)", where);
        p.behavior = Behavior::Isolated;
    } else if (p.type == "Punctuation") {
        // The library's is_punc: ASCII punctuation (with $+<=>^`|~, Unicode symbols) or P in
        // the unicode_categories crate, whose Unicode is older than PCRE2's (no U+2E4F, no
        // Adlam's marks): its characters, asked of the library.
        static const std::string punctuation =
#include "text/unicode_punctuation.inc"
            ;
        p.pattern = std::make_shared<Regex>("[" + punctuation + "]", where);
        p.behavior = parseBehavior(str(j, "behavior", "Isolated"), where);
    } else if (p.type == "Metaspace") {
        p.replacement = str(j, "replacement", "\xE2\x96\x81");
        p.prependScheme =
            str(j, "prepend_scheme", flag(j, "add_prefix_space", true) ? "always" : "never");
        p.split = flag(j, "split", true);
    } else {
        throw TokenizerError(where + ": pre_tokenizer '" + p.type + "' is not supported");
    }
    return p;
}

// --- decoders ---------------------------------------------------------------------------------

struct Decoder {
    std::string type;
    std::shared_ptr<Regex> pattern;
    std::string content;
    size_t start = 0, stop = 0;
    std::string replacement; // Metaspace
    bool prepend = true;
    std::vector<Decoder> children;

    void apply(std::vector<std::string>& tokens, bool strip) const {
        if (type == "Sequence") {
            for (const Decoder& d : children)
                d.apply(tokens, strip);
        } else if (type == "ByteLevel") {
            // A token whose every character is in the byte map becomes those bytes; one with
            // any other character (an added token's text) is taken as it is, whole.
            std::string bytes;
            for (const std::string& t : tokens) {
                std::string mapped;
                bool all = true;
                for (size_t i = 0; all && i < t.size();) {
                    const size_t n = std::max<size_t>(1, utf8Length(t, i));
                    const auto it = byteMap().toByte.find(decodeUtf8(t, i, n));
                    all = it != byteMap().toByte.end();
                    if (all)
                        mapped += static_cast<char>(it->second);
                    i += n;
                }
                bytes += all ? mapped : t;
            }
            tokens = {repairUtf8(bytes)};
        } else if (type == "Replace") {
            for (std::string& t : tokens)
                t = replaceAll(t, *pattern, content);
        } else if (type == "ByteFallback") {
            std::vector<std::string> out;
            std::string pending;
            size_t pendingCount = 0;
            auto flush = [&]() {
                if (pendingCount == 0)
                    return;
                if (repairUtf8(pending) == pending) {
                    out.push_back(pending);
                } else {
                    for (size_t i = 0; i < pendingCount; ++i)
                        out.push_back("\xEF\xBF\xBD");
                }
                pending.clear();
                pendingCount = 0;
            };
            for (const std::string& t : tokens) {
                if (t.size() == 6 && t.rfind("<0x", 0) == 0 && t[5] == '>' && std::isxdigit(t[3]) &&
                    std::isxdigit(t[4])) {
                    pending += static_cast<char>(std::stoi(t.substr(3, 2), nullptr, 16));
                    ++pendingCount;
                } else {
                    flush();
                    out.push_back(t);
                }
            }
            flush();
            tokens.swap(out);
        } else if (type == "Fuse") {
            std::string all;
            for (const std::string& t : tokens)
                all += t;
            tokens = {all};
        } else if (type == "Strip") {
            if (!strip)
                return;
            for (std::string& t : tokens) {
                const std::vector<std::string> ch = characters(t);
                size_t b = 0, e = ch.size();
                while (b < start && b < e && ch[b] == content)
                    ++b;
                size_t removed = 0;
                while (removed < stop && e > b && ch[e - 1] == content) {
                    --e;
                    ++removed;
                }
                std::string r;
                for (size_t i = b; i < e; ++i)
                    r += ch[i];
                t = r;
            }
        } else if (type == "Metaspace") {
            for (size_t i = 0; i < tokens.size(); ++i) {
                std::string r;
                const std::vector<std::string> ch = characters(tokens[i]);
                for (size_t c = 0; c < ch.size(); ++c) {
                    if (ch[c] == replacement) {
                        if (!(strip && prepend && i == 0)) // the first token loses them all
                            r += ' ';
                    } else {
                        r += ch[c];
                    }
                }
                tokens[i] = r;
            }
        }
    }
};

Decoder parseDecoder(const json& j, const std::string& where) {
    Decoder d;
    if (!j.is_object() || !j.contains("type") || !j["type"].is_string())
        throw TokenizerError(where + ": decoder without a type");
    d.type = j["type"].get<std::string>();
    if (d.type == "Sequence") {
        if (!j.contains("decoders") || !j["decoders"].is_array())
            throw TokenizerError(where + ": Sequence decoder without decoders");
        for (const json& c : j["decoders"])
            d.children.push_back(parseDecoder(c, where));
    } else if (d.type == "Replace") {
        d.pattern = patternOf(j.value("pattern", json()), where);
        d.content = str(j, "content");
    } else if (d.type == "Strip") {
        d.content = str(j, "content", " ");
        // How many characters each token loses at either end (usize in the library).
        const auto count = [&](const char* key) {
            return j.contains(key)
                       ? static_cast<size_t>(base::requireWholeNumber<TokenizerError>(
                             j[key], where, std::string("decoder.") + key, 0, int64_t{1} << 30))
                       : size_t{0};
        };
        d.start = count("start");
        d.stop = count("stop");
    } else if (d.type == "Metaspace") {
        d.replacement = str(j, "replacement", "\xE2\x96\x81");
        d.prepend = str(j, "prepend_scheme",
                        flag(j, "add_prefix_space", true) ? "always" : "never") != "never";
    } else if (d.type != "ByteLevel" && d.type != "ByteFallback" && d.type != "Fuse") {
        throw TokenizerError(where + ": decoder '" + d.type + "' is not supported");
    }
    return d;
}

} // namespace

// --- the tokenizer ----------------------------------------------------------------------------

struct Tokenizer::Impl {
    std::string path;
    std::unordered_map<std::string, int64_t> vocab;
    std::vector<std::string> idToToken;
    std::vector<bool> defined; // per id: in the vocabulary or an added token (not a gap)
    std::unordered_map<uint64_t, std::pair<int64_t, int64_t>> merges; // (a,b) → (rank, merged id)
    bool byteFallback = false, ignoreMerges = false, fuseUnk = false;
    int64_t unkId = -1;
    std::string unkToken; // model.unk_token; unkId is -1 where the vocabulary lacks it
    std::optional<Normalizer> normalizer;
    std::optional<PreTokenizer> preTokenizer;
    std::optional<Decoder> decoder;
    std::vector<int64_t> prefixIds, suffixIds; // post-processor template around $A
    struct Added {
        std::string content;
        int64_t id;
        bool special, lstrip, rstrip, normalized, singleWord;
    };
    std::vector<Added> added;
    std::unordered_map<int64_t, bool> addedSpecial; // id → special
    // Byte tries for leftmost-longest matching: the added tokens found in the raw text
    // (normalized false), and those found in its normalized segments, by their normalized
    // content (normalized true: added_vocabulary.rs's extract_and_normalize).
    struct Node {
        std::map<unsigned char, int> next;
        int added = -1;
    };
    std::vector<Node> rawTrie{Node{}}, normalizedTrie{Node{}};

    static uint64_t key(int64_t a, int64_t b) {
        return (static_cast<uint64_t>(a) << 32) | static_cast<uint64_t>(b);
    }

    static void addToTrie(std::vector<Node>& trie, const std::string& pattern, int index) {
        int n = 0;
        for (unsigned char c : pattern) {
            auto it = trie[static_cast<size_t>(n)].next.find(c);
            if (it == trie[static_cast<size_t>(n)].next.end()) {
                trie.push_back(Node{});
                const int created = static_cast<int>(trie.size()) - 1;
                trie[static_cast<size_t>(n)].next[c] = created;
                n = created;
            } else {
                n = it->second;
            }
        }
        trie[static_cast<size_t>(n)].added = index;
    }

    /// BPE on one pre-token, as the tokenizers library's `merge_word`: each character is its
    /// vocabulary id, else its bytes' <0xXX> ids (byte fallback), else the unknown token (runs
    /// of them one where fuse_unk says so), else nothing; then the merges, lowest rank first and
    /// leftmost on equal rank.
    void bpe(const std::string& piece, std::vector<int64_t>& out) const {
        if (piece.empty())
            return;
        if (ignoreMerges) {
            const auto it = vocab.find(piece);
            if (it != vocab.end()) {
                out.push_back(it->second);
                return;
            }
        }
        std::vector<int64_t> ids;
        bool unkPending = false;
        for (const std::string& c : characters(piece)) {
            const auto it = vocab.find(c);
            if (it != vocab.end()) {
                if (unkPending)
                    ids.push_back(unkId);
                unkPending = false;
                ids.push_back(it->second);
                continue;
            }
            if (byteFallback && appendByteTokens(c, ids))
                continue; // (a pending unknown token stays pending, as in the library)
            if (unkToken.empty())
                continue; // no unknown token: the library drops the character
            if (unkId < 0)
                throw TokenizerError(path + ": the unk_token '" + unkToken +
                                     "' is not in the vocabulary");
            if (unkPending && !fuseUnk)
                ids.push_back(unkId);
            unkPending = true;
        }
        if (unkPending)
            ids.push_back(unkId);
        mergeAll(ids);
        out.insert(out.end(), ids.begin(), ids.end());
    }

    /// The <0xXX> ids of the bytes of `c`, where the vocabulary has all of them.
    bool appendByteTokens(const std::string& c, std::vector<int64_t>& ids) const {
        std::vector<int64_t> bytes;
        for (unsigned char b : c) {
            char name[8];
            std::snprintf(name, sizeof name, "<0x%02X>", b);
            const auto it = vocab.find(name);
            if (it == vocab.end())
                return false;
            bytes.push_back(it->second);
        }
        ids.insert(ids.end(), bytes.begin(), bytes.end());
        return true;
    }

    /// The merges on a word's ids (word.rs `merge_all`, without dropout).
    void mergeAll(std::vector<int64_t>& ids) const {
        if (ids.size() < 2)
            return;
        struct Sym {
            int64_t id;
            int prev, next;
            bool alive;
        };
        std::vector<Sym> sym;
        for (size_t i = 0; i < ids.size(); ++i)
            sym.push_back({ids[i], static_cast<int>(i) - 1, static_cast<int>(i) + 1, true});
        sym.back().next = -1;
        using Item =
            std::tuple<int64_t, int, int64_t, int64_t>; // rank, left index, left id, right id
        std::priority_queue<Item, std::vector<Item>, std::greater<Item>> heap;
        auto push = [&](int i) {
            if (i < 0 || sym[static_cast<size_t>(i)].next < 0)
                return;
            const Sym& a = sym[static_cast<size_t>(i)];
            const Sym& b = sym[static_cast<size_t>(a.next)];
            const auto it = merges.find(key(a.id, b.id));
            if (it != merges.end())
                heap.emplace(it->second.first, i, a.id, b.id);
        };
        for (int i = 0; i < static_cast<int>(sym.size()); ++i)
            push(i);
        while (!heap.empty()) {
            const auto [rank, i, aId, bId] = heap.top();
            heap.pop();
            Sym& a = sym[static_cast<size_t>(i)];
            if (!a.alive || a.id != aId || a.next < 0 || sym[static_cast<size_t>(a.next)].id != bId)
                continue; // stale entry
            Sym& b = sym[static_cast<size_t>(a.next)];
            a.id = merges.at(key(aId, bId)).second;
            b.alive = false;
            a.next = b.next;
            if (b.next >= 0)
                sym[static_cast<size_t>(b.next)].prev = i;
            push(a.prev);
            push(i);
        }
        ids.clear();
        for (const Sym& s : sym)
            if (s.alive)
                ids.push_back(s.id);
    }

    /// Pre-tokenizes and encodes one normalized segment.
    void encodeNormalized(const std::string& normalized, bool first,
                          std::vector<int64_t>& out) const {
        std::vector<std::string> pieces{normalized};
        if (preTokenizer)
            preTokenizer->apply(pieces, first);
        for (const std::string& p : pieces)
            bpe(p, out);
    }

    /// Whether the character before `i` / at `i` is a word character as the regex crate's `\w`
    /// has it (single_word: Alphabetic, marks, decimal digits, connector punctuation and the
    /// joiners).
    static bool isWord(const std::string& c) {
        static const Regex word(R"(^[\p{Alphabetic}\p{M}\p{Nd}\p{Pc}\p{Join_Control}])",
                                "single_word");
        return !word.findAll(c).empty();
    }
    static bool endsWithWord(const std::string& s, size_t i) {
        if (i == 0)
            return false;
        const size_t b = previousCharacter(s, 0, i);
        return isWord(s.substr(b, i - b));
    }
    static bool startsWithWord(const std::string& s, size_t i) {
        return i < s.size() && isWord(s.substr(i, std::max<size_t>(1, utf8Length(s, i))));
    }

    /// Splits `s` at the added tokens of `trie`, leftmost-longest, each stripping the white
    /// space beside it and keeping to whole words where it says so: `text(begin, end)` for each
    /// piece between them, `token(id)` for each token found (added_vocabulary.rs `find_matches`).
    template <class Text, class Token>
    void splitAdded(const std::string& s, const std::vector<Node>& trie, Text text,
                    Token token) const {
        size_t segStart = 0, i = 0;
        while (i < s.size()) {
            int node = 0, found = -1;
            size_t foundEnd = 0;
            for (size_t k = i; k < s.size(); ++k) {
                const auto& next = trie[static_cast<size_t>(node)].next;
                const auto it = next.find(static_cast<unsigned char>(s[k]));
                if (it == next.end())
                    break;
                node = it->second;
                if (trie[static_cast<size_t>(node)].added >= 0) {
                    found = trie[static_cast<size_t>(node)].added;
                    foundEnd = k + 1;
                }
            }
            if (found < 0) {
                ++i;
                continue;
            }
            const Added& a = added[static_cast<size_t>(found)];
            if (a.singleWord && (endsWithWord(s, i) || startsWithWord(s, foundEnd))) {
                i = foundEnd; // not a word of its own: text (matches do not overlap)
                continue;
            }
            const size_t segEnd = a.lstrip ? whiteSpaceRunBefore(s, segStart, i) : i;
            if (segEnd > segStart)
                text(segStart, segEnd);
            token(a.id);
            // The text resumes after the white space rstrip takes, the search for tokens right
            // after this one: one found inside that white space is a token too.
            segStart = a.rstrip ? whiteSpaceRunAfter(s, foundEnd) : foundEnd;
            i = foundEnd;
        }
        if (segStart < s.size())
            text(segStart, s.size());
    }
};

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : m(std::move(impl)) {}
Tokenizer::~Tokenizer() = default;

std::string lowerCase(const std::string& s) {
    return qStringOfUtf8(s).toLower().toStdString();
}

std::string repairUtf8(const std::string& s) {
    std::string out;
    out.reserve(s.size());
    for (size_t i = 0; i < s.size();) {
        const size_t n = utf8Length(s, i);
        if (n == 0) {
            // One U+FFFD per maximal valid prefix of a sequence (Unicode's "substitution of
            // maximal subparts", as Rust's from_utf8_lossy does).
            out += "\xEF\xBF\xBD";
            i += maximalSubpart(s, i);
        } else {
            out.append(s, i, n);
            i += n;
        }
    }
    return out;
}

std::unique_ptr<Tokenizer> Tokenizer::fromFolder(const std::string& folder) {
    return fromFile((std::filesystem::path(folder) / "tokenizer.json").string());
}

std::unique_ptr<Tokenizer> Tokenizer::fromFile(const std::string& path) {
    const std::optional<std::string> text = base::readWholeFile(path);
    if (!text)
        throw TokenizerError(path + ": cannot read (missing?)");
    return fromJson(*text, path);
}

std::unique_ptr<Tokenizer> Tokenizer::fromJson(const std::string& text, const std::string& path) {
    json j;
    try {
        j = json::parse(text);
    } catch (const json::exception& e) {
        throw TokenizerError(path + ": malformed JSON: " + e.what());
    }
    auto t = std::make_unique<Impl>();
    t->path = path;
    if (!j.is_object() || !j.contains("model") || !j["model"].is_object())
        throw TokenizerError(path + ": no model object");
    const json& model = j["model"];
    const std::string type = str(model, "type", "BPE");
    if (type != "BPE")
        throw TokenizerError(path + ": tokenizer model '" + type + "' is not supported (BPE)");
    if (!model.contains("vocab") || !model["vocab"].is_object())
        throw TokenizerError(path + ": model.vocab is missing");
    int64_t maxId = -1;
    for (const auto& [tok, id] : model["vocab"].items()) {
        if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > kMaxId)
            throw TokenizerError(path + ": model.vocab entry '" + tok + "' has a bad id");
        t->vocab[tok] = id.get<int64_t>();
        maxId = std::max(maxId, id.get<int64_t>());
    }
    if (str(model, "continuing_subword_prefix") != "" || str(model, "end_of_word_suffix") != "")
        throw TokenizerError(path +
                             ": continuing_subword_prefix / end_of_word_suffix are not supported");
    t->byteFallback = flag(model, "byte_fallback", false);
    t->ignoreMerges = flag(model, "ignore_merges", false);
    t->fuseUnk = flag(model, "fuse_unk", false);
    if (model.contains("unk_token") && model["unk_token"].is_string()) {
        t->unkToken = model["unk_token"].get<std::string>();
        const auto it = t->vocab.find(t->unkToken);
        if (it != t->vocab.end())
            t->unkId = it->second;
    }
    if (model.contains("merges")) {
        if (!model["merges"].is_array())
            throw TokenizerError(path + ": model.merges must be a list");
        int64_t rank = 0;
        for (const json& mj : model["merges"]) {
            std::string a, b;
            if (mj.is_string()) {
                // "a b" strings as merges.txt lines: "#version" lines are skipped, every other
                // splits at its one space (bpe/model.rs `convert_merges_to_hashmap`).
                const std::string s = mj.get<std::string>();
                if (s.rfind("#version", 0) == 0)
                    continue;
                const size_t sp = s.find(' ');
                if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos)
                    throw TokenizerError(path + ": merge '" + s + "' is not two tokens");
                a = s.substr(0, sp);
                b = s.substr(sp + 1);
            } else if (mj.is_array() && mj.size() == 2 && mj[0].is_string() && mj[1].is_string()) {
                a = mj[0].get<std::string>();
                b = mj[1].get<std::string>();
            } else {
                throw TokenizerError(path + ": merge #" + std::to_string(rank) + " is malformed");
            }
            const auto ia = t->vocab.find(a), ib = t->vocab.find(b), im = t->vocab.find(a + b);
            if (ia == t->vocab.end() || ib == t->vocab.end() || im == t->vocab.end())
                throw TokenizerError(path + ": merge '" + a + " " + b +
                                     "' uses tokens missing from the vocab");
            // A pair listed twice keeps its last rank (the library collects the list into a map).
            t->merges.insert_or_assign(Impl::key(ia->second, ib->second),
                                       std::make_pair(rank, im->second));
            ++rank;
        }
    }
    if (j.contains("added_tokens") && j["added_tokens"].is_array()) {
        // The library adds them one by one (serialization.rs, AddedVocabulary::add_tokens) and
        // only warns where the file's id differs: a token of the vocabulary keeps its id, one
        // added before keeps that one (its flags replaced), and a new one takes the next id,
        // the vocabulary's size (its count of entries) or one past the largest added id
        // beyond it.
        std::unordered_map<std::string, size_t> byContent; // content → index in t->added
        const auto vocabSize = static_cast<int64_t>(t->vocab.size());
        int64_t maxAdded = -1;
        for (const json& a : j["added_tokens"]) {
            if (!a.is_object() || !a.contains("id") || !a["id"].is_number_integer() ||
                !a.contains("content") || !a["content"].is_string())
                throw TokenizerError(path + ": an added token lacks id or content");
            Impl::Added at{a["content"].get<std::string>(), a["id"].get<int64_t>(),
                           flag(a, "special", false),       flag(a, "lstrip", false),
                           flag(a, "rstrip", false),        flag(a, "normalized", false),
                           flag(a, "single_word", false)};
            if (at.id < 0 || at.id > kMaxId)
                throw TokenizerError(path + ": added token '" + at.content + "' has a bad id");
            if (at.content.empty()) // the library skips it (AddedVocabulary::add_tokens)
                continue;
            const auto before = byContent.find(at.content);
            const auto inVocab = t->vocab.find(at.content);
            if (before != byContent.end())
                at.id = t->added[before->second].id;
            else if (inVocab != t->vocab.end())
                at.id = inVocab->second;
            else
                at.id = maxAdded < 0                              ? vocabSize
                        : maxAdded >= vocabSize || vocabSize == 0 ? maxAdded + 1
                                                                  : vocabSize;
            if (at.id > kMaxId)
                throw TokenizerError(path + ": added token '" + at.content + "' has a bad id");
            maxAdded = std::max(maxAdded, at.id);
            maxId = std::max(maxId, at.id);
            t->addedSpecial[at.id] = t->addedSpecial[at.id] || at.special; // (never unmarked)
            if (before != byContent.end()) {
                t->added[before->second] = at;
            } else {
                byContent.emplace(at.content, t->added.size());
                t->added.push_back(at);
            }
        }
    }
    t->idToToken.assign(static_cast<size_t>(maxId + 1), std::string());
    t->defined.assign(static_cast<size_t>(maxId + 1), false);
    for (const auto& [tok, id] : t->vocab) {
        t->idToToken[static_cast<size_t>(id)] = tok;
        t->defined[static_cast<size_t>(id)] = true;
    }
    for (const Impl::Added& a : t->added) {
        t->idToToken[static_cast<size_t>(a.id)] = a.content;
        t->defined[static_cast<size_t>(a.id)] = true;
    }

    if (j.contains("normalizer") && !j["normalizer"].is_null())
        t->normalizer = parseNormalizer(j["normalizer"], path);
    for (size_t i = 0; i < t->added.size(); ++i) {
        const Impl::Added& a = t->added[i];
        if (!a.normalized)
            Impl::addToTrie(t->rawTrie, a.content, static_cast<int>(i));
        else // matched in normalized text as the normalizer writes it
            Impl::addToTrie(t->normalizedTrie,
                            t->normalizer ? t->normalizer->apply(a.content) : a.content,
                            static_cast<int>(i));
    }
    if (j.contains("pre_tokenizer") && !j["pre_tokenizer"].is_null())
        t->preTokenizer = parsePreTokenizer(j["pre_tokenizer"], path);
    if (j.contains("decoder") && !j["decoder"].is_null())
        t->decoder = parseDecoder(j["decoder"], path);
    if (j.contains("post_processor") && !j["post_processor"].is_null()) {
        std::vector<json> processors{j["post_processor"]};
        if (str(j["post_processor"], "type") == "Sequence" &&
            j["post_processor"].contains("processors"))
            processors = j["post_processor"]["processors"].get<std::vector<json>>();
        for (const json& p : processors) {
            const std::string pt = str(p, "type");
            if (pt == "TemplateProcessing") {
                if (!p.contains("single") || !p["single"].is_array())
                    throw TokenizerError(path + ": TemplateProcessing without a single template");
                bool seenA = false;
                for (const json& item : p["single"]) {
                    if (item.contains("Sequence")) {
                        seenA = true;
                        continue;
                    }
                    if (!item.contains("SpecialToken"))
                        throw TokenizerError(path + ": unknown template item");
                    const std::string name = str(item["SpecialToken"], "id");
                    const json& st = p.value("special_tokens", json::object());
                    if (!st.contains(name) || !st[name].contains("ids") ||
                        !st[name]["ids"].is_array())
                        throw TokenizerError(path + ": template names special token '" + name +
                                             "' without ids");
                    for (const json& id : st[name]["ids"])
                        (seenA ? t->suffixIds : t->prefixIds)
                            .push_back(base::requireWholeNumber<TokenizerError>(
                                id, path, "special_tokens." + name + ".ids", 0, kMaxId));
                }
            } else if (pt == "BertProcessing" || pt == "RobertaProcessing") {
                for (const char* k : {"cls", "sep"}) {
                    if (!p.contains(k) || !p[k].is_array() || p[k].size() != 2)
                        throw TokenizerError(path + ": " + pt + " needs \"" + k +
                                             "\": [token, id]");
                    (std::string(k) == "cls" ? t->prefixIds : t->suffixIds)
                        .push_back(base::requireWholeNumber<TokenizerError>(
                            p[k][1], path, std::string("post_processor.") + k, 0, kMaxId));
                }
            } else if (pt != "ByteLevel") {
                throw TokenizerError(path + ": post_processor '" + pt + "' is not supported");
            }
        }
    }
    return std::unique_ptr<Tokenizer>(new Tokenizer(std::move(t)));
}

std::vector<int64_t> Tokenizer::encode(const std::string& rawText, bool addSpecial) const {
    const std::string text = repairUtf8(rawText);
    std::vector<int64_t> out;
    if (addSpecial)
        out = m->prefixIds;
    // Added tokens with normalized false are split out first, leftmost-longest, on the raw
    // text; each piece between them is normalized whole, and those with normalized true are
    // split out of it by their normalized content. Only a piece that starts the text is
    // "first" (Metaspace's prepend scheme first: its original offset is 0).
    const auto token = [&](int64_t id) { out.push_back(id); };
    m->splitAdded(
        text, m->rawTrie,
        [&](size_t b, size_t e) {
            const std::string raw = text.substr(b, e - b);
            const std::string normalized = m->normalizer ? m->normalizer->apply(raw) : raw;
            m->splitAdded(
                normalized, m->normalizedTrie,
                [&](size_t nb, size_t ne) {
                    m->encodeNormalized(normalized.substr(nb, ne - nb), b == 0 && nb == 0, out);
                },
                token);
        },
        token);
    if (addSpecial)
        out.insert(out.end(), m->suffixIds.begin(), m->suffixIds.end());
    return out;
}

std::vector<std::string> Tokenizer::tokens(const std::vector<int64_t>& ids) const {
    std::vector<std::string> out;
    for (int64_t id : ids) {
        if (id < 0 || id >= static_cast<int64_t>(m->idToToken.size()))
            throw TokenizerError(m->path + ": token id " + std::to_string(id) + " is outside 0.." +
                                 std::to_string(m->idToToken.size() - 1));
        out.push_back(m->idToToken[static_cast<size_t>(id)]);
    }
    return out;
}

std::string Tokenizer::decode(const std::vector<int64_t>& ids, bool skipSpecial) const {
    std::vector<int64_t> kept;
    for (int64_t id : ids) {
        // An id the tokenizer does not know is left out, as the library's decode does (models
        // pad their output layer beyond the tokenizer: Qwen 2.5, Gemma 3, Phi-3).
        if (id < 0 || id >= static_cast<int64_t>(m->defined.size()) ||
            !m->defined[static_cast<size_t>(id)])
            continue;
        const auto it = m->addedSpecial.find(id);
        if (skipSpecial && it != m->addedSpecial.end() && it->second)
            continue;
        kept.push_back(id);
    }
    std::vector<std::string> toks = tokens(kept);
    if (!m->decoder) { // the library joins the tokens with spaces
        std::string out;
        for (size_t i = 0; i < toks.size(); ++i)
            out += (i ? " " : "") + toks[i];
        return out;
    }
    m->decoder->apply(toks, /*strip=*/true);
    std::string out;
    for (const std::string& t : toks)
        out += t;
    return out;
}

std::string Tokenizer::tokenText(int64_t id) const {
    std::vector<std::string> toks = tokens({id});
    if (m->decoder)
        m->decoder->apply(toks, /*strip=*/false);
    std::string out;
    for (const std::string& t : toks)
        out += t;
    return out;
}

int64_t Tokenizer::size() const {
    return static_cast<int64_t>(m->idToToken.size());
}
const std::string& Tokenizer::path() const {
    return m->path;
}

} // namespace sparqlab::text
