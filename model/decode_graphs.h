#pragma once
/// \file decode_graphs.h
/// A decode step of the model on a GPU as CUDA graphs (docs/design/CUDA.md §10): the operations
/// between one layer's attention and the next (the output projection, the norms, the MLP, the
/// next layer's q, k and v with RoPE) are recorded once as a graph each and replayed at every
/// later step, so that the host launches L + 1 graphs where it launched some fifty operations a
/// layer; the attention itself (the cache's append and any method of the attention library)
/// runs eagerly between them, as it does without graphs. What changes from step to step enters
/// through tensors the graphs read: the token ids, the RoPE tables of the step's position, and
/// each layer's attention output. Without a CUDA libtorch available() is false and nothing is
/// recorded.

#include "model/rope.h"

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace sparqlab::model {

class DecodeGraphs {
public:
    DecodeGraphs();
    ~DecodeGraphs();
    DecodeGraphs(const DecodeGraphs&) = delete;
    DecodeGraphs& operator=(const DecodeGraphs&) = delete;

    /// Whether this build can record graphs (a CUDA libtorch).
    static bool available();
    /// libtorch's current CUDA stream (a cudaStream_t; null without a CUDA libtorch), where the
    /// model's own kernels launch so that a capture records them.
    static void* currentStream();

    /// Whether a step is recorded, and for how many sequences.
    bool recorded() const { return m_recorded; }
    int64_t batch() const { return m_batch; }
    /// Why recording failed (the step then ran eagerly, as every later one does); empty if it
    /// did not.
    const std::string& failure() const { return m_failure; }
    /// How many steps were replayed.
    int64_t replays() const { return m_replays; }

    // --- recording (the model's forward pass calls these in order) --------------------------
    /// Starts the first segment's capture; returns the graphs' own copy of ids [B, 1] to embed.
    at::Tensor begin(const at::Tensor& ids);
    /// Ends the segment being captured (q, k, v are its outputs, which the graphs keep) and
    /// replays it, so that the attention that follows reads them.
    void cut(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v);
    /// The attention output y [B, H, 1, Dv] into the graphs' own input of `dtype` (y cast as
    /// y.to(dtype) casts it); the next segment's capture begins, reading that input, returned.
    at::Tensor resume(const at::Tensor& y, at::ScalarType dtype);
    /// Ends the last segment (the logits) and replays it; returns a float32 copy of the logits.
    at::Tensor end(const at::Tensor& logits);
    /// Ends any capture and forgets what was recorded; with a reason, no step is recorded again.
    void abandon(const std::string& why);

    /// The RoPE tables the segments read (recorded before the first capture), each with a layer
    /// whose angles they are: a replay writes the step's angles into them.
    std::vector<std::pair<int64_t, RopeAngles>> angles;

    // --- replay -------------------------------------------------------------------------------
    /// A layer's attention output from its q, k and v [B, H, 1, D] (the graphs' tensors).
    using Attend = std::function<at::Tensor(int64_t layer, const at::Tensor& q, const at::Tensor& k,
                                            const at::Tensor& v)>;
    /// One step: ids [B, 1] in, each segment replayed with `attend` between them; a float32
    /// copy of the logits.
    at::Tensor replay(const at::Tensor& ids, const Attend& attend);

    /// The GPU time of each recorded graph replayed alone (everything of a step but the
    /// attention: µs, `repeats` replays each, waited for), segment 0 (the embedding to layer 0's
    /// q, k, v) first and the head last. A segment only rewrites its own outputs, so the step's
    /// state is unchanged. Empty if nothing is recorded.
    std::vector<double> segmentMicroseconds(int repeats) const;

private:
    void startCapture();
    void endCapture();
    struct Impl;
    std::unique_ptr<Impl> m_impl;
    at::Tensor m_ids, m_logits;
    std::vector<at::Tensor> m_q, m_k, m_v, m_inputs;
    bool m_recorded = false;
    int64_t m_batch = 0, m_replays = 0;
    std::string m_failure;
};

} // namespace sparqlab::model
