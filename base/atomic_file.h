#pragma once
/// \file atomic_file.h
/// Every file SparQ Lab writes is written under a temporary name beside its final one and
/// renamed into place when complete, so that a crash or an error never leaves a half-written
/// file under the final name and never destroys the previous one. This is the one helper.
///
/// Threading: an AtomicFile belongs to one thread.

#include <functional>
#include <string>

namespace sparqlab::base {

/// A file being written: write to tempPath(), then commit(). Destroyed without commit() (an
/// exception, a cancelled job) the temporary is removed.
class AtomicFile {
public:
    explicit AtomicFile(std::string path);
    ~AtomicFile();
    AtomicFile(const AtomicFile&) = delete;
    AtomicFile& operator=(const AtomicFile&) = delete;
    AtomicFile(AtomicFile&& other) noexcept;
    AtomicFile& operator=(AtomicFile&& other) noexcept;

    const std::string& path() const { return m_path; }
    /// The temporary name ("<path>.tmp-<pid>"), in the same folder (a rename cannot cross
    /// file systems).
    const std::string& tempPath() const { return m_tmp; }
    /// Renames the temporary into place. Throws std::runtime_error naming the file.
    void commit();
    /// Removes the temporary now (what the destructor does).
    void discard();

private:
    std::string m_path, m_tmp;
};

/// Why a file cannot be created at `path`, for the one-line error after its name: "the folder F
/// does not exist" where it does not, else "cannot create the file (is the folder writable?)".
std::string cannotCreateReason(const std::string& path);

/// Writes `text` to `path` atomically; to a device or a pipe that is there (/dev/null), straight.
/// Throws std::runtime_error naming the file. (AtomicFile::commit refuses to replace a device or
/// a pipe.)
void writeFileAtomically(const std::string& path, const std::string& text);
/// Calls write(tempPath) and commits: for writers that take a path (libtorch, HDF5, Qt).
void writeAtomically(const std::string& path, const std::function<void(const std::string&)>& write);

} // namespace sparqlab::base
