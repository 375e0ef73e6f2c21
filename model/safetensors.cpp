#include "safetensors.h"

#include "base/atomic_file.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <string_view>
#include <sys/mman.h>
#include <sys/stat.h>
#include <type_traits>
#include <unistd.h>

namespace sparqlab::model {

namespace fs = std::filesystem;

float float8Value(Float8 format, uint8_t byte) {
    const float sign = (byte & 0x80) ? -1.0f : 1.0f;
    switch (format) {
    case Float8::E4M3: { // 4 exponent bits (bias 7), 3 mantissa bits, no infinities
        const int e = (byte >> 3) & 0xF, m = byte & 0x7;
        if (e == 0xF && m == 0x7)
            return std::numeric_limits<float>::quiet_NaN();
        return sign * (e == 0 ? std::ldexp(static_cast<float>(m), -9)
                              : std::ldexp(static_cast<float>(8 + m), e - 10));
    }
    case Float8::E5M2: { // 5 exponent bits (bias 15), 2 mantissa bits, IEEE specials
        const int e = (byte >> 2) & 0x1F, m = byte & 0x3;
        if (e == 0x1F)
            return m == 0 ? sign * std::numeric_limits<float>::infinity()
                          : std::numeric_limits<float>::quiet_NaN();
        return sign * (e == 0 ? std::ldexp(static_cast<float>(m), -16)
                              : std::ldexp(static_cast<float>(4 + m), e - 17));
    }
    case Float8::E8M0: // an unsigned exponent, bias 127
        return byte == 0xFF ? std::numeric_limits<float>::quiet_NaN()
                            : std::ldexp(1.0f, static_cast<int>(byte) - 127);
    case Float8::None:
        break;
    }
    return std::numeric_limits<float>::quiet_NaN();
}

namespace {

/// Headers larger than this are refused (real ones are a few hundred kilobytes).
constexpr uint64_t kMaxHeaderBytes = uint64_t{100} << 20;

[[noreturn]] void fail(const std::string& path, const std::string& what) {
    throw CheckpointError(path + ": " + what);
}

/// The dtypes read here: one table, every check and conversion built from it. The float8 ones
/// are held as bytes and decoded (libtorch 1.13 has no float8 type); U8 holds MXFP4 blocks and
/// scales, bytes that are no values of their own; I64 and I32 hold integer tables.
struct DtypeInfo {
    const char* name;
    const char* torchName; ///< as config.json's torch_dtype names it
    size_t size;
    at::ScalarType held; ///< how the bytes are held when copied out
    Float8 float8;
    bool values = true; ///< its elements are numbers a weight holds (not U8's packed bytes)
};
constexpr DtypeInfo kDtypes[] = {
    {"F32", "float32", 4, at::kFloat, Float8::None},
    {"F16", "float16", 2, at::kHalf, Float8::None},
    {"BF16", "bfloat16", 2, at::kBFloat16, Float8::None},
    {"F8_E4M3", "float8_e4m3fn", 1, at::kByte, Float8::E4M3},
    {"F8_E5M2", "float8_e5m2", 1, at::kByte, Float8::E5M2},
    {"F8_E8M0", "float8_e8m0fnu", 1, at::kByte, Float8::E8M0},
    {"U8", "uint8", 1, at::kByte, Float8::None, /*values=*/false},
    // Integer tables (DeepSeek-V4's tid2eid, expert ids per token id), read as numbers.
    {"I64", "int64", 8, at::kLong, Float8::None},
    {"I32", "int32", 4, at::kInt, Float8::None},
};

/// The 16 values of an MXFP4 (e2m1) nibble, as transformers' FP4_VALUES lists them.
constexpr float kFp4Values[16] = {+0.0f, +0.5f, +1.0f, +1.5f, +2.0f, +3.0f, +4.0f, +6.0f,
                                  -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};
/// A byte's two values, its low nibble first: one lookup a byte.
struct Fp4Pair {
    float low, high;
};
const std::array<Fp4Pair, 256> kFp4Pairs = [] {
    std::array<Fp4Pair, 256> p{};
    for (size_t b = 0; b < p.size(); ++b)
        p[b] = {kFp4Values[b & 15u], kFp4Values[b >> 4]};
    return p;
}();

/// A decoded MXFP4 value in bfloat16: e2m1 times a power of two has at most two significant
/// bits and float32's exponent range, which bfloat16 shares, so float32's top half is it
/// exactly (subnormals included), what rounding to nearest even gives, without rounding. The
/// NaN of 0 × 2^128 (a scale of 255) is a quiet NaN, whose quiet bit the top half keeps.
c10::BFloat16 exactBFloat16(float f) {
    uint32_t u = 0;
    std::memcpy(&u, &f, sizeof u);
    return {static_cast<uint16_t>(u >> 16), c10::BFloat16::from_bits()};
}
/// The suffixes of an MXFP4 weight's two tensors (gpt-oss: experts.gate_up_proj_blocks).
constexpr std::string_view kBlocksSuffix = "_blocks", kScalesSuffix = "_scales";

const DtypeInfo* dtypeInfo(const std::string& dtype) {
    for (const DtypeInfo& d : kDtypes)
        if (dtype == d.name)
            return &d;
    return nullptr;
}

size_t elementSize(const std::string& dtype) {
    const DtypeInfo* d = dtypeInfo(dtype);
    return d ? d->size : 0;
}

at::ScalarType scalarType(const std::string& dtype) {
    return dtypeInfo(dtype)->held;
}

} // namespace

std::string torchDtypeName(const std::string& dtype) {
    const DtypeInfo* d = dtypeInfo(dtype);
    return d ? d->torchName : dtype;
}

std::optional<at::ScalarType> floatScalarType(const std::string& dtype) {
    const DtypeInfo* d = dtypeInfo(dtype);
    if (!d || d->float8 != Float8::None || !d->values)
        return std::nullopt;
    return d->held;
}

std::string torchDtypeName(at::ScalarType t) {
    for (const DtypeInfo& d : kDtypes)
        if (d.float8 == Float8::None && d.values && d.held == t)
            return d.torchName;
    return c10::toString(t);
}

namespace {

std::string dtypeList() {
    std::string out;
    for (size_t i = 0; i < std::size(kDtypes); ++i)
        out += std::string(i == 0                        ? ""
                           : i + 1 == std::size(kDtypes) ? " or "
                                                         : ", ") +
               kDtypes[i].name;
    return out;
}

/// The 256 values of a float8 format, float32, indexed by the byte.
const at::Tensor& float8Table(Float8 f) {
    static const std::array<at::Tensor, 3> tables = [] {
        std::array<at::Tensor, 3> t;
        for (int k = 0; k < 3; ++k) {
            t[k] = at::empty({256}, at::kFloat);
            float* v = t[k].data_ptr<float>();
            for (int b = 0; b < 256; ++b)
                v[b] = float8Value(static_cast<Float8>(k + 1), static_cast<uint8_t>(b));
        }
        return t;
    }();
    return tables[static_cast<size_t>(f) - 1];
}

/// Float8 bytes (uint8) as float32 values, a slice at a time (the byte indices are int64).
at::Tensor decodeFloat8(const at::Tensor& bytes, Float8 f) {
    const at::Tensor& table = float8Table(f);
    at::Tensor out = at::empty(bytes.sizes(), at::kFloat);
    const at::Tensor in = bytes.contiguous().view(-1), flat = out.view(-1);
    constexpr int64_t kSlice = int64_t{1} << 22;
    for (int64_t i = 0; i < in.numel(); i += kSlice)
        flat.slice(0, i, i + kSlice)
            .copy_(table.index_select(0, in.slice(0, i, i + kSlice).to(at::kLong)));
    return out;
}

std::string shapeString(const std::vector<int64_t>& s) {
    std::string out = "[";
    for (size_t i = 0; i < s.size(); ++i)
        out += (i ? ", " : "") + std::to_string(s[i]);
    return out + "]";
}

} // namespace

SafetensorsFile::SafetensorsFile(const std::string& path) : m_path(path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        fail(path, std::string("cannot open: ") + std::strerror(errno));
    struct stat st {};
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        ::close(fd);
        fail(path, "not a regular file");
    }
    m_size = static_cast<size_t>(st.st_size);
    if (m_size < 8) {
        ::close(fd);
        fail(path, "truncated: " + std::to_string(m_size) +
                       " bytes, shorter than the 8-byte header length");
    }
    m_map = ::mmap(nullptr, m_size, PROT_READ, MAP_PRIVATE, fd, 0);
    ::close(fd);
    if (m_map == MAP_FAILED) {
        m_map = nullptr;
        fail(path, std::string("cannot map the file: ") + std::strerror(errno));
    }
    // A constructor that throws runs no destructor: unmap here, or every bad file opened
    // would keep its mapping (the fuzzer ran out of mappings after 66k inputs).
    try {
        parseHeader();
    } catch (...) {
        ::munmap(m_map, m_size);
        m_map = nullptr;
        throw;
    }
}

