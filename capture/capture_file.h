#pragma once
/// \file capture_file.h
/// Capture files (CONTRACTS.md §3): q, K and V of every layer and head for many prompts.
///
/// Threading: one reader or writer per thread; HDF5 is not thread-safe (see h5.h).

#include "attention/attention.h"
#include "capture/h5.h"
#include "model/captured.h"

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace sparqlab::capture {

inline constexpr const char* kCaptureFormat = "sparqlab.capture";
/// The version a capture is written with: 3 where the model has sinks, chunked layers or a
/// value dimension of its own (what a version 2 reader would get wrong), else 2; 4 to 6 for the
/// learned selections (CaptureInfo::formatVersion); versions 1 to 6 are read.
inline constexpr int64_t kCaptureFormatVersion = 3;

/// Writes a capture to `<path>.tmp-<pid>` and renames it to `path` in finish().
class CaptureWriter {
public:
    /// float16: store q, K and V as half precision.
    CaptureWriter(const std::string& path, const model::CaptureInfo& info, bool float16 = false);
    /// Checks the example against the info and appends it as /examples/NNNN.
    void add(const model::CaptureExample& example);
    /// Completes the file under its final name. Without it, nothing is left behind.
    void finish();
    int64_t count() const { return m_count; }
    /// The file's root group, for a program's own groups beside /examples (sessions).
    h5::Group root() const { return m_file.root(); }

private:
    h5::File m_file;
    model::CaptureInfo m_info;
    bool m_float16;
    int64_t m_count = 0;
};

/// Reads a capture, one example (or one layer of one example) at a time.
class CaptureReader {
public:
    /// Opens and checks the format, version and attributes. Throws h5::H5Error with one line.
    explicit CaptureReader(const std::string& path);

    const model::CaptureInfo& info() const { return m_info; }
    int64_t count() const { return static_cast<int64_t>(m_names.size()); }
    const std::string& path() const { return m_path; }
    /// The file's root group (a program's own groups beside /examples: sessions).
    h5::Group root() const { return m_file.root(); }
    /// The group name of example i ("0000", …).
    const std::string& name(int64_t i) const { return m_names.at(static_cast<size_t>(i)); }

    /// Sequence length S and number of captured queries T of example i, without reading data.
    int64_t seqLen(int64_t i) const;
    int64_t queryCount(int64_t i) const;

    /// The whole example (every layer), checked for shape consistency.
    model::CaptureExample read(int64_t i) const;
    /// Only layer `layer` of example i: q [Hq, T, d_h], K [Hkv, S, d_h] and V [Hkv, S, d_v]
    /// (a DSA capture's index scores [1, T, S]: indexScoresByPosition(0); a DeepSeek-V4
    /// capture's entries of the layer [C_l, d_h] and their scores [T, C_l]); tokens untouched.
    model::CaptureExample readLayer(int64_t i, int64_t layer) const;

private:
    void checkExample(int64_t i) const;
    /// A stored index_scores (or entry_scores: `name`), checked (finite or NaN), or one line
    /// naming the file.
    at::Tensor checkedIndexScores(const at::Tensor& t, const std::string& example,
                                  const char* name = "index_scores") const;
    /// Stored entries, checked (finite), or one line naming the file.
    at::Tensor checkedEntries(const at::Tensor& t, const std::string& example) const;
    /// The attributes of format version 3 and those any version may carry (NoPE, MLA).
    void readVersion3(const h5::Group& root, int64_t version);
    std::string m_path;
    h5::File m_file;
    model::CaptureInfo m_info;
    std::vector<std::string> m_names;
};

} // namespace sparqlab::capture
