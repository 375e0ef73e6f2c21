#pragma once
/// \file unicode_normalize.h
/// Unicode normalization as the tokenizers library computes it: its NFC, NFD, NFKC and NFKD
/// normalizers use Unicode 9.0's tables (the unicode-normalization crate it was built with), so a
/// character assigned since is left as it is, and is a starter that nothing composes with.

#include <string>

class QString;

namespace sparqlab::text {

/// UTF-8 text as a QString, a leading U+FEFF kept (QString::fromUtf8 drops it as a byte order
/// mark; to the library it is a character like any other).
QString qStringOfUtf8(const std::string& utf8);

enum class NormalForm { C, D, KC, KD };

/// `utf8` in the normal form, by Unicode 9.0 (docs/tokenizers.md, its normalizers).
std::string normalizeUnicode9(const std::string& utf8, NormalForm form);

} // namespace sparqlab::text