void SafetensorsFile::parseHeader() {
    const std::string& path = m_path;
    const auto* bytes = static_cast<const unsigned char*>(m_map);
    uint64_t headerLen = 0;
    for (int i = 7; i >= 0; --i) // little-endian u64
        headerLen = (headerLen << 8) | bytes[i];
    if (headerLen > m_size - 8)
        fail(path, "header length " + std::to_string(headerLen) +
                       " runs past the end of the file (" + std::to_string(m_size) + " bytes)");
    if (headerLen > kMaxHeaderBytes)
        fail(path, "header length " + std::to_string(headerLen) + " is implausibly large");
    m_dataStart = 8 + static_cast<size_t>(headerLen);
    const uint64_t dataSize = m_size - m_dataStart;

    nlohmann::json header;
    try {
        header = nlohmann::json::parse(bytes + 8, bytes + 8 + headerLen);
    } catch (const nlohmann::json::exception& e) {
        fail(path, std::string("malformed header JSON: ") + e.what());
    }
    if (!header.is_object())
        fail(path, "the header is not a JSON object");
    std::vector<std::pair<TensorEntry, std::string>> byOffset;
    for (const auto& [name, value] : header.items()) {
        if (name == "__metadata__")
            continue;
        const std::string where = "tensor '" + name + "'";
        if (!value.is_object() || !value.contains("dtype") || !value.contains("shape") ||
            !value.contains("data_offsets"))
            fail(path, where + " lacks dtype, shape or data_offsets");
        TensorEntry e;
        if (!value["dtype"].is_string())
            fail(path, where + ": dtype is not a string");
        e.dtype = value["dtype"].get<std::string>();
        const size_t esize = elementSize(e.dtype);
        if (esize == 0)
            fail(path, where + ": unsupported dtype '" + e.dtype + "' (" + dtypeList() + ")");
        const auto& shape = value["shape"];
        const auto& offsets = value["data_offsets"];
        if (!shape.is_array() || !offsets.is_array() || offsets.size() != 2)
            fail(path, where + ": shape must be an array and data_offsets a pair");
        uint64_t numel = 1;
        for (const auto& d : shape) {
            if (!d.is_number_unsigned())
                fail(path, where + ": shape entries must be non-negative integers");
            const uint64_t v = d.get<uint64_t>();
            if (v != 0 && numel > (uint64_t{1} << 62) / v)
                fail(path, where + ": shape is implausibly large");
            numel *= v;
            e.shape.push_back(static_cast<int64_t>(v));
        }
        if (!offsets[0].is_number_unsigned() || !offsets[1].is_number_unsigned())
            fail(path, where + ": data_offsets must be non-negative integers");
        e.begin = offsets[0].get<uint64_t>();
        e.end = offsets[1].get<uint64_t>();
        if (e.begin > e.end || e.end > dataSize)
            fail(path, where + ": data offsets [" + std::to_string(e.begin) + ", " +
                           std::to_string(e.end) + "] outside the data section (" +
                           std::to_string(dataSize) + " bytes; truncated file?)");
        if (e.end - e.begin != numel * esize)
            fail(path, where + ": " + std::to_string(e.end - e.begin) + " bytes do not hold " +
                           e.dtype + " " + shapeString(e.shape));
        byOffset.emplace_back(e, name);
        m_entries.emplace(name, std::move(e));
    }
    std::sort(byOffset.begin(), byOffset.end(),
              [](const auto& a, const auto& b) { return a.first.begin < b.first.begin; });
    for (size_t i = 1; i < byOffset.size(); ++i)
        if (byOffset[i].first.begin < byOffset[i - 1].first.end)
            fail(path, "tensors '" + byOffset[i - 1].second + "' and '" + byOffset[i].second +
                           "' overlap");
}

