#!/usr/bin/env bash
# The measurements of docs/learned-sparse-and-hybrid.md, made again (the build in build/release):
#  1. a random DeepSeek-V3.2-shaped model (the real per-layer geometry: 16 of its 128 heads, its
#     MLA, its indexer of 64 heads × 128 and index_topk 2,048; 4 layers, a small MoE) at 4,096
#     tokens: per layer, the overlap of SparQ's (r = 32), Quest's and the oracle's chosen sets
#     with the model's own indexer's at k = 256 and 2,048, each one's recall of the exact top-k,
#     the attention mass and the transfer per step (sparqlab-cli overlap);
#  2. a random MiniMax-M3-shaped model (its per-layer geometry: 16 of its 64 query heads with
#     the one KV head and the one indexer head of 128 they share, blocks of 128, the top 16 with 1
#     local; 4 layers, the first full attention, a small MoE) at 4,096 tokens: the same, its own
#     selection being blocks;
#  3. Qwen3-Next-80B-A3B's shape (its config, no weights needed) at 32k tokens: the share of a
#     decode step's bytes in the attention layers and what SparQ at 1/8 (r = 16, k = 3,072: 0.125 of
#     dense attention's reads) saves (traffic), at
#     batch 1 and 64;
#  4. a random DeepSeek-V4-shaped model (its per-layer geometry: 16 of its 64 heads of 512 over
#     the one key-value head, q_lora 1,024, a window of 128, entries of 128 (HCA) and 4 (CSA), an
#     indexer of 64 heads × 128 keeping 512 entries; 4 layers HCA, CSA, HCA, CSA, a small MoE)
#     at 4,096 tokens: per layer, SparQ's (r = 32), Quest's and the oracle's choice among the
#     entries and the window's keys, against dense attention over every entry seen and, on the CSA
#     layers, against the model's own (sparqlab-cli overlap on a capture of format 6).
#
#   scripts/learned-sparse-study.sh [OUT_DIR]   (default docs/bench/learned-sparse; ~9 min, 3 GB)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-docs/bench/learned-sparse}
cli=build/release/app/sparqlab-cli
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$out" "$work/q3n"
"$cli" init-model --config docs/bench/learned-sparse/deepseek_v32_shaped.json --out "$work/dsv32" --seed 1
/usr/bin/python3 -c "import json, random; random.seed(1); print(json.dumps([random.randrange(2, 4096) for _ in range(4096)]))" > "$work/ids.json"
"$cli" capture --model "$work/dsv32" --ids-file "$work/ids.json" --all-queries --out "$work/dsv32.h5"
"$cli" overlap --capture "$work/dsv32.h5" --json "$out/overlap-deepseek_v32_shaped-4096.json" \
  --methods indexer,sparq,quest,oracle --ks 256,2048 --queries 8 --r 32 --page-size 16
"$cli" init-model --config docs/bench/learned-sparse/minimax_m3_shaped.json --out "$work/m3" --seed 1
"$cli" capture --model "$work/m3" --ids-file "$work/ids.json" --all-queries --out "$work/m3.h5"
"$cli" overlap --capture "$work/m3.h5" --json "$out/overlap-minimax_m3_shaped-4096.json" \
  --methods indexer,sparq,quest,oracle --ks 256,2048 --queries 8 --r 32 --page-size 16
cp docs/bench/learned-sparse/qwen3_next_80b_a3b.json "$work/q3n/config.json"
for b in 1 64; do
  "$cli" traffic --model "$work/q3n" --length 32768 --batch "$b" --method sparq --k 3072 --r 16 --json \
    > "$out/traffic-qwen3_next_80b-32k-batch$b.json"
  "$cli" traffic --model "$work/q3n" --length 32768 --batch "$b" --method sparq --k 3072 --r 16
done
"$cli" init-model --config docs/bench/learned-sparse/deepseek_v4_shaped.json --out "$work/v4" --seed 1
"$cli" capture --model "$work/v4" --ids-file "$work/ids.json" --all-queries --out "$work/v4.h5"
"$cli" overlap --capture "$work/v4.h5" --json "$out/overlap-deepseek_v4_shaped-4096.json" \
  --methods sparq,quest,oracle --ks 256,2048 --queries 8 --r 32 --page-size 16
