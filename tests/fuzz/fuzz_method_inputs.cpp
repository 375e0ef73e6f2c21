// libFuzzer target: an --inputs file (HDF5, inputs/<name>: MagicPIG's hyperplanes, a PQCache
// codebook, a DSA model's or a block indexer's scores) read for each method that takes one, then
// used by it on one small step — the method must refuse what does not fit with an AttentionError,
// never crash.
#include "analysis/attend_run.h"
#include "attention/attention.h"
#include "capture/h5.h"
#include "fuzz_common.h"

#include <ATen/ATen.h>

extern "C" int LLVMFuzzerInitialize(int*, char***) {
    sparqlab::h5::File::setProbeTimeLimit(std::chrono::seconds(2)); // as fuzz_capture
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    namespace attn = sparqlab::attention;
    const std::string path = sparqlab::fuzz::writeTemp(data, size, "inputs.h5");
    for (const attn::Method m :
         {attn::Method::MagicPIG, attn::Method::PQCache, attn::Method::Indexer}) {
        try {
            const auto inputs = sparqlab::analysis::readMethodInputs(path, m);
            attn::AttentionConfig c = attn::defaultConfig(m);
            c.k = 6;
            int64_t D = 16, Hkv = 2, S = 24;
            if (const auto it = inputs.find("hyperplanes"); it != inputs.end()) {
                const at::Tensor& W = it->second;
                if (W.dim() != 2 || W.size(0) < 1 || W.size(0) > 64 || W.size(1) > 4096)
                    continue; // keep each input cheap
                D = W.size(0);
                c.values[attn::Param::HashBits] = 2;
                c.values[attn::Param::HashTables] = std::max<int64_t>(1, W.size(1) / 2);
                c.values[attn::Param::Sink] = 1;
                c.local = 2;
            }
            if (const auto it = inputs.find("pq_centroids"); it != inputs.end()) {
                const at::Tensor& cent = it->second;
                if (cent.dim() != 5 || cent.size(0) != 1 || cent.size(1) < 1 || cent.size(1) > 4 ||
                    cent.size(2) * cent.size(4) > 64 || cent.size(2) * cent.size(4) < 1)
                    continue;
                Hkv = cent.size(1);
                D = cent.size(2) * cent.size(4);
                c.values[attn::Param::Sink] = 1;
                if (const auto codes = inputs.find("pq_codes");
                    codes != inputs.end() && codes->second.dim() == 4 &&
                    codes->second.size(3) >= 1 && codes->second.size(3) <= 256)
                    S = codes->second.size(3);
            }
            if (const auto it = inputs.find("index_scores"); it != inputs.end()) {
                // [B, S, S] (DSA) or [B, Hi, S, blocks] (a block indexer, blocks of 4): S from
                // the file, if cheap.
                const at::Tensor& sc = it->second;
                const bool blocks = sc.dim() == 4;
                if ((sc.dim() != 3 && !blocks) || sc.size(-2) < 1 || sc.size(-2) > 256)
                    continue;
                S = sc.size(-2);
                if (blocks) {
                    c.indexBlock = 4;
                    c.indexLocalBlocks = 1;
                }
            }
            attn::AttentionInputs in;
            in.q = at::randn({1, 2 * Hkv, D});
            in.k = at::randn({1, Hkv, S, D});
            in.v = at::randn({1, Hkv, S, D});
            in.extra = inputs;
            (void)attn::attend(in, c);
        } catch (const std::exception&) {
        }
    }
    return 0;
}