SafetensorsFile::~SafetensorsFile() {
    if (m_map)
        ::munmap(m_map, m_size);
}

at::Tensor SafetensorsFile::copyOut(const std::string& name) const {
    const auto it = m_entries.find(name);
    if (it == m_entries.end())
        fail(m_path, "tensor '" + name + "' is missing");
    const TensorEntry& e = it->second;
    // Copied out of the mapping (offsets need not be aligned).
    at::Tensor t = at::empty(e.shape, at::TensorOptions().dtype(scalarType(e.dtype)));
    // Copied in slices, each slice's pages dropped from this process after the copy, so that
    // loading peaks near 1x the weights rather than weights + file.
    constexpr size_t kSlice = size_t{16} << 20;
    const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
    const char* src = static_cast<const char*>(m_map) + m_dataStart + e.begin;
    char* dst = static_cast<char*>(t.data_ptr());
    const size_t bytes = e.end - e.begin;
    for (size_t off = 0; off < bytes; off += kSlice) {
        const size_t n = std::min(kSlice, bytes - off);
        std::memcpy(dst + off, src + off, n);
        const uintptr_t lo = (reinterpret_cast<uintptr_t>(src + off) + page - 1) / page * page;
        const uintptr_t hi = reinterpret_cast<uintptr_t>(src + off + n) / page * page;
        if (hi > lo)
            ::madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_DONTNEED);
    }
    return t;
}

