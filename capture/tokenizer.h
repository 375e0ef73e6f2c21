#pragma once
/// \file tokenizer.h
/// A Hugging Face `tokenizer.json` read and run as the tokenizers library does: added tokens
/// split out first, then normalizer, pre-tokenizer, BPE model (byte-level, or SentencePiece
/// style with byte fallback), post-processor; and the decoder chain for decoding.
///
/// Threading: a Tokenizer is immutable after construction; encode/decode are thread-safe.

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace sparqlab::capture {

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
    /// Text of ids through the decoder chain; skipSpecial drops special added tokens.
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

/// Replaces invalid UTF-8 sequences by U+FFFD (as Rust's String::from_utf8_lossy does).
std::string repairUtf8(const std::string& s);

} // namespace sparqlab::capture
