// eval_demo: the demo model's figures for its model card (issue: the demo model).
// Usage: eval_demo MODEL VALID_TEXT [PROBES=50]
// - copying: PROBES probes from the validation text, each a passage of 320 characters followed
//   by its first 64 characters again; a probe passes when greedy decoding reproduces the next
//   64 characters of the passage verbatim;
// - attention sparsity: mean top-32 coverage (SPARQ.md §6.1) of the decode-step query over
//   every layer and head, on validation prompts of 1000 tokens.
// Prints one JSON object.

#include "attention/attention.h"
#include "attention/runtime_info.h"
#include "model/model.h"
#include "text/tokenizer.h"

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>
#include <torch/types.h>

#include <cstdio>
#include <fstream>
#include <sstream>

namespace {
constexpr size_t kPassageChars = 320; // ≥ 300 characters of context before the repeat
constexpr size_t kCueChars = 64;      // the passage's first 64 characters, repeated
constexpr size_t kCheckChars = 64;    // characters that must then be reproduced
constexpr int64_t kPromptTokens = 1000;
constexpr int64_t kCoverageK = 32;
} // namespace

int main(int argc, char** argv) {
    if (argc < 3) {
        std::fprintf(stderr, "usage: eval_demo MODEL VALID_TEXT [PROBES]\n");
        return 2;
    }
    sparqlab::attention::restartWithPassiveOpenMP(argv);
    sparqlab::attention::initRuntime();
    try {
        auto model = sparqlab::model::Model::open(argv[1]);
        std::ifstream in(argv[2], std::ios::binary);
        std::ostringstream ss;
        ss << in.rdbuf();
        const std::string text = ss.str();
        const int probes = argc > 3 ? std::atoi(argv[3]) : 50;
        const auto& tok = model->tokenizer();
        torch::NoGradGuard noGrad;

        // Copying probes, spread evenly over the text, each starting at a word.
        int passed = 0, passedHealed = 0;
        nlohmann::json examples = nlohmann::json::array();
        for (int p = 0; p < probes; ++p) {
            size_t start = (text.size() - 2 * kPassageChars) * static_cast<size_t>(p) /
                           static_cast<size_t>(probes);
            while (start < text.size() && text[start] != ' ')
                ++start;
            ++start;
            const std::string passage = text.substr(start, kPassageChars);
            const std::string prompt = passage + " " + passage.substr(0, kCueChars);
            const std::string expected = passage.substr(kCueChars, kCheckChars);
            const auto ids = tok.encode(prompt, true);
            const auto gen = model->generate(ids, 32, {}, true);
            const std::string cont = tok.decode(gen.newIds, true);
            const bool ok = cont.compare(0, expected.size(), expected) == 0;
            passed += ok;
            // With token healing (what `generate` does with a text prompt): the cut last word
            // of the cue is generated again, then the continuation must follow.
            const std::string healed =
                model->continuationText(model->generateHealed(ids, 40, {}, true));
            passedHealed += healed.compare(0, expected.size(), expected) == 0;
            if (p < 3)
                examples.push_back({{"cue", passage.substr(0, kCueChars)},
                                    {"expected", expected},
                                    {"continuation", cont.substr(0, 2 * kCheckChars)},
                                    {"passed", ok}});
        }

        // Top-32 coverage of the decode-step query on 1000-token validation prompts.
        const std::vector<int64_t> ids = tok.encode(text, false);
        double coverage = 0;
        int64_t heads = 0, prompts = 0;
        for (size_t off = 0; off + kPromptTokens <= ids.size() && prompts < 10;
             off += ids.size() / 10, ++prompts) {
            const std::vector<int64_t> window(ids.begin() + static_cast<long>(off),
                                              ids.begin() + static_cast<long>(off) + kPromptTokens);
            const auto e = model->capture(window, false);
            for (int64_t l = 0; l < e.q.size(0); ++l) {
                sparqlab::attention::AttentionInputs x{e.q[l].select(1, 0).unsqueeze(0),
                                                       e.k[l].unsqueeze(0),
                                                       e.v[l].unsqueeze(0),
                                                       {},
                                                       {}};
                sparqlab::attention::AttendOptions o;
                o.keepScores = true;
                const at::Tensor probs = sparqlab::attention::attend(x, {}, o).probs[0]; // [Hq, S]
                coverage += std::get<0>(probs.topk(kCoverageK, -1)).sum(-1).sum().item<double>();
                heads += probs.size(0);
            }
        }
        const nlohmann::json j{
            {"copy_probes", probes},
            {"copy_passed", passed},
            {"copy_rate", static_cast<double>(passed) / probes},
            {"copy_passed_token_healing", passedHealed},
            {"copy_rate_token_healing", static_cast<double>(passedHealed) / probes},
            {"copy_examples", examples},
            {"coverage_top32_mean", coverage / static_cast<double>(heads)},
            {"coverage_prompts", prompts},
            {"coverage_prompt_tokens", kPromptTokens}};
        std::printf("%s\n", j.dump(2).c_str());
    } catch (const std::exception& e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        return 1;
    }
    return 0;
}