at::Tensor SafetensorsFile::load(const std::string& name, at::ScalarType dtype) const {
    at::Tensor t = copyOut(name);
    const Float8 f8 = dtypeInfo(m_entries.at(name).dtype)->float8;
    if (f8 != Float8::None)
        t = decodeFloat8(t, f8);
    return t.scalar_type() == dtype ? t : t.to(dtype);
}

const void* SafetensorsFile::mapped(const std::string& name) const {
    const TensorEntry& e = m_entries.at(name);
    const char* p = static_cast<const char*>(m_map) + m_dataStart + e.begin;
    const size_t align = at::elementSize(scalarType(e.dtype));
    return reinterpret_cast<uintptr_t>(p) % align == 0 ? p : nullptr;
}

// --- Checkpoint -------------------------------------------------------------------------------

void Checkpoint::addFile(const std::string& path) {
    auto f = std::make_shared<SafetensorsFile>(path);
    for (const auto& [name, entry] : f->entries()) {
        m_where[name] = m_files.size();
        m_quantized = m_quantized || dtypeInfo(entry.dtype)->float8 != Float8::None;
    }
    m_files.push_back(std::move(f));
}

Checkpoint Checkpoint::openFile(const std::string& file) {
    Checkpoint c;
    c.m_source = file;
    c.addFile(file);
    c.finishOpening();
    return c;
}

Checkpoint::Checkpoint(const std::string& folder) : m_source(folder) {
    addFolder(folder);
    finishOpening();
}

void Checkpoint::addFolder(const std::string& folder) {
    const fs::path dir(folder);
    const fs::path single = dir / "model.safetensors";
    const fs::path index = dir / "model.safetensors.index.json";
    std::error_code ec;
    if (fs::exists(single, ec)) {
        addFile(single.string());
        return;
    }
    if (!fs::exists(index, ec))
        fail(folder, "no model.safetensors or model.safetensors.index.json (only safetensors "
                     "checkpoints are supported)");
    std::ifstream in(index);
    nlohmann::json j;
    try {
        in >> j;
    } catch (const nlohmann::json::exception& e) {
        fail(index.string(), std::string("malformed JSON: ") + e.what());
    }
    if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
        fail(index.string(), "no weight_map object");
    std::map<std::string, size_t> shardIndex;
    for (const auto& [name, shard] : j["weight_map"].items()) {
        if (!shard.is_string())
            fail(index.string(), "weight_map entry '" + name + "' is not a file name");
        const std::string file = shard.get<std::string>();
        if (file.find('/') != std::string::npos || file.find("..") != std::string::npos)
            fail(index.string(), "shard name '" + file + "' must be a plain file name");
        if (!shardIndex.count(file)) {
            const fs::path p = dir / file;
            if (!fs::exists(p, ec))
                fail(index.string(), "shard '" + file + "' is missing");
            shardIndex[file] = m_files.size();
            addFile(p.string());
        }
        const size_t fi = shardIndex[file];
        if (!m_files[fi]->has(name))
            fail(m_files[fi]->path(), "tensor '" + name + "' listed in the index is missing");
        m_where[name] = fi;
    }
}

std::vector<std::string> Checkpoint::names() const {
    std::vector<std::string> out;
    for (const auto& [name, fi] : m_where)
        out.push_back(name);
    for (const auto& [name, blocks] : m_mxfp4)
        out.push_back(name);
    std::sort(out.begin(), out.end());
    return out;
}

