#pragma once
/// \file tokenizer.h
/// A Hugging Face `tokenizer.json` read and run as the tokenizers library does: added tokens
/// split out first, then normalizer, pre-tokenizer, BPE model (byte-level, or SentencePiece
/// style with byte fallback), post-processor; and the decoder chain for decoding.
///
/// Threading: a Tokenizer is immutable after construction; encode/decode are thread-safe.

#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace sparqlab::text {

/// A tokenizer.json that cannot be used, or text it cannot encode; names the file.
class TokenizerError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

class Tokenizer {
public:
    /// Reads `folder/tokenizer.json`. Throws TokenizerError with one line naming the file.
    static std::unique_ptr<Tokenizer> fromFolder(const std::string& folder);
    /// Reads a tokenizer.json file.
    static std::unique_ptr<Tokenizer> fromFile(const std::string& path);
    /// Parses tokenizer.json text; `path` is only used in messages.
    static std::unique_ptr<Tokenizer> fromJson(const std::string& text, const std::string& path);
    ~Tokenizer();

    /// Token ids of UTF-8 text (invalid UTF-8 is first repaired to U+FFFD, as a Rust String
    /// would hold it). addSpecial applies the post-processor's template (e.g. a leading <s>).
    std::vector<int64_t> encode(const std::string& text, bool addSpecial = true) const;
    /// The tokens' strings as in the vocabulary (e.g. "Ġthe", "▁the", "<0x0A>").
    std::vector<std::string> tokens(const std::vector<int64_t>& ids) const;
    /// Text of ids through the decoder chain; skipSpecial drops special added tokens. Ids the
    /// tokenizer does not know are left out (as the library does).
    std::string decode(const std::vector<int64_t>& ids, bool skipSpecial = false) const;
    /// Readable text of one token (decoded alone, without stripping), for display.
    std::string tokenText(int64_t id) const;
    /// Number of ids (model vocabulary and added tokens).
    int64_t size() const;
    const std::string& path() const;

    struct Impl;

private:
    explicit Tokenizer(std::unique_ptr<Impl> impl);
    std::unique_ptr<Impl> m;
};

/// Trains a byte-level BPE (GPT-2 pre-tokenization, as GPT-2 and Llama 3 use) on `texts` to
/// `vocabSize` ids: 256 byte symbols, then merges of the most frequent adjacent pair (ties to
/// the pair whose ids are smaller, so the result is deterministic), then `specialTokens`.
/// Returns the tokenizer.json text, loadable by the Hugging Face tokenizers library.
std::string trainByteLevelBpe(const std::vector<std::string>& texts, int64_t vocabSize,
                              const std::vector<std::string>& specialTokens);

/// Replaces invalid UTF-8 sequences by U+FFFD (as Rust's String::from_utf8_lossy does).
std::string repairUtf8(const std::string& s);

/// UTF-8 text in lower case, every script's letters (Python's str.lower, not only A–Z).
std::string lowerCase(const std::string& s);

} // namespace sparqlab::text
