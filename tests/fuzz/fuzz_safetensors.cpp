// libFuzzer target: a safetensors file (header length, JSON header, offsets, data) opened and
// every tensor loaded, as the file holds it and through a Checkpoint, which dequantizes float8
// tensors with their `_scale_inv` (the block size unset, then set from the first byte) and
// decodes MXFP4 weights from their `_blocks` and `_scales` (corpus: mxfp4.safetensors). Any
// input must give a tensor or a CheckpointError, never a crash.
#include "fuzz_common.h"
#include "model/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string path = sparqlab::fuzz::writeTemp(data, size, "model.safetensors");
    try {
        sparqlab::model::SafetensorsFile f(path);
        for (const auto& [name, e] : f.entries())
            (void)f.load(name, at::kFloat);
        sparqlab::model::Checkpoint ck = sparqlab::model::Checkpoint::openFile(path);
        for (int pass = 0; pass < 2; ++pass) {
            if (pass == 1 &&
                size > 0) // blocks of 0 (the whole matrix), 16, …, 112 rows and columns
                ck.setFloat8Blocks((data[0] & 7) * 16, ((data[0] >> 3) & 7) * 16);
            for (const std::string& name : ck.names())
                try {
                    (void)ck.load(name, at::kFloat, ck.shapeOf(name));
                } catch (const sparqlab::model::CheckpointError&) {
                }
        }
    } catch (const std::exception&) {
    }
    return 0;
}