std::string Checkpoint::fileOf(const std::string& name) const {
    const auto mx = m_mxfp4.find(name);
    const auto it = m_where.find(mx == m_mxfp4.end() ? name : mx->second);
    if (it != m_where.end())
        return m_files[it->second]->path();
    // A missing tensor of a one-file checkpoint is missing from that file.
    return m_files.size() == 1 ? m_files[0]->path() : m_source;
}

std::string Checkpoint::dtypeOf(const std::string& name) const {
    if (m_mxfp4.count(name))
        return "MXFP4";
    const auto it = m_where.find(name);
    if (it == m_where.end())
        fail(fileOf(name), "tensor '" + name + "' is missing");
    return m_files[it->second]->entries().at(name).dtype;
}

at::Tensor Checkpoint::load(const std::string& name, at::ScalarType dtype,
                            const std::vector<int64_t>& expectedShape) const {
    if (m_mxfp4.count(name)) {
        const std::vector<int64_t> shape = shapeOf(name);
        if (shape != expectedShape)
            fail(fileOf(name), "MXFP4 tensor '" + name + "' has shape " + shapeString(shape) +
                                   ", the config needs " + shapeString(expectedShape));
        return decodeMxfp4(name, dtype, 0, shape[0]);
    }
    const auto it = m_where.find(name);
    if (it == m_where.end())
        fail(fileOf(name), "tensor '" + name + "' is missing");
    const SafetensorsFile& f = *m_files[it->second];
    const TensorEntry& e = f.entries().at(name);
    if (e.shape != expectedShape)
        fail(f.path(), "tensor '" + name + "' has shape " + shapeString(e.shape) +
                           ", the config needs " + shapeString(expectedShape));
    if (dtypeInfo(e.dtype)->float8 != Float8::None) {
        const at::Tensor t = dequantize(name, f);
        return t.scalar_type() == dtype ? t : t.to(dtype);
    }
    return f.load(name, dtype);
}

void Checkpoint::finishOpening() {
    // An MXFP4 weight is named by its blocks (U8), its scales beside them; a name the
    // checkpoint also holds as a tensor stays that tensor.
    for (const auto& [name, fi] : m_where) {
        const std::string_view n = name;
        if (n.size() > kBlocksSuffix.size() &&
            n.substr(n.size() - kBlocksSuffix.size()) == kBlocksSuffix) {
            const std::string weight(n.substr(0, n.size() - kBlocksSuffix.size()));
            if (m_files[fi]->entries().at(name).dtype == "U8" && !m_where.count(weight))
                m_mxfp4[weight] = name;
        }
    }
    m_quantized = m_quantized || !m_mxfp4.empty();
    std::map<std::string, int64_t> elements;
    for (const auto& [name, fi] : m_where) {
        const TensorEntry& e = m_files[fi]->entries().at(name);
        if (dtypeInfo(e.dtype)->float8 != Float8::None || !dtypeInfo(e.dtype)->values ||
            name.find("_scale_inv") != std::string::npos)
            continue;
        int64_t n = 1;
        for (int64_t d : e.shape)
            n *= d;
        elements[e.dtype] += n;
    }
    std::string best = "F32";
    int64_t most = -1;
    for (const auto& [dtype, n] : elements)
        if (n > most) {
            best = dtype;
            most = n;
        }
    m_floatDtype = best;
}

void Checkpoint::setFloat8Blocks(int64_t rows, int64_t cols) {
    m_blocksSet = true;
    m_blockRows = rows;
    m_blockCols = cols;
}

std::string Checkpoint::float8ScaleName(const std::string& name) {
    return name + "_scale_inv";
}

