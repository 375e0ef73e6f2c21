#include "atomic_file.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <system_error>
#include <unistd.h>

namespace sparqlab::base {

namespace {

/// Whether `path` is there and is neither a regular file nor a folder (followed through links):
/// a device such as /dev/null, or a pipe, which a rename would replace with a regular file.
bool special(const std::string& path) {
    std::error_code ec;
    const std::filesystem::file_status s = std::filesystem::status(path, ec);
    return !ec && std::filesystem::exists(s) && !std::filesystem::is_regular_file(s) &&
           !std::filesystem::is_directory(s);
}

} // namespace

AtomicFile::AtomicFile(std::string path)
    : m_path(std::move(path)), m_tmp(m_path + ".tmp-" + std::to_string(::getpid())) {}

AtomicFile::~AtomicFile() {
    discard();
}

AtomicFile::AtomicFile(AtomicFile&& o) noexcept
    : m_path(std::move(o.m_path)), m_tmp(std::move(o.m_tmp)) {
    o.m_tmp.clear();
}

AtomicFile& AtomicFile::operator=(AtomicFile&& o) noexcept {
    if (this != &o) {
        discard();
        m_path = std::move(o.m_path);
        m_tmp = std::move(o.m_tmp);
        o.m_tmp.clear();
    }
    return *this;
}

void AtomicFile::discard() {
    if (!m_tmp.empty()) {
        std::remove(m_tmp.c_str());
        m_tmp.clear();
    }
}

void AtomicFile::commit() {
    if (m_tmp.empty())
        throw std::runtime_error(m_path + ": written already (or discarded)");
    if (special(m_path)) {
        discard();
        throw std::runtime_error(m_path +
                                 ": not a regular file (a device or a pipe): not replaced");
    }
    std::error_code ec;
    std::filesystem::rename(m_tmp, m_path, ec);
    if (ec) {
        discard();
        throw std::runtime_error(m_path +
                                 ": cannot rename the finished file into place: " + ec.message());
    }
    m_tmp.clear();
}

void writeAtomically(const std::string& path,
                     const std::function<void(const std::string&)>& write) {
    AtomicFile f(path);
    write(f.tempPath());
    f.commit();
}

std::string cannotCreateReason(const std::string& path) {
    std::filesystem::path folder = std::filesystem::path(path).parent_path();
    if (folder.empty())
        folder = ".";
    std::error_code ec;
    if (!std::filesystem::is_directory(folder, ec))
        return "cannot create the file: the folder " + folder.string() + " does not exist";
    return "cannot create the file (is the folder writable?)";
}

void writeFileAtomically(const std::string& path, const std::string& text) {
    if (special(path)) { // /dev/null, a pipe: written straight (a rename would replace it)
        std::ofstream out(path, std::ios::binary);
        out << text;
        out.flush();
        if (!out)
            throw std::runtime_error(path + ": cannot write");
        return;
    }
    writeAtomically(path, [&](const std::string& tmp) {
        std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
        if (!out.is_open())
            throw std::runtime_error(path + ": " + cannotCreateReason(path));
        out << text;
        out.flush();
        if (!out)
            throw std::runtime_error(path + ": cannot write (disk full or no permission?)");
    });
}

} // namespace sparqlab::base
