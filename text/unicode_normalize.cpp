// Unicode 9.0 normalization (the tokenizers library's): Qt decomposes and orders by 9.0's
// tables; the canonical composition is done here, because Qt 6.4's composition skips the
// character after a composed pair beyond the Basic Multilingual Plane (Kaithi's U+1109A
// followed by "é" came out as "e" and U+0301).

#include "unicode_normalize.h"
#include "text_pieces.h"

#include <QChar>
#include <QList>
#include <QString>
#include <QStringDecoder>

#include <unordered_map>
#include <vector>

namespace sparqlab::text {

namespace {

constexpr auto kVersion = QChar::Unicode_9_0;

bool inVersion(char32_t c) {
    const QChar::UnicodeVersion v = QChar::unicodeVersion(c);
    return v != QChar::Unicode_Unassigned && v <= kVersion;
}

/// The canonical combining class by 9.0: 0 for a character assigned since.
int combiningClass(char32_t c) {
    return inVersion(c) ? QChar::combiningClass(c) : 0;
}

// Hangul syllables compose by arithmetic (Unicode §3.12).
constexpr char32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr char32_t kLCount = 19, kVCount = 21, kTCount = 28, kNCount = kVCount * kTCount,
                   kSCount = kLCount * kNCount;

/// The primary composites of 9.0 by their pair: a canonical decomposition into two characters,
/// not excluded from composition (a composite that 9.0's NFC of itself leaves is not).
const std::unordered_map<uint64_t, char32_t>& compositions() {
    static const std::unordered_map<uint64_t, char32_t> table = [] {
        std::unordered_map<uint64_t, char32_t> t;
        for (char32_t c = 0; c <= 0x10FFFF; ++c) {
            if ((c >= 0xD800 && c <= 0xDFFF) || (c >= kSBase && c < kSBase + kSCount) ||
                QChar::decompositionTag(c) != QChar::Canonical || !inVersion(c))
                continue;
            const QList<uint> d = QChar::decomposition(c).toUcs4();
            if (d.size() != 2)
                continue;
            const QString self = QString::fromUcs4(&c, 1);
            if (self.normalized(QString::NormalizationForm_C, kVersion) != self)
                continue; // excluded: a singleton, a non-starter's or an exclusion
            t.emplace((uint64_t{d[0]} << 32) | d[1], c);
        }
        return t;
    }();
    return table;
}

/// The primary composite of (a, b), or 0.
char32_t composite(char32_t a, char32_t b) {
    if (a >= kLBase && a < kLBase + kLCount && b >= kVBase && b < kVBase + kVCount)
        return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
    if (a >= kSBase && a < kSBase + kSCount && (a - kSBase) % kTCount == 0 && b > kTBase &&
        b < kTBase + kTCount)
        return a + (b - kTBase);
    const auto& t = compositions();
    const auto it = t.find((uint64_t{a} << 32) | b);
    return it == t.end() ? 0 : it->second;
}

/// Canonical composition of a decomposed, canonically ordered string (UAX #15 §1.3): each
/// character unblocked from the last starter and composing with it joins it.
std::vector<char32_t> compose(const QList<uint>& s) {
    std::vector<char32_t> out(s.begin(), s.end());
    if (out.empty())
        return out;
    size_t starterAt = 0, kept = 1;
    char32_t starter = out[0];
    int lastClass = combiningClass(starter) == 0 ? 0 : 256; // (a leading mark blocks)
    for (size_t i = 1; i < out.size(); ++i) {
        const char32_t c = out[i];
        const int cc = combiningClass(c);
        const char32_t joined = composite(starter, c);
        if (joined != 0 && (lastClass < cc || lastClass == 0)) {
            out[starterAt] = starter = joined;
            continue;
        }
        if (cc == 0) {
            starterAt = kept;
            starter = c;
        }
        lastClass = cc;
        out[kept++] = c;
    }
    out.resize(kept);
    return out;
}

} // namespace

QString qStringOfUtf8(const std::string& utf8) {
    QStringDecoder decode(QStringDecoder::Utf8, QStringDecoder::Flag::ConvertInitialBom);
    return decode(QByteArrayView(utf8.data(), static_cast<qsizetype>(utf8.size())));
}

std::string normalizeUnicode9(const std::string& utf8, NormalForm form) {
    bool ascii = true;
    for (const char ch : utf8)
        ascii = ascii && static_cast<unsigned char>(ch) < 0x80;
    if (ascii)
        return utf8; // (every normal form of ASCII is itself)
    const bool compat = form == NormalForm::KC || form == NormalForm::KD;
    const QString decomposed = qStringOfUtf8(utf8).normalized(
        compat ? QString::NormalizationForm_KD : QString::NormalizationForm_D, kVersion);
    if (form == NormalForm::D || form == NormalForm::KD)
        return decomposed.toStdString();
    std::string out; // (UTF-8 written here: QString::fromUcs4 would drop a leading U+FEFF)
    for (const char32_t c : compose(decomposed.toUcs4()))
        out += pieces::encodeUtf8(c);
    return out;
}

} // namespace sparqlab::text