at::Tensor Checkpoint::dequantize(const std::string& name, const SafetensorsFile& f) const {
    const TensorEntry& e = f.entries().at(name);
    const std::string scaleName = float8ScaleName(name);
    if (!has(scaleName))
        fail(f.path(), "tensor '" + name + "' is float8 (" + e.dtype + ") with no '" + scaleName +
                           "' to scale it");
    if (e.shape.size() < 2)
        fail(f.path(), "tensor '" + name + "' is float8 (" + e.dtype +
                           ") but not a matrix; only weight matrices are read quantized");
    const size_t n = e.shape.size();
    const int64_t rows = e.shape[n - 2], cols = e.shape[n - 1];
    int64_t lead = 1;
    for (size_t i = 0; i + 2 < n; ++i)
        lead *= e.shape[i];
    const std::vector<int64_t> scaleShape = shapeOf(scaleName);
    int64_t scaleNumel = 1;
    for (int64_t d : scaleShape)
        scaleNumel *= d;
    // The block: the config's, else the one the scale grid divides the weight into.
    int64_t bm = rows, bn = cols;
    if (m_blocksSet) {
        bm = m_blockRows > 0 ? m_blockRows : rows;
        bn = m_blockCols > 0 ? m_blockCols : cols;
    } else if (scaleNumel != lead && scaleShape.size() >= 2) {
        const int64_t sr = scaleShape[scaleShape.size() - 2], sc = scaleShape.back();
        if (sr > 0 && sc > 0 && rows % sr == 0 && cols % sc == 0) {
            bm = rows / sr;
            bn = cols / sc;
        }
    }
    bm = std::max<int64_t>(bm, 1);
    bn = std::max<int64_t>(bn, 1);
    const int64_t gr = (rows + bm - 1) / bm, gc = (cols + bn - 1) / bn;
    std::vector<int64_t> want(e.shape.begin(), e.shape.end() - 2);
    want.push_back(gr);
    want.push_back(gc);
    // One scale per matrix may also be written without its unit dimensions.
    const bool perMatrix = gr == 1 && gc == 1 && scaleNumel == lead;
    if (scaleShape != want && !perMatrix)
        fail(fileOf(scaleName), "tensor '" + scaleName + "' has shape " + shapeString(scaleShape) +
                                    "; the float8 '" + name + "' " + shapeString(e.shape) +
                                    " in blocks of " + std::to_string(bm) + "×" +
                                    std::to_string(bn) + " needs " + shapeString(want));
    const SafetensorsFile& sf = *m_files[m_where.at(scaleName)];
    const at::Tensor scale = sf.load(scaleName, at::kFloat).reshape({lead, gr, gc});
    const at::Tensor bytes = f.copyOut(name).view({lead, rows, cols});
    const Float8 format = dtypeInfo(e.dtype)->float8;
    // Each block of rows times its scales (each repeated over its columns), in float32, rounded
    // once to the weights' dtype: transformers' dequantization, with the blocks of the config as
    // its FP8Linear lays the scales out and DeepSeek's weight_dequant reads them (the last block
    // of a row or column may be short: DeepSeek-V3's kv_a_proj_with_mqa has 576 rows).
    at::Tensor out =
        at::empty({lead, rows, cols}, at::TensorOptions().dtype(scalarType(floatDtype())));
    for (int64_t l = 0; l < lead; ++l)
        for (int64_t b = 0; b < gr; ++b) {
            const int64_t r0 = b * bm, r1 = std::min(rows, r0 + bm);
            const at::Tensor colScale =
                scale[l][b].repeat_interleave(bn).slice(0, 0, cols).unsqueeze(0);
            out[l].slice(0, r0, r1).copy_(decodeFloat8(bytes[l].slice(0, r0, r1), format) *
                                          colScale);
        }
    return out.view(e.shape);
}

