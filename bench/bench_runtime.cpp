// bench_runtime: load memory, prefill speed and capture-write speed of a model folder.
// Usage: bench_runtime MODEL [TOKENS=1024] [OUT=/tmp/bench_capture.h5]
// Prints one JSON object. Peak memory is the process's max RSS (getrusage), reported beside
// the RSS before loading, so that the load's own peak can be compared with the weights' size.

#include "attention/runtime_info.h"
#include "capture/capture_file.h"
#include "model/model.h"

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sys/resource.h>

namespace {
double seconds(std::chrono::steady_clock::time_point a) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - a).count();
}
double currentRssMb() {
    std::ifstream s("/proc/self/statm");
    long pages = 0, rss = 0;
    s >> pages >> rss;
    return rss * 4096.0 / (1 << 20);
}
double peakRssMb() {
    rusage u{};
    getrusage(RUSAGE_SELF, &u);
    return u.ru_maxrss / 1024.0;
}
} // namespace

int main(int argc, char** argv) {
    if (argc < 2) {
        std::fprintf(stderr, "usage: bench_runtime MODEL [TOKENS] [OUT.h5]\n");
        return 2;
    }
    sparqlab::attention::restartWithPassiveOpenMP(argv);
    sparqlab::attention::initRuntime();
    const std::string spec = argv[1];
    const int64_t T = argc > 2 ? std::atoll(argv[2]) : 1024;
    const std::string out = argc > 3 ? argv[3] : "/tmp/bench_capture.h5";
    try {
        at::zeros({1}); // initialise libtorch before the baseline
        const double rssBefore = currentRssMb();
        auto t0 = std::chrono::steady_clock::now();
        sparqlab::model::ModelOpenOptions o;
        o.loadTokenizer = false;
        auto model = sparqlab::model::Model::open(spec, o);
        const double loadS = seconds(t0);
        const double peakAfterLoad = peakRssMb();
        const int64_t params = model->config().parameterCount();
        const double weightsMb = params * 4.0 / (1 << 20); // float32 compute dtype

        std::vector<int64_t> ids(static_cast<size_t>(T));
        for (int64_t i = 0; i < T; ++i)
            ids[static_cast<size_t>(i)] = (i * 7919) % model->config().vocabSize;
        model->logits({ids.begin(), ids.begin() + 8}); // warm-up
        t0 = std::chrono::steady_clock::now();
        model->logits(ids);
        const double prefillS = seconds(t0);

        t0 = std::chrono::steady_clock::now();
        const sparqlab::model::CaptureExample e = model->capture(ids, /*allQueries=*/false);
        const double captureRunS = seconds(t0);
        t0 = std::chrono::steady_clock::now();
        {
            sparqlab::capture::CaptureWriter w(out, model->captureInfo());
            w.add(e);
            w.finish();
        }
        const double writeS = seconds(t0);
        const double fileMb = std::filesystem::file_size(out) / double(1 << 20);
        const nlohmann::json j{{"model", spec},
                               {"parameters", params},
                               {"weights_mb_f32", weightsMb},
                               {"load_s", loadS},
                               {"rss_before_load_mb", rssBefore},
                               {"peak_rss_after_load_mb", peakAfterLoad},
                               {"load_peak_over_weights", (peakAfterLoad - rssBefore) / weightsMb},
                               {"prefill_tokens", T},
                               {"prefill_s", prefillS},
                               {"prefill_tokens_per_s", T / prefillS},
                               {"capture_forward_s", captureRunS},
                               {"capture_write_s", writeS},
                               {"capture_file_mb", fileMb},
                               {"capture_write_mb_per_s", fileMb / writeS}};
        std::printf("%s\n", j.dump(2).c_str());
    } catch (const std::exception& e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        return 1;
    }
    return 0;
}
