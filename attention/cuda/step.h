#pragma once
/// \file step.h
/// The small operations around attention in a model's decode step, fused on the GPU
/// (docs/design/CUDA.md §9): each is one kernel where libtorch launches five to ten, and a step
/// of a 7B-shaped model on a GPU is bound by the host's time to launch them (docs/gpu.md, "Fig. 10
/// on an H200"). Each computes what the libtorch formula of its caller computes, rounding where
/// that rounds (Hugging Face's order of operations), in float32 arithmetic over storage float32,
/// float16 or bfloat16. Pointers are device pointers; the kernels run on `stream` (a
/// cudaStream_t; null: the legacy default stream, libtorch's). Without nvcc each entry point
/// throws (stepOpsBuilt() says which).

#include "attention/cuda/decode_cuda.h"

#include <cstdint>

namespace sparqlab::attention::cuda {

/// Hugging Face's LlamaRMSNorm of `rows` rows of `width` elements, after an optional residual
/// add: s = x + residual (rounded to the storage dtype, written to `sum`) where `residual` is
/// given, else s = x; then y = w · round(s · (mean(s²) + eps)^−½), the product rounded too.
/// x, residual, sum, y: [rows, width] contiguous; w: [width].
struct RmsNormStep {
    Storage storage = Storage::F32;
    const void* x = nullptr;
    const void* residual = nullptr; ///< null: no residual add (sum is not written)
    void* sum = nullptr;
    const void* w = nullptr;
    void* y = nullptr;
    int64_t rows = 0, width = 0;
    float eps = 1e-6f;
};
void rmsNorm(const RmsNormStep& step, void* stream);

/// One tensor a RoPE step rotates: x [B, heads, T, D] with these element strides (the last
/// dimension contiguous), into out [B, heads, T, D] contiguous.
struct RopeTensor {
    const void* x = nullptr;
    void* out = nullptr;
    int64_t heads = 0;
    int64_t strideB = 0, strideH = 0, strideT = 0;
};
/// Rotate-half RoPE (Hugging Face's apply_rotary_pos_emb) of up to two tensors in one launch
/// (q and k): for e < rot, out_e = round(round(x_e·cos_e) + round(h_e·sin_e)) with h the rotated
/// half (−x_{e+rot/2} for e < rot/2, x_{e−rot/2} after); the dimensions from rot on pass through.
/// cos, sin: [T, rot] in the storage dtype (each half repeated, as HF casts them).
struct RopeStep {
    Storage storage = Storage::F32;
    RopeTensor a, b; ///< b.x null: a alone
    const void* cos = nullptr;
    const void* sin = nullptr;
    int64_t B = 0, T = 0, D = 0, rot = 0;
};
void rope(const RopeStep& step, void* stream);

/// A decode cache's append of one position (attention/decode/engine.h, DecodeCache::append):
/// K[b, h, pos] = k[b, h], V[b, h, pos] = v[b, h], the dimension-major Kt[b, h, :, pos] = k[b, h]
/// where Kt is given, and vsum[b, h] += v[b, h] in float64.
/// k, v: [B, H, D] contiguous; K, V: [B, H, cap, D]; Kt: [B, H, D, cap]; vsum: [B, H, D] (cap:
/// the rows' stride, the capacity rounded up).
struct AppendStep {
    Storage storage = Storage::F32;
    const void* k = nullptr;
    const void* v = nullptr;
    void* K = nullptr;
    void* V = nullptr;
    void* Kt = nullptr;
    double* vsum = nullptr;
    int64_t B = 0, H = 0, D = 0, cap = 0, pos = 0;
};
void appendStep(const AppendStep& step, void* stream);

/// The linear layers of a decode step (libtorch's at::linear at one to four rows): for each of
/// up to three outputs sharing x (q, k and v), y[r, n] = round(Σ_k x[r, k]·w[n, k] + bias[n]),
/// the sum in float32 (another order than cuBLAS's: y agrees within a unit in the last place of
/// the storage dtype), rounded once. With `siluMul` (an MLP's gate and up, outputs 0 and 1 of
/// equal N), out[0].y = round(round(silu(g))·u) with g and u the two products rounded, as HF's
/// act(gate_proj(x)) * up_proj(x) rounds them, and out[1].y is not written. A warp an output
/// feature (both rows of a pair), its lanes reading the weight rows 16 bytes at a time, the x
/// rows shared: at batch 1 the step reads each weight once and nothing else, where cuBLAS's
/// general kernels pay for tiles and split sums sized for many rows. x: [rows, K], w: [N, K],
/// y: [rows, N] contiguous, bias [N] or null; rows 1..kGemvRows, K a multiple of 8, x and the
/// weights 16-byte aligned.
constexpr int64_t kGemvRows = 4;
struct GemvOutput {
    const void* w = nullptr;
    const void* bias = nullptr; ///< null: none
    void* y = nullptr;
    int64_t N = 0;
};
struct GemvStep {
    Storage storage = Storage::F32;
    const void* x = nullptr;
    int64_t rows = 0, K = 0;
    GemvOutput out[3];
    int outputs = 1;
    bool siluMul = false;
};
void gemv(const GemvStep& step, void* stream);

/// Whether this build has these kernels (nvcc found); a CUDA device is deviceAvailable()'s.
bool stepOpsBuilt();

/// The entry points as one value: this build's (stepOps()), or the kernels' host emulation
/// (tests/cuda/simt), as Kernels is for a step's attention.
struct StepOps {
    void (*rmsNorm)(const RmsNormStep&, void*);
    void (*rope)(const RopeStep&, void*);
    void (*appendStep)(const AppendStep&, void*);
    void (*gemv)(const GemvStep&, void*);
};
inline StepOps stepOps() {
    return {&rmsNorm, &rope, &appendStep, &gemv};
}

/// Tests: the operations the model and the decode cache take instead of this build's, on host
/// tensors too (the kernels' host emulation, tests/cuda/simt: the callers' fused paths checked
/// without a GPU), or null (the default): this build's, on a GPU only. Not thread-safe: set it
/// before the model runs.
void setStepOpsForTesting(const StepOps* ops);
const StepOps* stepOpsForTesting();

} // namespace sparqlab::attention::cuda
