#include "h5.h"

#include <ATen/ATen.h>

#include <csignal>
#include <cstdio>
#include <fcntl.h>
#include <filesystem>
#include <map>
#include <mutex>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#define SPARQLAB_H5_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SPARQLAB_H5_ASAN 1
#endif
#endif
#ifdef SPARQLAB_H5_ASAN
#include <sanitizer/common_interface_defs.h>
#endif

namespace sparqlab::h5 {

namespace {

[[noreturn]] void fail(const std::string& msg) {
    throw H5Error(msg);
}

Handle own(hid_t id, herr_t (*closer)(hid_t), const std::string& what) {
    if (id < 0)
        fail(what);
    return Handle(id, closer);
}

std::string join(const std::string& base, const std::string& name) {
    if (base.empty() || base == "/")
        return "/" + name;
    return base + "/" + name;
}

/// The 16-bit IEEE float type (h5py reads it as numpy.float16).
Handle halfType() {
    Handle t = own(H5Tcopy(H5T_IEEE_F32LE), H5Tclose, "cannot create the float16 type");
    H5Tset_fields(t.id(), /*spos=*/15, /*epos=*/10, /*esize=*/5, /*mpos=*/0, /*msize=*/10);
    H5Tset_size(t.id(), 2);
    H5Tset_ebias(t.id(), 15);
    H5Tset_precision(t.id(), 16);
    return t;
}

struct MemType {
    hid_t type;
    at::ScalarType scalar;
};

/// Chooses the in-memory type for a dataset's file type. Throws for unsupported classes.
MemType memTypeFor(hid_t fileType, const std::string& where) {
    const H5T_class_t cls = H5Tget_class(fileType);
    const size_t size = H5Tget_size(fileType);
    // Numbers of the sizes C has, only: libhdf5 1.10 converts a float of another size (an
    // 80-byte one: fuzz_capture) past the end of its conversion buffer.
    const bool usual = size == 2 || size == 4 || size == 8 || (cls == H5T_INTEGER && size == 1);
    if ((cls == H5T_FLOAT || cls == H5T_INTEGER) && !usual)
        fail(where + ": a " + (cls == H5T_FLOAT ? "float" : "integer") + " of " +
             std::to_string(size) + " bytes (2, 4 or 8 are read" +
             (cls == H5T_INTEGER ? ", and 1" : "") + ")");
    if (cls == H5T_FLOAT)
        return size > 4 ? MemType{H5T_NATIVE_DOUBLE, at::kDouble}
                        : MemType{H5T_NATIVE_FLOAT, at::kFloat};
    if (cls == H5T_INTEGER) {
        const bool isSigned = H5Tget_sign(fileType) != H5T_SGN_NONE;
        if (size == 1 && !isSigned)
            return {H5T_NATIVE_UINT8, at::kByte};
        if (size <= 4 && (isSigned || size < 4))
            return {H5T_NATIVE_INT32, at::kInt};
        return {H5T_NATIVE_INT64, at::kLong};
    }
    if (cls == H5T_ENUM && size == 1) // h5py's bool
        fail(where + ": boolean enum datasets are not supported; store uint8");
    fail(where + ": unsupported data type (class " + std::to_string(static_cast<int>(cls)) + ")");
}

std::vector<int64_t> extent(hid_t space) {
    const int rank = H5Sget_simple_extent_ndims(space);
    if (rank < 0)
        fail("cannot read a dataspace");
    std::vector<hsize_t> dims(static_cast<size_t>(rank));
    H5Sget_simple_extent_dims(space, dims.data(), nullptr);
    return {dims.begin(), dims.end()};
}

/// Bytes of the file holding `obj` (0 when the library cannot say).
hsize_t fileSizeOf(hid_t obj) {
    hsize_t size = 0;
    if (const hid_t file = H5Iget_file_id(obj); file >= 0) {
        H5Fget_filesize(file, &size);
        H5Fclose(file);
    }
    return size;
}

/// Refuses to allocate for a dataset more than its file could hold: a corrupted header can
/// declare any extent. Even compressed, data is taken to be at most 256 times its file.
void checkDeclaredSize(const std::vector<int64_t>& dims, size_t elementSize, hid_t obj,
                       const std::string& where) {
    const hsize_t fileSize = fileSizeOf(obj);
    const double limit = 256.0 * static_cast<double>(fileSize) + double(int64_t{64} << 20);
    double bytes = static_cast<double>(elementSize);
    for (const int64_t d : dims)
        bytes *= static_cast<double>(std::max<int64_t>(d, 0));
    if (bytes > limit) {
        char declared[32];
        std::snprintf(declared, sizeof declared, "%.3g", bytes);
        fail(where + ": declares " + declared + " bytes of data in a file of " +
             std::to_string(fileSize) + " bytes (corrupt file?)");
    }
}

/// A dataset whose layout does not fit what its dataspace and type declare. libhdf5 1.10 copies
/// past the end of a buffer sized by the dataspace for a chunk larger than the dataset (a
/// corrupted chunk dimension: fuzz_session) and for a compact dataset whose stored bytes
/// differ from its size. Every file of ours has chunks within the dataset's extent.
void checkStorage(hid_t ds, hid_t fileType, const std::vector<int64_t>& dims,
                  const std::string& where) {
    const hid_t plist = H5Dget_create_plist(ds);
    if (plist < 0)
        fail(where + ": cannot read the dataset's layout");
    const H5D_layout_t layout = H5Pget_layout(plist);
    std::vector<hsize_t> chunk(dims.size() + 1, 0);
    const int chunkRank = layout == H5D_CHUNKED
                              ? H5Pget_chunk(plist, static_cast<int>(chunk.size()), chunk.data())
                              : 0;
    H5Pclose(plist);
    if (layout == H5D_CHUNKED) {
        if (chunkRank != static_cast<int>(dims.size()))
            fail(where + ": its chunks have " + std::to_string(chunkRank) +
                 " dimensions, the dataset " + std::to_string(dims.size()) + " (corrupt file?)");
        for (size_t i = 0; i < dims.size(); ++i)
            if (chunk[i] < 1 || chunk[i] > static_cast<hsize_t>(std::max<int64_t>(dims[i], 1)))
                fail(where + ": chunk dimension " + std::to_string(i) + " is " +
                     std::to_string(chunk[i]) + ", the dataset's " + std::to_string(dims[i]) +
                     " (corrupt file?)");
        return;
    }
    if (layout != H5D_COMPACT)
        return;
    uint64_t want = H5Tget_size(fileType);
    for (const int64_t d : dims)
        want *= static_cast<uint64_t>(std::max<int64_t>(d, 0));
    const hsize_t stored = H5Dget_storage_size(ds);
    if (stored != want)
        fail(where + ": its compact storage holds " + std::to_string(stored) +
             " bytes, its shape and type need " + std::to_string(want) + " (corrupt file?)");
}

std::string readStringAttr(hid_t attr, const std::string& where) {
    Handle type = own(H5Aget_type(attr), H5Tclose, where + ": cannot read the attribute type");
    if (H5Tget_class(type.id()) != H5T_STRING)
        fail(where + ": attribute is not a string");
    Handle space = own(H5Aget_space(attr), H5Sclose, where + ": cannot read the attribute space");
    if (H5Sget_simple_extent_npoints(space.id()) != 1)
        fail(where + ": expected one string");
    if (H5Tis_variable_str(type.id()) > 0) {
        Handle mem = own(H5Tcopy(H5T_C_S1), H5Tclose, "H5Tcopy");
        H5Tset_size(mem.id(), H5T_VARIABLE);
        H5Tset_cset(mem.id(), H5Tget_cset(type.id()));
        char* value = nullptr;
        if (H5Aread(attr, mem.id(), &value) < 0)
            fail(where + ": cannot read the string");
        std::string out = value ? value : "";
        H5free_memory(value);
        return out;
    }
    const size_t size = H5Tget_size(type.id());
    // A corrupted header can declare a string of gigabytes (fuzz_session): no string is
    // longer than the file that holds it.
    const hsize_t fileSize = fileSizeOf(attr);
    if (size == 0 || size > fileSize)
        fail(where + ": a string of " + std::to_string(size) + " bytes in a file of " +
             std::to_string(fileSize) + " (corrupt file?)");
    std::string buf(size, '\0');
    if (H5Aread(attr, type.id(), buf.data()) < 0)
        fail(where + ": cannot read the string");
    return std::string(buf.c_str());
}

} // namespace

void quietErrors() {
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
}

Handle& Handle::operator=(Handle&& o) noexcept {
    if (this != &o) {
        reset();
        m_id = o.m_id;
        m_close = o.m_close;
        o.m_id = H5I_INVALID_HID;
    }
    return *this;
}

void Handle::reset() {
    if (m_id >= 0 && m_close)
        m_close(m_id);
    m_id = H5I_INVALID_HID;
}

// --- Group ------------------------------------------------------------------------------------

std::string Group::where(const std::string& name) const {
    return m_file + ": " + (name.empty() ? m_path : join(m_path, name));
}

bool Group::has(const std::string& name) const {
    // H5Lexists needs each intermediate link to exist: walk the path.
    std::string prefix;
    size_t start = 0;
    while (true) {
        const size_t slash = name.find('/', start);
        prefix = name.substr(0, slash);
        const htri_t e = H5Lexists(id(), prefix.c_str(), H5P_DEFAULT);
        if (e <= 0)
            return false;
        if (slash == std::string::npos)
            return true;
        start = slash + 1;
    }
}

bool Group::hasAttribute(const std::string& name) const {
    return H5Aexists(id(), name.c_str()) > 0;
}

Group Group::group(const std::string& name) const {
    if (!has(name))
        fail(where(name) + ": group is missing");
    Handle g =
        own(H5Gopen2(id(), name.c_str(), H5P_DEFAULT), H5Gclose, where(name) + ": not a group");
    return Group(std::move(g), m_file, join(m_path, name));
}

Group Group::createGroup(const std::string& name) const {
    Handle g = own(H5Gcreate2(id(), name.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Gclose,
                   where(name) + ": cannot create the group");
    return Group(std::move(g), m_file, join(m_path, name));
}

std::vector<std::string> Group::children() const {
    H5G_info_t info{};
    if (H5Gget_info(id(), &info) < 0)
        fail(where() + ": cannot list the group");
    std::vector<std::string> names;
    for (hsize_t i = 0; i < info.nlinks; ++i) {
        const ssize_t n =
            H5Lget_name_by_idx(id(), ".", H5_INDEX_NAME, H5_ITER_INC, i, nullptr, 0, H5P_DEFAULT);
        if (n < 0)
            fail(where() + ": cannot list the group");
        std::string s(static_cast<size_t>(n) + 1, '\0');
        H5Lget_name_by_idx(id(), ".", H5_INDEX_NAME, H5_ITER_INC, i, s.data(), s.size(),
                           H5P_DEFAULT);
        s.resize(static_cast<size_t>(n));
        names.push_back(std::move(s));
    }
    return names;
}

std::vector<int64_t> Group::shape(const std::string& name) const {
    if (!has(name))
        fail(where(name) + ": dataset is missing");
    Handle ds =
        own(H5Dopen2(id(), name.c_str(), H5P_DEFAULT), H5Dclose, where(name) + ": not a dataset");
    Handle space = own(H5Dget_space(ds.id()), H5Sclose, where(name) + ": bad dataspace");
    return extent(space.id());
}

at::Tensor Group::read(const std::string& name) const {
    return read(name, -1);
}

at::Tensor Group::read(const std::string& name, int rank) const {
    if (!has(name))
        fail(where(name) + ": dataset is missing");
    Handle ds =
        own(H5Dopen2(id(), name.c_str(), H5P_DEFAULT), H5Dclose, where(name) + ": not a dataset");
    Handle type = own(H5Dget_type(ds.id()), H5Tclose, where(name) + ": bad type");
    Handle space = own(H5Dget_space(ds.id()), H5Sclose, where(name) + ": bad dataspace");
    const std::vector<int64_t> dims = extent(space.id());
    if (rank >= 0 && static_cast<int>(dims.size()) != rank)
        fail(where(name) + ": expected " + std::to_string(rank) + " dimensions, found " +
             std::to_string(dims.size()));
    const MemType mt = memTypeFor(type.id(), where(name));
    checkDeclaredSize(dims, c10::elementSize(mt.scalar), ds.id(), where(name));
    checkStorage(ds.id(), type.id(), dims, where(name));
    at::Tensor t = at::empty(dims, at::TensorOptions().dtype(mt.scalar));
    if (t.numel() > 0 && H5Dread(ds.id(), mt.type, H5S_ALL, H5S_ALL, H5P_DEFAULT, t.data_ptr()) < 0)
        fail(where(name) + ": cannot read the data (file damaged or truncated?)");
    return t;
}

at::Tensor Group::readSlab(const std::string& name, const std::vector<int64_t>& start,
                           const std::vector<int64_t>& count) const {
    if (!has(name))
        fail(where(name) + ": dataset is missing");
    Handle ds =
        own(H5Dopen2(id(), name.c_str(), H5P_DEFAULT), H5Dclose, where(name) + ": not a dataset");
    Handle type = own(H5Dget_type(ds.id()), H5Tclose, where(name) + ": bad type");
    Handle space = own(H5Dget_space(ds.id()), H5Sclose, where(name) + ": bad dataspace");
    const std::vector<int64_t> dims = extent(space.id());
    if (start.size() != dims.size() || count.size() != dims.size())
        fail(where(name) + ": slab rank does not match the dataset");
    for (size_t i = 0; i < dims.size(); ++i)
        if (start[i] < 0 || count[i] < 0 || start[i] + count[i] > dims[i])
            fail(where(name) + ": slab outside the dataset");
    std::vector<hsize_t> st(start.begin(), start.end()), ct(count.begin(), count.end());
    if (H5Sselect_hyperslab(space.id(), H5S_SELECT_SET, st.data(), nullptr, ct.data(), nullptr) < 0)
        fail(where(name) + ": bad slab");
    Handle mem = own(H5Screate_simple(static_cast<int>(ct.size()), ct.data(), nullptr), H5Sclose,
                     "H5Screate_simple");
    const MemType mt = memTypeFor(type.id(), where(name));
    checkDeclaredSize(count, c10::elementSize(mt.scalar), ds.id(), where(name));
    checkStorage(ds.id(), type.id(), dims, where(name));
    at::Tensor t = at::empty(count, at::TensorOptions().dtype(mt.scalar));
    if (t.numel() > 0 &&
        H5Dread(ds.id(), mt.type, mem.id(), space.id(), H5P_DEFAULT, t.data_ptr()) < 0)
        fail(where(name) + ": cannot read the data (file damaged or truncated?)");
    return t;
}

std::vector<std::string> Group::readStrings(const std::string& name) const {
    if (!has(name))
        fail(where(name) + ": dataset is missing");
    Handle ds =
        own(H5Dopen2(id(), name.c_str(), H5P_DEFAULT), H5Dclose, where(name) + ": not a dataset");
    Handle type = own(H5Dget_type(ds.id()), H5Tclose, where(name) + ": bad type");
    if (H5Tget_class(type.id()) != H5T_STRING)
        fail(where(name) + ": not a string dataset");
    Handle space = own(H5Dget_space(ds.id()), H5Sclose, where(name) + ": bad dataspace");
    const hssize_t n = H5Sget_simple_extent_npoints(space.id());
    std::vector<std::string> out;
    if (n <= 0)
        return out;
    // A corrupted header can declare more strings, or longer ones, than a file could hold
    // (even compressed: 64 times its size).
    const hsize_t fileSize = fileSizeOf(ds.id());
    const size_t fixedSize = H5Tis_variable_str(type.id()) > 0 ? 16 : H5Tget_size(type.id());
    if (fixedSize == 0 || static_cast<hsize_t>(n) > fileSize ||
        fixedSize > (size_t{64} * fileSize + (size_t{1} << 20)) / static_cast<size_t>(n))
        fail(where(name) + ": " + std::to_string(n) + " strings of " + std::to_string(fixedSize) +
             " bytes in a file of " + std::to_string(fileSize) + " (corrupt file?)");
    if (H5Tis_variable_str(type.id()) > 0) {
        Handle mem = own(H5Tcopy(H5T_C_S1), H5Tclose, "H5Tcopy");
        H5Tset_size(mem.id(), H5T_VARIABLE);
        H5Tset_cset(mem.id(), H5Tget_cset(type.id()));
        std::vector<char*> ptrs(static_cast<size_t>(n), nullptr);
        if (H5Dread(ds.id(), mem.id(), H5S_ALL, H5S_ALL, H5P_DEFAULT, ptrs.data()) < 0)
            fail(where(name) + ": cannot read the strings");
        for (char* p : ptrs)
            out.emplace_back(p ? p : "");
        H5Dvlen_reclaim(mem.id(), space.id(), H5P_DEFAULT, ptrs.data());
        return out;
    }
    const size_t size = H5Tget_size(type.id());
    std::vector<char> buf(size * static_cast<size_t>(n));
    if (H5Dread(ds.id(), type.id(), H5S_ALL, H5S_ALL, H5P_DEFAULT, buf.data()) < 0)
        fail(where(name) + ": cannot read the strings");
    for (hssize_t i = 0; i < n; ++i) {
        const char* p = buf.data() + static_cast<size_t>(i) * size;
        size_t len = 0;
        while (len < size && p[len] != '\0')
            ++len;
        out.emplace_back(p, len);
    }
    return out;
}

void Group::write(const std::string& name, const at::Tensor& tensor, const WriteOptions& o) const {
    at::Tensor t = tensor.contiguous().cpu();
    hid_t memType = -1;
    Handle fileTypeOwned;
    hid_t fileType = -1;
    switch (t.scalar_type()) {
    case at::kHalf:
    case at::kBFloat16:
        t = t.to(at::kFloat);
        [[fallthrough]];
    case at::kFloat:
        memType = H5T_NATIVE_FLOAT;
        fileType = H5T_IEEE_F32LE;
        break;
    case at::kDouble:
        memType = H5T_NATIVE_DOUBLE;
        fileType = H5T_IEEE_F64LE;
        break;
    case at::kInt:
        memType = H5T_NATIVE_INT32;
        fileType = H5T_STD_I32LE;
        break;
    case at::kLong:
        memType = H5T_NATIVE_INT64;
        fileType = H5T_STD_I64LE;
        break;
    case at::kBool:
        t = t.to(at::kByte);
        [[fallthrough]];
    case at::kByte:
        memType = H5T_NATIVE_UINT8;
        fileType = H5T_STD_U8LE;
        break;
    default:
        fail(where(name) + ": unsupported tensor dtype for HDF5");
    }
    if (o.float16 && (memType == H5T_NATIVE_FLOAT || memType == H5T_NATIVE_DOUBLE)) {
        fileTypeOwned = halfType();
        fileType = fileTypeOwned.id();
    }
    std::vector<hsize_t> dims(t.sizes().begin(), t.sizes().end());
    Handle space = own(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr),
                       H5Sclose, where(name) + ": cannot create the dataspace");
    Handle dcpl = own(H5Pcreate(H5P_DATASET_CREATE), H5Pclose, "H5Pcreate");
    if (!o.chunk.empty() && t.numel() > 0) {
        if (o.chunk.size() != dims.size())
            fail(where(name) + ": chunk rank does not match the data");
        std::vector<hsize_t> chunk;
        for (size_t i = 0; i < dims.size(); ++i)
            chunk.push_back(std::max<hsize_t>(1, std::min<hsize_t>(dims[i], o.chunk[i])));
        H5Pset_chunk(dcpl.id(), static_cast<int>(chunk.size()), chunk.data());
        if (o.deflate > 0)
            H5Pset_deflate(dcpl.id(), static_cast<unsigned>(o.deflate));
    }
    Handle ds = own(
        H5Dcreate2(id(), name.c_str(), fileType, space.id(), H5P_DEFAULT, dcpl.id(), H5P_DEFAULT),
        H5Dclose, where(name) + ": cannot create the dataset");
    if (t.numel() > 0 &&
        H5Dwrite(ds.id(), memType, H5S_ALL, H5S_ALL, H5P_DEFAULT, t.data_ptr()) < 0)
        fail(where(name) + ": cannot write the data (disk full?)");
}

void Group::writeStrings(const std::string& name, const std::vector<std::string>& s) const {
    Handle type = own(H5Tcopy(H5T_C_S1), H5Tclose, "H5Tcopy");
    H5Tset_size(type.id(), H5T_VARIABLE);
    H5Tset_cset(type.id(), H5T_CSET_UTF8);
    const hsize_t n = s.size();
    Handle space = own(H5Screate_simple(1, &n, nullptr), H5Sclose, "H5Screate_simple");
    Handle ds = own(H5Dcreate2(id(), name.c_str(), type.id(), space.id(), H5P_DEFAULT, H5P_DEFAULT,
                               H5P_DEFAULT),
                    H5Dclose, where(name) + ": cannot create the dataset");
    std::vector<const char*> ptrs;
    ptrs.reserve(s.size());
    for (const std::string& x : s)
        ptrs.push_back(x.c_str());
    if (n > 0 && H5Dwrite(ds.id(), type.id(), H5S_ALL, H5S_ALL, H5P_DEFAULT, ptrs.data()) < 0)
        fail(where(name) + ": cannot write the strings");
}

std::string Group::attrString(const std::string& name) const {
    if (!hasAttribute(name))
        fail(where() + ": attribute '" + name + "' is missing");
    Handle a = own(H5Aopen(id(), name.c_str(), H5P_DEFAULT), H5Aclose,
                   where() + ": cannot open attribute '" + name + "'");
    return readStringAttr(a.id(), where() + " attribute '" + name + "'");
}

std::string Group::datasetAttrString(const std::string& dataset, const std::string& name) const {
    if (!has(dataset))
        fail(where(dataset) + ": dataset is missing");
    if (H5Aexists_by_name(id(), dataset.c_str(), name.c_str(), H5P_DEFAULT) <= 0)
        fail(where(dataset) + ": attribute '" + name + "' is missing");
    Handle a = own(H5Aopen_by_name(id(), dataset.c_str(), name.c_str(), H5P_DEFAULT, H5P_DEFAULT),
                   H5Aclose, where(dataset) + ": cannot open attribute '" + name + "'");
    return readStringAttr(a.id(), where(dataset) + " attribute '" + name + "'");
}

int64_t Group::attrInt(const std::string& name) const {
    if (!hasAttribute(name))
        fail(where() + ": attribute '" + name + "' is missing");
    Handle a = own(H5Aopen(id(), name.c_str(), H5P_DEFAULT), H5Aclose,
                   where() + ": cannot open attribute '" + name + "'");
    Handle type = own(H5Aget_type(a.id()), H5Tclose, "H5Aget_type");
    if (H5Tget_class(type.id()) != H5T_INTEGER)
        fail(where() + ": attribute '" + name + "' is not an integer");
    Handle space = own(H5Aget_space(a.id()), H5Sclose, "H5Aget_space");
    if (H5Sget_simple_extent_npoints(space.id()) != 1)
        fail(where() + ": attribute '" + name + "' is not a single number");
    int64_t v = 0;
    if (H5Aread(a.id(), H5T_NATIVE_INT64, &v) < 0)
        fail(where() + ": cannot read attribute '" + name + "'");
    return v;
}

double Group::attrDouble(const std::string& name) const {
    if (!hasAttribute(name))
        fail(where() + ": attribute '" + name + "' is missing");
    Handle a = own(H5Aopen(id(), name.c_str(), H5P_DEFAULT), H5Aclose,
                   where() + ": cannot open attribute '" + name + "'");
    Handle type = own(H5Aget_type(a.id()), H5Tclose, "H5Aget_type");
    const H5T_class_t cls = H5Tget_class(type.id());
    if (cls != H5T_FLOAT && cls != H5T_INTEGER)
        fail(where() + ": attribute '" + name + "' is not a number");
    Handle space = own(H5Aget_space(a.id()), H5Sclose, "H5Aget_space");
    if (H5Sget_simple_extent_npoints(space.id()) != 1)
        fail(where() + ": attribute '" + name + "' is not a single number");
    double v = 0;
    if (H5Aread(a.id(), H5T_NATIVE_DOUBLE, &v) < 0)
        fail(where() + ": cannot read attribute '" + name + "'");
    return v;
}

namespace {
/// A numeric attribute of any shape as `memType` values (at most kMaxAttrValues).
template <typename T>
std::vector<T> readNumbers(const Group& g, const std::string& name, hid_t memType, bool integer) {
    if (!g.hasAttribute(name))
        fail(g.where() + ": attribute '" + name + "' is missing");
    Handle a = own(H5Aopen(g.id(), name.c_str(), H5P_DEFAULT), H5Aclose,
                   g.where() + ": cannot open attribute '" + name + "'");
    Handle type = own(H5Aget_type(a.id()), H5Tclose, "H5Aget_type");
    const H5T_class_t cls = H5Tget_class(type.id());
    if (cls != H5T_INTEGER && (integer || cls != H5T_FLOAT))
        fail(g.where() + ": attribute '" + name + "' is not " +
             (integer ? "a list of integers" : "a list of numbers"));
    Handle space = own(H5Aget_space(a.id()), H5Sclose, "H5Aget_space");
    const hssize_t n = H5Sget_simple_extent_npoints(space.id());
    constexpr hssize_t kMaxAttrValues = hssize_t{1} << 20;
    if (n < 0 || n > kMaxAttrValues)
        fail(g.where() + ": attribute '" + name + "' has an unreadable size");
    std::vector<T> v(static_cast<size_t>(n));
    if (n > 0 && H5Aread(a.id(), memType, v.data()) < 0)
        fail(g.where() + ": cannot read attribute '" + name + "'");
    return v;
}

void writeAttrArray(hid_t obj, const std::string& name, hid_t fileType, hid_t memType,
                    const void* values, hsize_t n, const std::string& where) {
    if (H5Aexists(obj, name.c_str()) > 0)
        H5Adelete(obj, name.c_str());
    Handle space = own(H5Screate_simple(1, &n, nullptr), H5Sclose, "H5Screate_simple");
    Handle a = own(H5Acreate2(obj, name.c_str(), fileType, space.id(), H5P_DEFAULT, H5P_DEFAULT),
                   H5Aclose, where + ": cannot create attribute '" + name + "'");
    if (H5Awrite(a.id(), memType, values) < 0)
        fail(where + ": cannot write attribute '" + name + "'");
}

void writeAttr(hid_t obj, const std::string& name, hid_t fileType, hid_t memType, const void* value,
               const std::string& where) {
    if (H5Aexists(obj, name.c_str()) > 0)
        H5Adelete(obj, name.c_str());
    Handle space = own(H5Screate(H5S_SCALAR), H5Sclose, "H5Screate");
    Handle a = own(H5Acreate2(obj, name.c_str(), fileType, space.id(), H5P_DEFAULT, H5P_DEFAULT),
                   H5Aclose, where + ": cannot create attribute '" + name + "'");
    if (H5Awrite(a.id(), memType, value) < 0)
        fail(where + ": cannot write attribute '" + name + "'");
}

void writeStringAttr(hid_t obj, const std::string& name, const std::string& value,
                     const std::string& where) {
    Handle type = own(H5Tcopy(H5T_C_S1), H5Tclose, "H5Tcopy");
    H5Tset_size(type.id(), H5T_VARIABLE);
    H5Tset_cset(type.id(), H5T_CSET_UTF8);
    const char* p = value.c_str();
    writeAttr(obj, name, type.id(), type.id(), &p, where);
}
} // namespace

void Group::setAttr(const std::string& name, const std::string& value) const {
    writeStringAttr(id(), name, value, where());
}

void Group::setAttr(const std::string& name, int64_t value) const {
    writeAttr(id(), name, H5T_STD_I64LE, H5T_NATIVE_INT64, &value, where());
}

void Group::setAttr(const std::string& name, double value) const {
    writeAttr(id(), name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &value, where());
}

void Group::setAttr(const std::string& name, const std::vector<double>& values) const {
    writeAttrArray(id(), name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, values.data(), values.size(),
                   where());
}

void Group::setAttr(const std::string& name, const std::vector<int64_t>& values) const {
    writeAttrArray(id(), name, H5T_STD_I64LE, H5T_NATIVE_INT64, values.data(), values.size(),
                   where());
}

std::vector<double> Group::attrDoubles(const std::string& name) const {
    return readNumbers<double>(*this, name, H5T_NATIVE_DOUBLE, /*integer=*/false);
}

std::vector<int64_t> Group::attrInts(const std::string& name) const {
    return readNumbers<int64_t>(*this, name, H5T_NATIVE_INT64, /*integer=*/true);
}

void Group::setDatasetAttr(const std::string& dataset, const std::string& name,
                           const std::string& value) const {
    Handle ds = own(H5Dopen2(id(), dataset.c_str(), H5P_DEFAULT), H5Dclose,
                    where(dataset) + ": not a dataset");
    writeStringAttr(ds.id(), name, value, where(dataset));
}

// --- File -------------------------------------------------------------------------------------

namespace {

/// The probe child's exit status when libhdf5 reports an error walking the metadata.
constexpr int kProbeUnreadable = 3;

/// Reads a value of type `t` with `n` points through `read` (an attribute or a dataset),
/// variable-length strings included (where libhdf5 follows heap references).
template <typename Read> void probeValue(hid_t t, hid_t space, Read&& read) {
    const hssize_t n = H5Sget_simple_extent_npoints(space);
    if (n <= 0)
        return;
    if (H5Tget_class(t) == H5T_STRING && H5Tis_variable_str(t) > 0) {
        if (n > (hssize_t{1} << 24)) // more strings than any capture has tokens: corrupt
            ::_exit(kProbeUnreadable);
        const hid_t mem = H5Tcopy(H5T_C_S1);
        H5Tset_size(mem, H5T_VARIABLE);
        H5Tset_cset(mem, H5Tget_cset(t)); // as the readers do, or the conversion stops early
        std::vector<char*> v(static_cast<size_t>(n), nullptr);
        // A string the child cannot read within its memory limit (a corrupted global heap
        // declaring gigabytes, found by fuzz_session) is a file this process must not read.
        if (read(mem, v.data()) < 0)
            ::_exit(kProbeUnreadable);
        H5Dvlen_reclaim(mem, space, H5P_DEFAULT, v.data());
        H5Tclose(mem);
        return;
    }
    const size_t size = H5Tget_size(t);
    if (size == 0 || n > (hssize_t{1} << 24) || size * static_cast<size_t>(n) > (size_t{64} << 20))
        return;
    std::vector<char> buf(size * static_cast<size_t>(n));
    read(t, buf.data());
}

herr_t probeAttribute(hid_t obj, const char* name, const H5A_info_t*, void*) {
    const hid_t a = H5Aopen(obj, name, H5P_DEFAULT);
    if (a < 0)
        return 0;
    const hid_t t = H5Aget_type(a), sp = H5Aget_space(a);
    if (t >= 0 && sp >= 0)
        probeValue(t, sp, [a](hid_t mem, void* buf) { return H5Aread(a, mem, buf); });
    if (t >= 0)
        H5Tclose(t);
    if (sp >= 0)
        H5Sclose(sp);
    H5Aclose(a);
    return 0;
}

herr_t probeObject(hid_t root, const char* name, const H5O_info_t*, void*) {
    const hid_t o = H5Oopen(root, name, H5P_DEFAULT);
    if (o < 0)
        return 0;
    // An iteration that stops at an error leaves attributes unread that the parent would read
    // by name (fuzz_calibration: a 'format' attribute whose global heap sends H5HG_read into
    // an endless loop was behind an attribute list libhdf5 could not iterate).
    if (H5Aiterate2(o, H5_INDEX_NAME, H5_ITER_INC, nullptr, probeAttribute, nullptr) < 0)
        ::_exit(kProbeUnreadable);
    if (H5Iget_type(o) == H5I_DATASET) {
        const hid_t t = H5Dget_type(o), sp = H5Dget_space(o), pl = H5Dget_create_plist(o);
        // Strings (token texts) are read whole; numbers only by their headers.
        if (t >= 0 && sp >= 0 && H5Tget_class(t) == H5T_STRING)
            probeValue(t, sp, [o](hid_t mem, void* buf) {
                return H5Dread(o, mem, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf);
            });
        for (const hid_t h : {t, sp, pl})
            if (h >= 0)
                H5Idec_ref(h);
    }
    H5Oclose(o);
    return 0;
}

std::chrono::milliseconds g_probeLimit{20000};

/// Walks every object header and attribute of the file in a child process. libhdf5 1.10
/// (Debian 12) can overflow a buffer or crash on a corrupted header (our fuzzer found one in
/// H5Aexists); a file that kills the child is refused before this process touches it.
/// Returns an empty string when the walk finished.
/// What the probe child may add to its address space: what a file of `bytes` could describe
/// (its metadata is in the file: eight times its size), and 256 MiB for the library itself.
/// A corrupted header asking for gigabytes then fails its allocation in the child (a clean
/// refusal) instead of taking the memory, or a fuzzer's out-of-memory report.
uint64_t probeMemoryBudget(uint64_t bytes) {
    return (uint64_t{256} << 20) + std::min<uint64_t>(bytes, uint64_t{1} << 36) * 8;
}

/// Caps the child's address space at its size now plus `budget` (RLIMIT_AS; under a sanitizer
/// too: its shadow and allocator regions are mapped already, and only new mappings count).
void limitAddressSpace(uint64_t budget) {
    uint64_t pages = 0;
    if (FILE* f = std::fopen("/proc/self/statm", "r")) {
        unsigned long long p = 0;
        if (std::fscanf(f, "%llu", &p) == 1)
            pages = p;
        std::fclose(f);
    }
    if (pages == 0)
        return;
    const uint64_t now = pages * static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
    rlimit r{};
    if (::getrlimit(RLIMIT_AS, &r) != 0)
        return;
    const uint64_t want = now + budget;
    if (r.rlim_max != RLIM_INFINITY && want > r.rlim_max)
        return;
    r.rlim_cur = static_cast<rlim_t>(want);
    ::setrlimit(RLIMIT_AS, &r);
}

std::string probeInChild(const std::string& path) {
    std::error_code sizeError;
    const uintmax_t fileSize = std::filesystem::file_size(path, sizeError);
    const uint64_t budget = probeMemoryBudget(sizeError ? 0 : static_cast<uint64_t>(fileSize));
    std::fflush(nullptr);
    const pid_t pid = ::fork();
    if (pid < 0)
        return {}; // cannot probe: open it directly
    if (pid == 0) {
        // What the child might print as it dies (a sanitizer's report) is not the user's.
        const int devNull = ::open("/dev/null", O_WRONLY);
        if (devNull >= 0)
            ::dup2(devNull, STDERR_FILENO);
        // The child's death is expected and reported by the parent: no crash handler of the
        // parent's (a fuzzer's, which would save the input as a crash of its own) runs here.
        for (const int sig : {SIGSEGV, SIGBUS, SIGABRT, SIGFPE, SIGILL})
            std::signal(sig, SIG_DFL);
#ifdef SPARQLAB_H5_ASAN
        __sanitizer_set_death_callback(nullptr);
#endif
        limitAddressSpace(budget);
        const hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
        // A walk that stops at an error leaves the objects after it unread (and the parent
        // would read them): the fuzzer found a string dataset crashing libhdf5 that way.
        if (f < 0 || H5Ovisit(f, H5_INDEX_NAME, H5_ITER_INC, probeObject, nullptr) < 0)
            ::_exit(kProbeUnreadable);
        H5Fclose(f);
        ::_exit(0);
    }
    int status = 0;
    const auto deadline = std::chrono::steady_clock::now() + g_probeLimit;
    for (;;) {
        const pid_t r = ::waitpid(pid, &status, WNOHANG);
        if (r == pid)
            break;
        if (r < 0)
            return {};
        if (std::chrono::steady_clock::now() >= deadline) {
            ::kill(pid, SIGKILL);
            ::waitpid(pid, &status, 0);
            char limit[32];
            std::snprintf(limit, sizeof limit, "%g",
                          std::chrono::duration<double>(g_probeLimit).count());
            return std::string("reading its metadata did not finish in ") + limit +
                   " s (corrupt file?)";
        }
        ::usleep(10000);
    }
    if (WIFSIGNALED(status))
        return "the HDF5 library crashed reading its metadata (signal " +
               std::to_string(WTERMSIG(status)) + "): the file is corrupt";
    if (WIFEXITED(status) && WEXITSTATUS(status) == kProbeUnreadable)
        return "the HDF5 library cannot read all of its metadata: the file is corrupt";
    if (WIFEXITED(status) && WEXITSTATUS(status) != 0) // e.g. a sanitizer's report
        return "the HDF5 library failed reading its metadata: the file is corrupt";
    return {};
}

/// Files this process wrote itself (File::commit), with the size and modification time they
/// had then: opened again unchanged, they need no probe in a child. Besides the time, that
/// keeps fork() away from a process whose other threads are busy in OpenBLAS: its pre-fork
/// handler (0.3.21) can hang joining a worker while another thread runs a BLAS call (the GUI
/// exporting its capture while Generate runs did).
struct Written {
    std::uintmax_t size = 0;
    std::filesystem::file_time_type mtime;
};
std::mutex g_writtenMutex;
std::map<std::string, Written> g_written;

std::string canonicalOf(const std::string& path) {
    std::error_code ec;
    const auto p = std::filesystem::weakly_canonical(path, ec);
    return ec ? path : p.string();
}

bool writtenHereUnchanged(const std::string& path) {
    std::error_code ec;
    const auto size = std::filesystem::file_size(path, ec);
    if (ec)
        return false;
    const auto mtime = std::filesystem::last_write_time(path, ec);
    if (ec)
        return false;
    const std::lock_guard<std::mutex> lock(g_writtenMutex);
    const auto it = g_written.find(canonicalOf(path));
    return it != g_written.end() && it->second.size == size && it->second.mtime == mtime;
}

void rememberWritten(const std::string& path) {
    std::error_code ec;
    Written w;
    w.size = std::filesystem::file_size(path, ec);
    if (ec)
        return;
    w.mtime = std::filesystem::last_write_time(path, ec);
    if (ec)
        return;
    const std::lock_guard<std::mutex> lock(g_writtenMutex);
    g_written[canonicalOf(path)] = w;
}

} // namespace

void File::setProbeTimeLimit(std::chrono::milliseconds limit) {
    g_probeLimit = limit;
}

File File::openRead(const std::string& path) {
    quietErrors();
    std::error_code ec;
    if (!std::filesystem::exists(path, ec))
        fail(path + ": no such file");
    if (std::filesystem::is_directory(path, ec))
        fail(path + ": is a directory, not an HDF5 file");
    if (H5Fis_hdf5(path.c_str()) <= 0)
        fail(path + ": not an HDF5 file");
    if (!writtenHereUnchanged(path))
        if (const std::string why = probeInChild(path); !why.empty())
            fail(path + ": " + why);
    File f;
    f.m_path = path;
    f.m_h = own(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose,
                path + ": cannot open the HDF5 file (damaged or truncated?)");
    return f;
}

File File::create(const std::string& path) {
    quietErrors();
    File f;
    f.m_path = path;
    f.m_out.emplace(path);
    f.m_h = own(H5Fcreate(f.m_out->tempPath().c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT),
                H5Fclose, path + ": " + base::cannotCreateReason(path));
    return f;
}

File::~File() {
    m_h.reset(); // closed before the temporary is removed
}

Group File::root() const {
    Handle g = own(H5Gopen2(m_h.id(), "/", H5P_DEFAULT), H5Gclose, m_path + ": cannot open root");
    return Group(std::move(g), m_path, "/");
}

void File::commit() {
    if (!m_out)
        return;
    // A group, dataset or attribute still open keeps HDF5's file open past our close: its last
    // metadata would be written after the rename, into the file as published (a writer's bug;
    // the session writer had it). Refused, and the temporary removed: nothing half-written
    // appears under the final name.
    const ssize_t open =
        H5Fget_obj_count(m_h.id(), H5F_OBJ_DATASET | H5F_OBJ_GROUP | H5F_OBJ_DATATYPE |
                                       H5F_OBJ_ATTR | H5F_OBJ_LOCAL);
    if (open != 0) {
        m_h.reset();
        m_out.reset();
        fail(m_path + ": " + std::to_string(open) +
             " of its groups, datasets or attributes are still open when the file is finished "
             "(close them before commit)");
    }
    if (H5Fflush(m_h.id(), H5F_SCOPE_GLOBAL) < 0)
        fail(m_path + ": cannot flush the file (disk full?)");
    m_h.reset();
    try {
        m_out->commit();
    } catch (const std::runtime_error& e) {
        m_out.reset();
        fail(e.what());
    }
    m_out.reset();
    rememberWritten(m_path);
}

} // namespace sparqlab::h5