at::Tensor Checkpoint::decodeMxfp4(const std::string& name, at::ScalarType dtype, int64_t first,
                                   int64_t count) const {
    const std::string& blocksName = m_mxfp4.at(name);
    const std::string scalesName =
        name + std::string(kScalesSuffix);            // "x_blocks" beside "x_scales"
    const std::vector<int64_t> shape = shapeOf(name); // checks the blocks are [E, R, G, 16]
    const std::vector<int64_t> blocks = shapeOf(blocksName);
    const int64_t E = blocks[0], R = blocks[1], G = blocks[2];
    if (!m_where.count(scalesName))
        fail(fileOf(blocksName),
             "MXFP4 blocks '" + blocksName + "' have no '" + scalesName + "' to scale them");
    const std::vector<int64_t> want{E, R, G};
    if (dtypeOf(scalesName) != "U8" || shapeOf(scalesName) != want)
        fail(fileOf(scalesName), "MXFP4 scales '" + scalesName + "' are " + dtypeOf(scalesName) +
                                     " " + shapeString(shapeOf(scalesName)) + "; the blocks '" +
                                     blocksName + "' need U8 " + shapeString(want));
    if (first < 0 || count < 0 || first + count > E)
        fail(fileOf(blocksName),
             "MXFP4 weight '" + name + "' has no experts " + std::to_string(first) + ".." +
                 std::to_string(first + count - 1) + " (it holds " + std::to_string(E) + ")");
    // Read from the mappings (bytes are always aligned): only the experts asked for are touched.
    const auto* bytes =
        static_cast<const uint8_t*>(m_files[m_where.at(blocksName)]->mapped(blocksName));
    const auto* scales =
        static_cast<const uint8_t*>(m_files[m_where.at(scalesName)]->mapped(scalesName));
    // 2^(scale − 127), exact in float32 (transformers' torch.ldexp multiplies by it; a scale of
    // 255 gives inf there as here).
    static const std::array<float, 256> powers = [] {
        std::array<float, 256> p{};
        for (int b = 0; b < 256; ++b)
            p[static_cast<size_t>(b)] = std::ldexp(1.0f, b - 127);
        return p;
    }();
    std::vector<int64_t> outShape = shape;
    outShape[0] = count;
    // Straight into the transposed layout, in tiles of 64 rows by one group's 32 columns: each
    // byte's low nibble first, each run of 32 times its scale, rounded once to `dtype`.
    const at::ScalarType into = dtype == at::kBFloat16 || dtype == at::kHalf ? dtype : at::kFloat;
    at::Tensor out = at::empty(outShape, at::TensorOptions().dtype(into));
    const int64_t tiles = (R + 63) / 64, C = 32 * G;
    const auto decode = [&](auto* dst0) {
        using T = std::remove_pointer_t<decltype(dst0)>;
        for (int64_t e = first; e < first + count; ++e) {
            T* dstE = dst0 + (e - first) * C * R;
            at::parallel_for(0, tiles, 1, [&](int64_t t0, int64_t t1) {
                float tile[64][32];
                for (int64_t t = t0; t < t1; ++t) {
                    const int64_t r0 = t * 64, n = std::min<int64_t>(64, R - r0);
                    for (int64_t g = 0; g < G; ++g) {
                        for (int64_t k = 0; k < n; ++k) {
                            const int64_t i = (e * R + r0 + k) * G + g;
                            const float scale = powers[scales[i]];
                            const uint8_t* b = bytes + i * 16;
                            for (int j = 0; j < 16; ++j) {
                                const Fp4Pair p = kFp4Pairs[b[j]];
                                tile[k][2 * j] = p.low * scale;
                                tile[k][2 * j + 1] = p.high * scale;
                            }
                        }
                        for (int c = 0; c < 32; ++c) {
                            T* dst = dstE + (32 * g + c) * R + r0;
                            for (int64_t k = 0; k < n; ++k)
                                if constexpr (std::is_same_v<T, c10::BFloat16>)
                                    dst[k] = exactBFloat16(tile[k][c]);
                                else
                                    dst[k] = static_cast<T>(tile[k][c]);
                        }
                    }
                }
            });
        }
    };
    if (into == at::kBFloat16)
        decode(out.data_ptr<c10::BFloat16>());
    else if (into == at::kHalf)
        decode(out.data_ptr<c10::Half>());
    else
        decode(out.data_ptr<float>());
    if (into != dtype)
        out = out.to(dtype);
    return out;
}

at::Tensor Checkpoint::loadExpert(const std::string& name, int64_t expert,
                                  at::ScalarType dtype) const {
    if (m_mxfp4.count(name))
        return decodeMxfp4(name, dtype, expert, 1)[0];
    const at::Tensor all = load(name, dtype, shapeOf(name));
    if (all.dim() < 1 || expert < 0 || expert >= all.size(0))
        fail(fileOf(name), "tensor '" + name + "' has no expert " + std::to_string(expert));
    return all[expert];
}

} // namespace sparqlab::model

