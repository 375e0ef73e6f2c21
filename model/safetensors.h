#pragma once
/// \file safetensors.h
/// Hugging Face checkpoints in the safetensors format: one file, or shards listed by
/// `model.safetensors.index.json`. Files are memory-mapped and every header is checked
/// (lengths, offsets, overlaps, dtypes, shapes) before a byte of data is used.
///
/// Threading: a Checkpoint may be read from one thread at a time.

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace sparqlab::model {

/// A checkpoint that cannot be read; the message names the file and what is wrong.
class CheckpointError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

/// The float8 formats a checkpoint may hold: safetensors' F8_E4M3, F8_E5M2 and F8_E8M0.
enum class Float8 { None, E4M3, E5M2, E8M0 };
/// The value of one float8 byte, as PyTorch's float8 types read it: E4M3 is the "fn" form (no
/// infinities; 0x7F and 0xFF are NaN, the largest value 448), E5M2 the IEEE-like one (bias 15,
/// with infinities), E8M0 a bare exponent 2^(b − 127) (0xFF NaN), used for power-of-two scales.
float float8Value(Float8 format, uint8_t byte);
/// The torch name of a safetensors dtype, as config.json's torch_dtype writes it ("BF16" →
/// "bfloat16", "F8_E4M3" → "float8_e4m3fn"); an unknown one is returned as it is.
std::string torchDtypeName(const std::string& dtype);
/// The torch name of a floating dtype the weights load or compute in ("float32", "float16",
/// "bfloat16"), from the same table.
std::string torchDtypeName(at::ScalarType t);
/// The ScalarType a safetensors float dtype holds ("F32", "F16", "BF16"); none for a float8 or
/// unknown dtype (whose bytes are not that type's values).
std::optional<at::ScalarType> floatScalarType(const std::string& dtype);

/// One tensor's entry in a safetensors header.
struct TensorEntry {
    std::string dtype;          ///< "F32", "F16", "BF16", "F8_E4M3", "F8_E5M2" or "F8_E8M0"
    std::vector<int64_t> shape; ///< may be empty (a scalar)
    uint64_t begin = 0;         ///< byte offsets in the data section
    uint64_t end = 0;
};

/// One memory-mapped .safetensors file.
class SafetensorsFile {
public:
    /// Maps and validates the file. Throws CheckpointError naming the file.
    explicit SafetensorsFile(const std::string& path);
    ~SafetensorsFile();
    SafetensorsFile(const SafetensorsFile&) = delete;
    SafetensorsFile& operator=(const SafetensorsFile&) = delete;

    const std::string& path() const { return m_path; }
    const std::map<std::string, TensorEntry>& entries() const { return m_entries; }
    bool has(const std::string& name) const { return m_entries.count(name) > 0; }
    /// The tensor, copied out of the mapping and converted to `dtype` (float8 decoded, unscaled).
    at::Tensor load(const std::string& name, at::ScalarType dtype) const;
    /// The tensor's bytes copied out as held: float8 as uint8 (Float8 of its dtype says which).
    at::Tensor copyOut(const std::string& name) const;
    /// The mapped bytes of a tensor (nullptr if not aligned for its dtype).
    const void* mapped(const std::string& name) const;

private:
    void parseHeader(); ///< validates the mapped header into m_entries; throws CheckpointError

    std::string m_path;
    void* m_map = nullptr;
    size_t m_size = 0;
    size_t m_dataStart = 0;
    std::map<std::string, TensorEntry> m_entries;
};

/// The weights of a model folder: `model.safetensors` or the shards of an index.
class Checkpoint {
public:
    /// Opens the weights in `folder`. Throws CheckpointError when none can be read.
    explicit Checkpoint(const std::string& folder);
    /// The file that holds (or, for a missing tensor, should hold) `name`, for messages.
    std::string fileOf(const std::string& name) const;
    /// Opens one named file (e.g. `model.bf16.safetensors`).
    static Checkpoint openFile(const std::string& file);

    /// Whether the checkpoint holds `name`: stored, or an MXFP4 weight held as `name`_blocks
    /// and `name`_scales.
    bool has(const std::string& name) const {
        return m_where.count(name) > 0 || m_mxfp4.count(name) > 0;
    }
    /// Every tensor's name, an MXFP4 weight's own name beside its blocks and scales.
    std::vector<std::string> names() const;
    /// The file dtype of a tensor ("F32", "F16", "BF16", "F8_E4M3", …; "MXFP4" for a weight
    /// held as blocks and scales).
    std::string dtypeOf(const std::string& name) const;
    /// The dtype of the weights ("F32", "F16" or "BF16"): the floating dtype holding most of the
    /// unquantized tensors' elements (scales aside), which float8 weights are dequantized to, as
    /// transformers loads them into a model of its config's dtype. "F32" when none.
    const std::string& floatDtype() const { return m_floatDtype; }
    /// Whether the checkpoint holds float8 or MXFP4 weights (config's quantization_config "fp8"
    /// or "mxfp4"), which load() dequantizes.
    bool quantized() const { return m_quantized; }
    /// The block of a float8 weight one scale covers, rows × columns (quantization_config's
    /// weight_block_size); {0, 0}: one scale for the whole matrix. Unset, the block is read from
    /// the scale grid, which must then divide the weight evenly (transformers' rule).
    void setFloat8Blocks(int64_t rows, int64_t cols);
    /// The scale beside a float8 tensor: its name + "_scale_inv" ("x.weight_scale_inv"; packed
    /// experts' "experts.gate_up_proj_scale_inv").
    static std::string float8ScaleName(const std::string& name);
    /// Loads a tensor converted to `dtype`, checking its shape. A float8 tensor is dequantized:
    /// each element times its block's scale, in float32, rounded once to floatDtype(). An MXFP4
    /// weight (gpt-oss's experts) is decoded as transformers' convert_moe_packed_tensors does:
    /// blocks [E, R, G, 16] of two 4-bit e2m1 values per byte (low nibble first), each run of 32
    /// times 2^(scale − 127) from scales [E, R, G], giving [E, R, 32·G] transposed to
    /// [E, 32·G, R]. Throws CheckpointError naming the file and tensor when it is missing, of the
    /// wrong shape, a float8 tensor whose scale is missing or of a shape its blocks do not give,
    /// or MXFP4 blocks and scales of shapes or dtypes that do not go together.
    at::Tensor load(const std::string& name, at::ScalarType dtype,
                    const std::vector<int64_t>& expectedShape) const;
    /// The tensor as stored, viewing the file's mapping (read-only; the mapping lives as long
    /// as the tensor) when its offset suits its dtype, else copied as load() does; a float8
    /// tensor is dequantized into floatDtype() as load() does.
    at::Tensor map(const std::string& name, const std::vector<int64_t>& expectedShape) const;
    /// Expert `expert` of a weight whose experts lead ([E, …], gpt-oss's experts.gate_up_proj),
    /// converted to `dtype`: an MXFP4 weight decodes that expert's blocks alone, read from the
    /// mapping, as load() decodes them all. Throws CheckpointError as load() does, or naming an
    /// expert the tensor does not hold.
    at::Tensor loadExpert(const std::string& name, int64_t expert, at::ScalarType dtype) const;
    /// The stored shape of a tensor (throws CheckpointError if it is missing).
    std::vector<int64_t> shapeOf(const std::string& name) const;
    /// Bytes of all tensors as stored.
    int64_t storedBytes() const;
    /// Number of scalars over all tensors (from the headers, nothing loaded).
    int64_t parameterCount() const;
    /// Where the weights came from, for messages.
    const std::string& source() const { return m_source; }

private:
    Checkpoint() = default;
    void addFile(const std::string& path);
    /// The folder's model.safetensors, or else the shards its index names.
    void addFolder(const std::string& folder);
    at::Tensor dequantize(const std::string& name, const SafetensorsFile& f) const;
    /// Experts first .. first + count − 1 of an MXFP4 weight, [count, 32·G, R].
    at::Tensor decodeMxfp4(const std::string& name, at::ScalarType dtype, int64_t first,
                           int64_t count) const;
    /// Once every file is added: m_floatDtype, and the MXFP4 weights the blocks name.
    void finishOpening();
    std::string m_source;
    bool m_quantized = false;
    std::string m_floatDtype = "F32"; ///< floatDtype(), found once (it reads every header entry)
    bool m_blocksSet = false;
    int64_t m_blockRows = 0, m_blockCols = 0;
    std::vector<std::shared_ptr<SafetensorsFile>> m_files;
    std::map<std::string, size_t> m_where;      // tensor name → file index
    std::map<std::string, std::string> m_mxfp4; // MXFP4 weight → its "_blocks" tensor
};

/// Writes tensors as a .safetensors file (F32, F16, BF16 or U8 as the tensors are), to a
/// temporary name renamed when complete. Throws CheckpointError naming the file.
void writeSafetensors(const std::string& path,
                      const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata = {});

} // namespace sparqlab::model
