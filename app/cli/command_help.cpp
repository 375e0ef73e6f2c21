// What each subcommand's --help says beyond its usage line (command_help.h).

#include "command_help.h"

#include <cstring>
#include <vector>

namespace sparqlab::cli {

namespace {

/// The options every model command means alike; a command's row names those it takes.
struct SharedOption {
    const char* name;
    const char* text;
};

const std::vector<SharedOption>& sharedOptions() {
    static const std::vector<SharedOption> all{
        {"model", "  --model M          a Hugging Face folder (config.json, *.safetensors, "
                  "tokenizer.json), a hub id\n"
                  "                     already in the local HF cache (nothing is downloaded), "
                  "or `demo`\n"},
        {"compute", "  --compute auto|f32|stored\n"
                    "                     default auto: float32, except that a BF16/F16 "
                    "checkpoint computes in\n"
                    "                     its stored dtype on --device cuda or where float32 "
                    "would not fit\n"},
        {"device", "  --device cpu|cuda  default cpu: where the weights, the KV cache and the "
                   "forward passes\n"
                   "                     are; cuda needs a CUDA libtorch, a visible GPU and the "
                   "room (checked first)\n"},
        {"ids", "  --ids LIST         the prompt as token ids (5,6,7); needs no tokenizer\n"
                "  --ids-file F.json  the prompt as a JSON array of token ids\n"},
        {"chat", "  --chat             a text prompt becomes a user turn of the model's chat "
                 "template\n"
                 "  --system T         a system message before it (turns --chat on)\n"},
    };
    return all;
}

struct CommandHelp {
    const char* name;
    std::vector<const char*> shared; ///< the rows of sharedOptions() it takes
    const char* options;             ///< its own options, one "  --option" line each
    const char* example;
};

const std::vector<CommandHelp>& helps() {
    static const std::vector<CommandHelp> all{
        {"capture",
         {"model", "compute", "device", "ids", "chat"},
         "  --prompt-file F    one prompt, the whole text of F (give one of --prompt-file,\n"
         "                     --prompts-file, --ids, --ids-file)\n"
         "  --prompts-file F   JSON lines, {\"text\": …} or {\"ids\": […]} each: one example a "
         "line\n"
         "  --out cap.h5       the capture file (CONTRACTS.md §3), written whole or not at all\n"
         "  --generate N       default 0: N greedy tokens after each prompt (dense attention), "
         "their\n"
         "                     K and V captured too (their queries with --all-queries); the "
         "prompt\n"
         "                     and N must fit the context\n"
         "  --all-queries      keep every position's query, not only the last prompt "
         "position's\n"
         "                     (Double Sparsity's calibration, SnapKV's window and TOVA need "
         "it)\n"
         "  --float16          store q, K and V as float16 (default float32)\n",
         "sparqlab-cli capture --model demo --prompt-file prompt.txt --all-queries --out cap.h5"},
        {"bench",
         {},
         "  --seq LIST         default 4096: cache lengths S (--sweep: 1024 … 65536)\n"
         "  --batch LIST       default 1 (--sweep: 1,4,16)\n"
         "  --heads H          default 32: query heads\n"
         "  --kv-heads G       default --heads; --heads must be a multiple of it\n"
         "  --head-dim D       default 128\n"
         "  --r LIST           default 32 (--sweep: 16,32,64), each at most --head-dim; every "
         "(r, k) is timed\n"
         "  --k LIST           default 128 (--sweep: 64,128,256), each at most every --seq\n"
         "  --dtype LIST       default f32: f32, f16 or bf16, the dtype K and V are stored in\n"
         "  --device cpu|cuda  default cpu\n"
         "  --methods LIST     each listed method of the decode engine against dense (default "
         "SparQ);\n"
         "                     their other options (--page-size, --p, …) go with it only\n"
         "  --repeats N        default 10: timed samples a configuration\n"
         "  --warmup N         default 2: untimed samples before them\n"
         "  --seed S           default 0: the random q, K and V\n"
         "  --bandwidth-mib N  default 512: MiB a buffer of the copy that measures the "
         "bandwidth\n"
         "  --sweep            the paper's Appendix F grid for each of --seq, --batch, --r, "
         "--k not given\n"
         "  --json             one JSON object a line (CONTRACTS.md §5), not a table\n"
         "  --out F.jsonl      the rows as JSON lines into F too\n",
         "sparqlab-cli bench --seq 1024,4096 --r 16,32 --k 64,128 --repeats 5"},
        {"bench-generate",
         {"model", "compute", "device"},
         "  --seq LIST         default 4096: prefill lengths S of random tokens (S, --warmup "
         "and\n"
         "                     --steps must fit the context)\n"
         "  --batch B          default 1: sequences decoded together\n"
         "  --methods LIST     default dense,sparq: methods with a fast decode, each with its "
         "own\n"
         "                     defaults and the ATTN options it takes\n"
         "  --compression C    in (0, 1): SparQ's k at each S the largest whose transfer is at "
         "most C\n"
         "                     of dense's (instead of --k)\n"
         "  --steps N          default 32: timed decode steps\n"
         "  --warmup N         default 4: untimed decode steps before them\n"
         "  --seed S           default 0: the random prompt tokens\n"
         "  --no-graphs        on a GPU, each step eagerly, not replayed from CUDA graphs\n"
         "  --json             one JSON object per length and method (CONTRACTS.md §11)\n",
         "sparqlab-cli bench-generate --model demo --seq 256,512 --r 16 --k 64 --steps 16"},
        {"figures",
         {},
         "  --capture cap.h5   the paper's figures from a capture (give one of --capture, "
         "--bench, --eval)\n"
         "  --bench F.jsonl    Fig. 8 and F1 from `bench` rows, Fig. 10 from `bench-generate` "
         "rows\n"
         "  --eval F.jsonl     the trade-off curves and Table 2 (and RULER's table) from "
         "`eval`\n"
         "  --out DIR          each figure as ID.<format> with ID.csv, the numbers drawn\n"
         "  --format LIST      default png,svg,pdf\n"
         "  --layer L          with --capture: Fig. 4c's layer (default the middle one)\n"
         "  --width W          default 800 (200 … 8000); a PNG is drawn at twice the size\n"
         "  --height H         default 520 (150 … 8000)\n",
         "sparqlab-cli figures --capture cap.h5 --out figs --format png"},
        {"init-model",
         {},
         "  --config F         a config.json of a supported architecture (sparqlab-cli "
         "families)\n"
         "  --out DIR          the model folder: config.json, model.safetensors (or shards)\n"
         "  --seed N           default 0: the random weights\n"
         "  --dtype f32|f16|bf16\n"
         "                     default f32: the stored dtype\n"
         "  --tokenizer F      a tokenizer.json to copy in (without one: commands on ids "
         "only)\n"
         "  --shard-gb G       default 5: at most G·10⁹ bytes a file, with an index beyond "
         "one\n",
         "sparqlab-cli init-model --config config.json --out rand --dtype bf16 --tokenizer "
         "resources/demo-model/tokenizer.json"},
        {"eval",
         {"model", "compute", "device", "chat"},
         "  --task TASK        one of `sparqlab-cli tasks`\n"
         "  --data F           the task's data (default: the shipped addresses for repetition, "
         "needle,\n"
         "                     bpc and RULER's generated tasks; needed by the others)\n"
         "  --out F.jsonl      one line per example, method and parameter set (CONTRACTS.md "
         "§8)\n"
         "  --methods LIST     default dense,sparq,h2o,lminf,flexgen,oracle\n"
         "  --r LIST           (and every ATTN option) a list replacing the default grid of the "
         "methods\n"
         "                     that take it (Table G1, k scaled to the context); eval runs "
         "their product\n"
         "  --local k/4|N      k/4 of each k, or N positions, for the methods with a window\n"
         "  --limit N          the first N examples after the seeded shuffle (default all)\n"
         "  --seed S           default 0: the shuffle and each example's randomness\n"
         "  --resume           keep the lines already written, compute the missing ones\n"
         "  --shard i/n        default 0/1: examples i, i+n, i+2n, … only\n"
         "  --prefill dense|method\n"
         "                     default dense: the prompt through dense attention, the method "
         "decodes\n"
         "  --context-chars N  repetition: the context in characters (default 6,000, fitted to "
         "the model)\n"
         "  --prompt-chars N   repetition: default 128\n"
         "  --reference-chars N\n"
         "                     repetition: default 256, at least 2\n"
         "  --confusion N      squad: default 7 distractor paragraphs\n"
         "  --shots N          squad: default 1 solved question before the asked one\n"
         "  --depths LIST      needle: default 0,0.25,0.5,0.75,1\n"
         "  --lengths LIST     needle: haystack lengths in tokens; RULER: lengths (--length too)\n"
         "  --samples N        RULER: default 20 samples per task and length\n"
         "  --words F          RULER's word list (default Debian's "
         "/usr/share/dict/american-english)\n"
         "  --measure-speed    each line also gets the decode engine's speed-up over dense\n"
         "  --speed-device cpu|cuda\n"
         "                     default cpu: where --measure-speed times\n",
         "sparqlab-cli eval --model demo --task repetition --out rep.jsonl --methods dense,sparq "
         "--r 16,32 --limit 5"},
        {"generate",
         {"model", "compute", "device", "ids", "chat"},
         "  --prompt T         the prompt as text (give one of --prompt, --prompt-file, "
         "--messages,\n"
         "                     --ids, --ids-file)\n"
         "  --prompt-file F    the prompt, the whole text of F\n"
         "  --messages F.json  the turns of a JSON array [{\"role\", \"content\"}, …] through "
         "the\n"
         "                     model's chat template (docs/chat-templates.md)\n"
         "  --max-new-tokens N greedy tokens after the prompt; the prompt and N must fit the "
         "context\n"
         "  --json             {prompt_ids, new_ids, text, healed}, not the text\n"
         "  --token-healing    regenerate the prompt's last word (the default for a text prompt\n"
         "                     without --chat: a cut word continues as the model would)\n"
         "  --no-token-healing the prompt's tokens as they are\n",
         "sparqlab-cli generate --model demo --prompt \"The state of our Union\" "
         "--max-new-tokens 16 --method sparq --r 16 --k 32"},
        {"bpc",
         {"model", "compute", "device"},
         "  --text-file F      the text to score (UTF-8): bits per character over every token, "
         "in\n"
         "                     windows of the model's context, each next one half a window on\n"
         "  --json             {bpc, chars, tokens, scored_tokens, window, stride}, not a line\n",
         "sparqlab-cli bpc --model demo --text-file tests/data/sotu_2012_excerpt.txt --method "
         "sparq --r 16 --k 64"},
        {"attend",
         {},
         "  --capture cap.h5   the capture whose q, K and V the method runs on\n"
         "  --method M         the method (`sparqlab-cli methods`); its own defaults, then the "
         "ATTN\n"
         "                     options (sparq: r 32, k 128, Eq. 9's τ, the mean value, "
         "sum-probs)\n"
         "  --out res.h5       the result file (CONTRACTS.md §3b): outputs, chosen positions, "
         "α, error\n"
         "  --inputs F.h5      a method's drawn inputs to reuse (MagicPIG's hyperplanes: a result "
         "file\n"
         "                     of an earlier run holds them), so two runs draw alike\n"
         "  --probs            also write probs [L, Hq, T, S]: dense attention of every step\n"
         "  --json             the summary as one JSON object (per-head figures too), not a "
         "line\n",
         "sparqlab-cli attend --capture cap.h5 --method sparq --r 16 --k 64 --out res.h5"},
        {"stats",
         {},
         "  --capture cap.h5   the capture\n"
         "  --json out.json    the statistics file to write (CONTRACTS.md §4); - prints it\n"
         "  --coverage-k K     default 32: coverage's k (SPARQ.md §6.1)\n"
         "  --alpha-r R        default 32 (at most head_dim): α agreement's r (§6.5)\n"
         "  --alpha-k K        default 128: α agreement's k\n"
         "  --seed S           default 0: the random projections of the top-k agreement\n"
         "  --methods LIST     the methods whose recall@k is measured, in this order (default "
         "every\n"
         "                     method that selects positions)\n"
         "  --recall-k LIST    default 16,32,64,128: one recall row per k (a method whose "
         "budget is\n"
         "                     not k: one row); each method's own defaults, then the ATTN "
         "options\n",
         "sparqlab-cli stats --capture cap.h5 --json stats.json --methods sparq,quest,oracle"},
        {"overlap",
         {},
         "  --capture cap.h5   the capture (with a model's indexer scores: compared with it too;\n"
         "                     DeepSeek-V4's: each layer's compressed entries and window)\n"
         "  --json out.json    the rows (CONTRACTS.md §11); - prints them\n"
         "  --methods LIST     default sparq,quest,oracle, each with its own defaults and the "
         "ATTN\n"
         "                     options it takes\n"
         "  --ks LIST          default 256,2048: the budgets, each cut to the positions there "
         "are\n"
         "  --queries N        default 8: the last N captured queries of each example\n",
         "sparqlab-cli overlap --capture cap.h5 --json overlap.json --ks 16,64"},
        {"calibrate",
         {},
         "  --capture cal.h5   the capture to calibrate on (Double Sparsity: made with "
         "--all-queries)\n"
         "  --method M         loki or double-sparsity\n"
         "  --out F.h5         the calibration (CONTRACTS.md §6), for --basis or --channels\n"
         "  --mode qk|q|k      Double Sparsity: channels by mean |q·k| (default), |q| or |k|\n"
         "  --uncentered       Loki: PCA of the uncentred keys (default centred)\n",
         "sparqlab-cli calibrate --capture cap.h5 --method loki --out basis.h5"},
        {"traffic",
         {"model"},
         "  --length N         the sequence length of the decode step\n"
         "  --batch B          default 1: sequences (caches count per sequence, weights once)\n"
         "  --bytes B          default 2 (BF16): bytes per element\n"
         "  --state-bytes B    default --bytes: bytes per element of a hybrid's linear-layer\n"
         "                     state (4: float32, as SparQ Lab keeps it)\n"
         "  --json             JSON (CONTRACTS.md §11), not text\n",
         "sparqlab-cli traffic --model demo --length 1024 --method sparq --r 16 --k 64"},
        {"heads",
         {"model", "compute", "device"},
         "  --length R         default 256: random tokens per showing (twice R must fit)\n"
         "  --sequences N      default 4: random sequences averaged\n"
         "  --seed S           default 0: the random tokens\n"
         "  --json             JSON, not a table\n",
         "sparqlab-cli heads --model demo --length 128"},
        {"session",
         {},
         "  --capture cap.h5   make a session from a capture of one prompt (else: show FILE)\n"
         "  --out session.h5   the session to write\n"
         "  --layer L          default 0: the layer shown\n"
         "  --head H           default 0: the query head shown\n"
         "  --prompt-positions P\n"
         "                     default 0 (all prompt): the positions that are the prompt\n"
         "  --step T           default the last: the decode step shown\n"
         "  --query-position P default the step's query: another held query\n",
         "sparqlab-cli session --capture cap.h5 --out s.h5 --method sparq --r 8 --k 16"},
        {"logits",
         {"model", "compute", "device", "ids"},
         "  --out F.h5         the dataset logits, float32 [T, vocab], one row per position\n",
         "sparqlab-cli logits --model demo --ids 5,6,7,8 --out logits.h5"},
    };
    return all;
}

} // namespace

std::string commandDetails(const std::string& command) {
    for (const CommandHelp& h : helps()) {
        if (command != h.name)
            continue;
        std::string out = std::string("\noptions:\n") + h.options;
        for (const char* s : h.shared)
            for (const SharedOption& o : sharedOptions())
                if (std::strcmp(o.name, s) == 0)
                    out += o.text;
        return out + "\nexample: " + h.example + "\n";
    }
    return {};
}

} // namespace sparqlab::cli
