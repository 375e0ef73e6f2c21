#pragma once
/// \file h5.h
/// A thin RAII layer over the HDF5 C API: files, groups, datasets as libtorch tensors, and
/// attributes. Every failure throws H5Error with one line naming the file and the object.
///
/// Threading: HDF5 (Debian's build) is not thread-safe; use one File per thread and never
/// two threads in this layer at once.

#include "base/atomic_file.h"

#include <ATen/core/Tensor.h>

#include <hdf5.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace sparqlab::h5 {

/// Any HDF5 failure, with the file and object it concerns.
class H5Error : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

/// Owns one HDF5 identifier and closes it with the right H5*close.
class Handle {
public:
    Handle() = default;
    Handle(hid_t id, herr_t (*closer)(hid_t)) : m_id(id), m_close(closer) {}
    Handle(Handle&& o) noexcept : m_id(o.m_id), m_close(o.m_close) { o.m_id = H5I_INVALID_HID; }
    Handle& operator=(Handle&& o) noexcept;
    Handle(const Handle&) = delete;
    Handle& operator=(const Handle&) = delete;
    ~Handle() { reset(); }
    void reset();
    hid_t id() const { return m_id; }
    bool valid() const { return m_id >= 0; }

private:
    hid_t m_id = H5I_INVALID_HID;
    herr_t (*m_close)(hid_t) = nullptr;
};

/// How a dataset is stored when written.
struct WriteOptions {
    std::vector<int64_t> chunk; ///< chunk shape; empty: contiguous
    int deflate = 0;            ///< gzip level 0–9 (needs chunking)
    bool float16 = false;       ///< store floating data as IEEE half precision
};

/// A group (or the root of a file) to read from or write to.
class Group {
public:
    Group(Handle h, std::string file, std::string path)
        : m_h(std::move(h)), m_file(std::move(file)), m_path(std::move(path)) {}

    const std::string& path() const { return m_path; }
    const std::string& file() const { return m_file; }
    hid_t id() const { return m_h.id(); }

    bool has(const std::string& name) const; ///< a link of that name exists
    bool hasAttribute(const std::string& name) const;
    Group group(const std::string& name) const;       ///< opens a subgroup (throws if absent)
    Group createGroup(const std::string& name) const; ///< creates a subgroup
    std::vector<std::string> children() const;        ///< link names, in name order

    /// Reads a whole dataset as a tensor (float, int, uint8 and bool types; strings refused).
    at::Tensor read(const std::string& name) const;
    /// Reads a dataset and checks its dtype class and rank (rank < 0: any).
    at::Tensor read(const std::string& name, int rank) const;
    /// The shape of a dataset without reading it.
    std::vector<int64_t> shape(const std::string& name) const;
    /// Reads a 1-D dataset of strings (fixed or variable length).
    std::vector<std::string> readStrings(const std::string& name) const;
    /// Reads rows [start, start+count) of the first axis of a dataset.
    at::Tensor readSlab(const std::string& name, const std::vector<int64_t>& start,
                        const std::vector<int64_t>& count) const;

    /// Writes a tensor as a new dataset (float32/64, float16, int32/64, uint8, bool → uint8).
    void write(const std::string& name, const at::Tensor& t, const WriteOptions& o = {}) const;
    /// Writes UTF-8 strings as a 1-D variable-length string dataset.
    void writeStrings(const std::string& name, const std::vector<std::string>& s) const;

    std::string attrString(const std::string& name) const;
    int64_t attrInt(const std::string& name) const;
    double attrDouble(const std::string& name) const;
    /// Reads an attribute of a dataset (e.g. a dataset's "dims" or "codes").
    std::string datasetAttrString(const std::string& dataset, const std::string& name) const;

    void setAttr(const std::string& name, const std::string& value) const;
    void setAttr(const std::string& name, const char* value) const {
        setAttr(name, std::string(value));
    }
    void setAttr(const std::string& name, int64_t value) const;
    void setAttr(const std::string& name, int value) const {
        setAttr(name, static_cast<int64_t>(value));
    }
    void setAttr(const std::string& name, double value) const;
    /// One-dimensional numeric attributes (e.g. a value per layer).
    void setAttr(const std::string& name, const std::vector<double>& values) const;
    void setAttr(const std::string& name, const std::vector<int64_t>& values) const;
    std::vector<double> attrDoubles(const std::string& name) const;
    std::vector<int64_t> attrInts(const std::string& name) const;
    void setDatasetAttr(const std::string& dataset, const std::string& name,
                        const std::string& value) const;

    /// "file: /path/name" for messages.
    std::string where(const std::string& name = {}) const;

private:
    Handle m_h;
    std::string m_file;
    std::string m_path;
};

/// An HDF5 file. Writing goes to `<final>.tmp-<pid>` and becomes `<final>` only in commit().
class File {
public:
    /// Opens an existing file read-only. Throws H5Error naming the file if it is not HDF5.
    /// An untrusted file's metadata is first read in a child process (libhdf5 1.10 can crash
    /// or loop on corrupted headers); a file whose reading crashes or does not finish within
    /// the probe time limit is refused.
    static File openRead(const std::string& path);
    /// The probe's time limit (20 s unless set; the fuzzer lowers it). Not thread-safe: set it
    /// before any file is opened.
    static void setProbeTimeLimit(std::chrono::milliseconds limit);
    /// Creates a file to write; nothing appears under `path` until commit().
    static File create(const std::string& path);

    File(File&& o) noexcept = default;
    File& operator=(File&&) = delete;
    ~File(); ///< an uncommitted file being written is removed (the handle closed first)

    Group root() const;
    /// Flushes, closes and renames the temporary file to its final name.
    void commit();
    const std::string& path() const { return m_path; }

private:
    File() = default;
    std::optional<base::AtomicFile> m_out; // while writing (base/atomic_file.h)
    Handle m_h;                            // closed before m_out removes the file
    std::string m_path;
};

/// Silences HDF5's own error printing on this thread's stack (we report errors ourselves).
void quietErrors();

} // namespace sparqlab::h5
