// trainByteLevelBpe (tokenizer.h): a byte-level BPE tokenizer as the tokenizers library trains
// one (GPT-2's pre-tokenizer, merges by pair count, ties to the smaller pair).

#include "tokenizer.h"

#include "text/text_pieces.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <map>
#include <queue>
#include <tuple>
#include <unordered_map>

namespace sparqlab::text {

using json = nlohmann::json;
using namespace pieces;

std::string trainByteLevelBpe(const std::vector<std::string>& texts, int64_t vocabSize,
                              const std::vector<std::string>& specialTokens) {
    const int64_t nMerges = vocabSize - 256 - static_cast<int64_t>(specialTokens.size());
    if (nMerges < 0)
        throw TokenizerError("a byte-level vocabulary needs at least 256 + special tokens ids");
    // Pre-token frequencies, each pre-token as a sequence of byte symbols 0..255.
    const Regex re(kGpt2Pattern, "bpe trainer");
    std::unordered_map<std::string, int64_t> counts;
    for (const std::string& raw : texts) {
        const std::string t = repairUtf8(raw);
        for (std::string& piece : splitBy(t, re, Behavior::Isolated, false))
            ++counts[piece];
    }
    std::vector<std::string> sortedWords;
    for (const auto& [w, c] : counts)
        sortedWords.push_back(w);
    std::sort(sortedWords.begin(), sortedWords.end()); // deterministic order
    std::vector<std::vector<int32_t>> words;
    std::vector<int64_t> freq;
    for (const std::string& w : sortedWords) {
        std::vector<int32_t> sym;
        for (unsigned char c : w)
            sym.push_back(c);
        words.push_back(std::move(sym));
        freq.push_back(counts[w]);
    }
    std::vector<std::string> tokenText(256);
    for (int b = 0; b < 256; ++b)
        tokenText[static_cast<size_t>(b)] = byteMap().toChar[b];
    std::unordered_map<std::string, int32_t> textToId;
    for (int b = 0; b < 256; ++b)
        textToId[tokenText[static_cast<size_t>(b)]] = b;
    std::vector<std::pair<int32_t, int32_t>> merges;
    while (static_cast<int64_t>(tokenText.size()) < 256 + nMerges) {
        std::unordered_map<uint64_t, int64_t> pairs;
        for (size_t w = 0; w < words.size(); ++w) {
            const auto& s = words[w];
            for (size_t i = 0; i + 1 < s.size(); ++i)
                pairs[(static_cast<uint64_t>(s[i]) << 32) | static_cast<uint32_t>(s[i + 1])] +=
                    freq[w];
        }
        uint64_t best = 0;
        int64_t bestCount = 0;
        for (const auto& [p, c] : pairs)
            if (c > bestCount || (c == bestCount && p < best)) {
                best = p;
                bestCount = c;
            }
        if (bestCount < 2)
            break; // nothing left worth merging
        const auto a = static_cast<int32_t>(best >> 32),
                   b = static_cast<int32_t>(best & 0xFFFFFFFFu);
        // Two merge paths can spell the same token: it keeps its first id (as HF's trainer).
        const std::string merged =
            tokenText[static_cast<size_t>(a)] + tokenText[static_cast<size_t>(b)];
        auto [it, isNew] = textToId.emplace(merged, static_cast<int32_t>(tokenText.size()));
        const int32_t id = it->second;
        if (isNew)
            tokenText.push_back(merged);
        merges.emplace_back(a, b);
        for (auto& s : words) {
            if (s.size() < 2)
                continue;
            size_t o = 0;
            for (size_t i = 0; i < s.size(); ++i) {
                if (i + 1 < s.size() && s[i] == a && s[i + 1] == b) {
                    s[o++] = id;
                    ++i;
                } else {
                    s[o++] = s[i];
                }
            }
            s.resize(o);
        }
    }
    json vocab = json::object();
    for (size_t i = 0; i < tokenText.size(); ++i)
        vocab[tokenText[i]] = i;
    json mergeList = json::array();
    for (const auto& [a, b] : merges)
        mergeList.push_back(
            json::array({tokenText[static_cast<size_t>(a)], tokenText[static_cast<size_t>(b)]}));
    json added = json::array();
    for (size_t i = 0; i < specialTokens.size(); ++i)
        added.push_back({{"id", tokenText.size() + i},
                         {"content", specialTokens[i]},
                         {"single_word", false},
                         {"lstrip", false},
                         {"rstrip", false},
                         {"normalized", false},
                         {"special", true}});
    const json byteLevel{{"type", "ByteLevel"},
                         {"add_prefix_space", false},
                         {"trim_offsets", true},
                         {"use_regex", true}};
    const json j{{"version", "1.0"},
                 {"truncation", nullptr},
                 {"padding", nullptr},
                 {"added_tokens", added},
                 {"normalizer", nullptr},
                 {"pre_tokenizer", byteLevel},
                 {"post_processor", byteLevel},
                 {"decoder", byteLevel},
                 {"model",
                  {{"type", "BPE"},
                   {"dropout", nullptr},
                   {"unk_token", nullptr},
                   {"continuing_subword_prefix", nullptr},
                   {"end_of_word_suffix", nullptr},
                   {"fuse_unk", false},
                   {"byte_fallback", false},
                   {"ignore_merges", false},
                   {"vocab", vocab},
                   {"merges", mergeList}}}};
    return j.dump(1);
}

} // namespace sparqlab::text