namespace sparqlab::model {

at::Tensor Checkpoint::map(const std::string& name,
                           const std::vector<int64_t>& expectedShape) const {
    if (m_mxfp4.count(name)) // decoded into memory, as float8 is
        return load(name, scalarType(floatDtype()), expectedShape);
    const auto it = m_where.find(name);
    if (it == m_where.end())
        fail(fileOf(name), "tensor '" + name + "' is missing");
    const std::shared_ptr<SafetensorsFile>& f = m_files[it->second];
    const TensorEntry& e = f->entries().at(name);
    if (e.shape != expectedShape)
        fail(f->path(), "tensor '" + name + "' has shape " + shapeString(e.shape) +
                            ", the config needs " + shapeString(expectedShape));
    if (dtypeInfo(e.dtype)->float8 != Float8::None)
        return dequantize(name, *f);
    const at::ScalarType t = scalarType(e.dtype);
    const void* p = f->mapped(name);
    if (!p)
        return f->load(name, t);
    // The deleter holds the file, so its mapping outlives every view of it. Read-only pages:
    // nothing writes weights.
    std::shared_ptr<SafetensorsFile> keep = f;
    return at::from_blob(
        const_cast<void*>(p), e.shape, [keep](void*) mutable { keep.reset(); },
        at::TensorOptions().dtype(t));
}

std::vector<int64_t> Checkpoint::shapeOf(const std::string& name) const {
    if (const auto mx = m_mxfp4.find(name); mx != m_mxfp4.end()) {
        // Blocks [E, R, G, 16]: the weight [E, 32·G, R], as transformers transposes it.
        const std::vector<int64_t> b = shapeOf(mx->second);
        if (b.size() != 4 || b[3] != 16)
            fail(fileOf(name), "MXFP4 blocks '" + mx->second + "' have shape " + shapeString(b) +
                                   "; they must be [experts, rows, groups, 16]");
        return {b[0], 2 * 16 * b[2], b[1]};
    }
    const auto it = m_where.find(name);
    if (it == m_where.end())
        fail(fileOf(name), "tensor '" + name + "' is missing");
    return m_files[it->second]->entries().at(name).shape;
}

int64_t Checkpoint::storedBytes() const {
    int64_t n = 0;
    for (const auto& [name, fi] : m_where) {
        const TensorEntry& e = m_files[fi]->entries().at(name);
        n += static_cast<int64_t>(e.end - e.begin);
    }
    return n;
}

int64_t Checkpoint::parameterCount() const {
    int64_t n = 0;
    for (const auto& [name, blocks] : m_mxfp4) // two values a byte; the scales are no weights
        n += 2 * (m_files[m_where.at(blocks)]->entries().at(blocks).end -
                  m_files[m_where.at(blocks)]->entries().at(blocks).begin);
    for (const auto& [name, fi] : m_where) {
        if (!dtypeInfo(m_files[fi]->entries().at(name).dtype)->values)
            continue;
        int64_t numel = 1;
        for (int64_t d : m_files[fi]->entries().at(name).shape)
            numel *= d;
        n += numel;
    }
    return n;
}

void writeSafetensors(const std::string& path,
                      const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata) {
    nlohmann::json header = nlohmann::json::object();
    if (!metadata.empty())
        header["__metadata__"] = metadata;
    std::vector<at::Tensor> data;
    uint64_t offset = 0;
    for (const auto& [name, t0] : tensors) {
        const at::Tensor t = t0.detach().cpu().contiguous();
        const char* dtype = nullptr;
        for (const DtypeInfo& d : kDtypes)
            if (d.float8 == Float8::None && d.held == t.scalar_type())
                dtype = d.name; // (uint8: U8, as MXFP4 blocks and scales are written)
        if (!dtype)
            fail(path, "tensor '" + name + "' has a dtype safetensors files here cannot hold");
        const uint64_t bytes = static_cast<uint64_t>(t.numel()) * t.element_size();
        header[name] = {{"dtype", dtype},
                        {"shape", t.sizes().vec()},
                        {"data_offsets", {offset, offset + bytes}}};
        offset += bytes;
        data.push_back(t);
    }
    std::string h = header.dump();
    h.append((8 - h.size() % 8) % 8, ' '); // align the data section to 8 bytes
    base::AtomicFile file(path);
    {
        std::ofstream out(file.tempPath(), std::ios::binary | std::ios::trunc);
        if (!out)
            fail(path, base::cannotCreateReason(path));
        uint64_t n = h.size();
        unsigned char len[8];
        for (int i = 0; i < 8; ++i)
            len[i] = static_cast<unsigned char>(n >> (8 * i));
        out.write(reinterpret_cast<const char*>(len), 8);
        out.write(h.data(), static_cast<std::streamsize>(h.size()));
        for (const at::Tensor& t : data)
            out.write(static_cast<const char*>(t.data_ptr()),
                      static_cast<std::streamsize>(t.numel() * t.element_size()));
        out.flush();
        if (!out)
            fail(path, "cannot write the file (disk full?)");
    }
    try {
        file.commit();
    } catch (const std::runtime_error& e) {
        throw CheckpointError(e.what());
    }
}

} // namespace sparqlab::model
