#pragma once
/// \file capture_file.h
/// Capture files (CONTRACTS.md §3): q, K and V of every layer and head for many prompts.
///
/// Threading: one reader or writer per thread; HDF5 is not thread-safe (see h5.h).

#include "attention/attention.h"
#include "capture/h5.h"

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace sparqlab::capture {

inline constexpr const char* kCaptureFormat = "sparqlab.capture";
/// The version a capture is written with: 3 where the model has sinks, chunked layers or a
/// value dimension of its own (what a version 2 reader would get wrong), else 2; versions 1 to 3
/// are read.
inline constexpr int64_t kCaptureFormatVersion = 3;

/// The root attributes of a capture: which model, and its attention shape.
struct CaptureInfo {
    std::string model;        ///< path or hub id
    std::string architecture; ///< config.json architectures[0]
    int64_t nLayers = 0;
    int64_t nHeads = 0;   ///< query heads Hq
    int64_t nKvHeads = 0; ///< KV heads Hkv
    int64_t headDim = 0;
    double attnScale = 0; ///< factor the model multiplies q·k by
    std::string createdBy;
    // Version 2 (CONTRACTS.md §7): the model's attention modifiers, per layer.
    std::vector<double> layerAttnScale;      ///< [L] (empty: attnScale everywhere)
    std::vector<int64_t> layerSlidingWindow; ///< [L], 0 = global (empty: none)
    double attnSoftcap = 0;                  ///< 0 = none
    // Version 3 (docs/sinks-chunks-nope-mla.md): what a version 2 reader would get wrong.
    int64_t vHeadDim = 0;            ///< values' head dimension d_v (0: head_dim)
    std::vector<int64_t> layerChunk; ///< [L] chunked attention, 0 = none (empty: none)
    at::Tensor sinks;                ///< [L, Hq] float32 sink logits (undefined: none)
    // Written in any version, for people and views: NoPE layers and MLA's latent cache.
    std::vector<int64_t> layerUsesRope; ///< [L] 1 = RoPE, 0 = NoPE (empty: not recorded)
    int64_t kvLoraRank = 0;             ///< MLA's latent per position (0: not MLA)
    int64_t qkRopeHeadDim = 0;          ///< MLA's shared rotary key per position
    /// [L, D/2] float64: each layer's RoPE inverse frequencies where it rotates the whole head
    /// in the rotate-half layout (Expected Attention's future rotation, ShadowKV's pre-RoPE
    /// keys); a NaN row where it does not (NoPE, partial or interleaved RoPE). Undefined: not
    /// recorded (captures before it).
    at::Tensor ropeInvFreq;

    int64_t valueDim() const { return vHeadDim > 0 ? vHeadDim : headDim; }
    /// The version this capture needs (2, or 3 with sinks, chunks or d_v ≠ head_dim).
    int64_t formatVersion() const;

    /// `base` with layer `layer`'s scale, soft-cap, window, sinks and RoPE, as the model
    /// computes them.
    attention::AttentionConfig layerConfig(int64_t layer,
                                           const attention::AttentionConfig& base = {}) const;
};

/// One prompt: tokens and, per layer and head, the captured queries, keys and values.
struct CaptureExample {
    at::Tensor tokenIds;             ///< [S] int64
    std::vector<std::string> tokens; ///< [S] each token's text (may be empty: then "")
    at::Tensor qPositions;           ///< [T] int64, ascending, each < S
    at::Tensor q;                    ///< [L, Hq, T, d_h]
    at::Tensor k;                    ///< [L, Hkv, S, d_h]
    at::Tensor v;                    ///< [L, Hkv, S, d_v] (d_v = d_h but for MLA)
};

/// Writes a capture to `<path>.tmp-<pid>` and renames it to `path` in finish().
class CaptureWriter {
public:
    /// float16: store q, K and V as half precision.
    CaptureWriter(const std::string& path, const CaptureInfo& info, bool float16 = false);
    /// Checks the example against the info and appends it as /examples/NNNN.
    void add(const CaptureExample& example);
    /// Completes the file under its final name. Without it, nothing is left behind.
    void finish();
    int64_t count() const { return m_count; }
    /// The file's root group, for a program's own groups beside /examples (sessions).
    h5::Group root() const { return m_file.root(); }

private:
    h5::File m_file;
    CaptureInfo m_info;
    bool m_float16;
    int64_t m_count = 0;
};

/// Reads a capture, one example (or one layer of one example) at a time.
class CaptureReader {
public:
    /// Opens and checks the format, version and attributes. Throws h5::H5Error with one line.
    explicit CaptureReader(const std::string& path);

    const CaptureInfo& info() const { return m_info; }
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
    CaptureExample read(int64_t i) const;
    /// Only layer `layer` of example i: q [Hq, T, d_h], K [Hkv, S, d_h] and V [Hkv, S, d_v];
    /// tokens untouched.
    CaptureExample readLayer(int64_t i, int64_t layer) const;

private:
    void checkExample(int64_t i) const;
    /// The attributes of format version 3 and those any version may carry (NoPE, MLA).
    void readVersion3(const h5::Group& root, int64_t version);
    std::string m_path;
    h5::File m_file;
    CaptureInfo m_info;
    std::vector<std::string> m_names;
};

} // namespace sparqlab::capture
