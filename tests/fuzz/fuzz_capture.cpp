// libFuzzer target: a capture file (HDF5) opened and every example read, whole and one layer
// at a time, with what the methods read of it (each layer's configuration; a DSA capture's
// indexer scores by position; a hybrid's model layers; a DeepSeek-V4 capture's entries of each
// layer, as overlap takes them).
#include "analysis/compressed_keys.h"
#include "capture/capture_file.h"
#include "capture/h5.h"
#include "fuzz_common.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
    // A file whose metadata takes libhdf5 longer than this is refused; 2 s rather than the
    // app's 20 keeps the fuzzer fast on inputs that make libhdf5 loop.
    sparqlab::h5::File::setProbeTimeLimit(std::chrono::seconds(2));
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string path = sparqlab::fuzz::writeTemp(data, size, "capture.h5");
    try {
        sparqlab::capture::CaptureReader r(path);
        const sparqlab::model::CaptureInfo& info = r.info();
        for (int64_t l = 0; l < info.nLayers; ++l) {
            (void)info.layerConfig(l);
            (void)info.modelLayer(l);
        }
        for (int64_t i = 0; i < r.count(); ++i) {
            const sparqlab::model::CaptureExample e = r.read(i);
            for (int64_t l = 0; l < info.nLayers && e.indexScores.defined(); ++l)
                (void)e.indexScoresByPosition(l);
            if (info.nLayers > 0)
                (void)r.readLayer(i, info.nLayers - 1).indexScoresByPosition(0);
            for (int64_t l = 0; l < info.nLayers && info.compressed(); ++l)
                (void)sparqlab::analysis::compressedKeys(info, r.readLayer(i, l), l, 4);
        }
    } catch (const std::exception&) {
    }
    return 0;
}
