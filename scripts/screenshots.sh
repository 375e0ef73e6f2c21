#!/usr/bin/env bash
# Renders every view of the lab (the view table: `sparqlab --help`) on the demo model at a
# projector's 1280×800 and at 1920×1080 into docs/screenshots/<view>-<W>x<H>.png, and the
# teaching pages 1–4, the first screen after start and the timing view with two methods at
# 1280×800, a decode step of a generation, the compare view of SparQ against a DSA model's own
# indexer, the head view's scores on a log scale and the head view on a DeepSeek-V4 layer. Offscreen; the build in build/release.
#
#   scripts/screenshots.sh [OUT_DIR]        (default docs/screenshots)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-docs/screenshots}
app=build/release/app/sparqlab
prompt=tests/data/sotu_2012_excerpt.txt
mkdir -p "$out"
shots=() # what this run wrote (the folder holds other pictures too)
shot() { shots+=("$1"); }
views=$(QT_QPA_PLATFORM=offscreen "$app" --help | tr '\n' ' ' | sed -E 's/.*The view to show: ([a-z, -]+)\..*/\1/' | tr -d ' ' | tr ',' ' ')
common=(--model demo --prompt-file "$prompt" --layer 3 --head 0 --r 16 --k 64)
for size in 1280x800 1920x1080; do
  for v in $views; do
    echo "screenshots: $v at $size"
    extra=() # the trade-offs view shows the study committed in docs/eval (`figures --eval`'s)
    [ "$v" = tradeoffs ] && extra=(--eval docs/eval/demo-repetition.jsonl)
    QT_QPA_PLATFORM=offscreen "$app" "${common[@]}" "${extra[@]}" --view "$v" --query 300 \
      --size "$size" --screenshot "$out/$v-$size.png" 2>/dev/null
    shot "$out/$v-$size.png"
  done
done
echo "screenshots: the first screen after start (the default prompt, run) at 1280x800"
QT_QPA_PLATFORM=offscreen "$app" --model demo --size 1280x800 \
  --screenshot "$out/first-screen-1280x800.png" 2>/dev/null
shot "$out/first-screen-1280x800.png"
echo "screenshots: timing, SparQ against Quest, at 1280x800"
QT_QPA_PLATFORM=offscreen "$app" "${common[@]}" --view timing --compare quest --size 1280x800 \
  --screenshot "$out/timing-two-methods-1280x800.png" 2>/dev/null
shot "$out/timing-two-methods-1280x800.png"
for page in 1 2 3 4; do
  echo "screenshots: teaching page $page at 1280x800"
  QT_QPA_PLATFORM=offscreen "$app" "${common[@]}" --teach "$page" --size 1280x800 \
    --screenshot "$out/teaching-step$page-1280x800.png" 2>/dev/null
  shot "$out/teaching-step$page-1280x800.png"
done
echo "screenshots: a decode step of a generation at 1600x1000"
# (--prompt-file leaves out the file's closing line break, after which the demo model would end
# its text at once.)
QT_QPA_PLATFORM=offscreen "$app" --model demo --prompt-file "$prompt" --generate 24 --step 9 \
  --layer 3 --head 1 --r 16 --k 32 --size 1600x1000 --screenshot "$out/decode-steps.png" 2>/dev/null
shot "$out/decode-steps.png"
echo "screenshots: compare, SparQ against a DSA model's own indexer, at 1280x800"
# A random DeepSeek-V3.2-shaped model (docs/bench/learned-sparse) with the demo's tokenizer.
dsa=$(mktemp -d)
build/release/app/sparqlab-cli init-model --config docs/bench/learned-sparse/deepseek_v32_shaped.json \
  --out "$dsa/model" --seed 1 --tokenizer resources/demo-model/tokenizer.json > /dev/null
QT_QPA_PLATFORM=offscreen "$app" --model "$dsa/model" --prompt-file "$prompt" --layer 2 --head 0 \
  --method sparq --r 16 --k 64 --view compare --compare indexer --size 1280x800 \
  --screenshot "$out/compare-indexer-dsa-1280x800.png" 2>/dev/null
shot "$out/compare-indexer-dsa-1280x800.png"
rm -rf "$dsa"
echo "screenshots: the head view's scores on a log scale at 1280x800"
QT_QPA_PLATFORM=offscreen "$app" --model demo --prompt-file "$prompt" --layer 2 --head 1 \
  --method sparq --r 16 --k 64 --log-scores --size 1280x800 \
  --screenshot "$out/head-log-scores-1280x800.png" 2>/dev/null
shot "$out/head-log-scores-1280x800.png"
echo "screenshots: the head view on a DeepSeek-V4 CSA layer (entries beside the window) at 1280x800"
# A small random DeepSeek-V4-shaped model (docs/bench/learned-sparse/deepseek_v4_lab.json: a
# window of 16, an entry per 4 positions with the indexer keeping 8 on layers 1 and 3, per 32 on
# layer 0) with the demo's tokenizer.
v4=$(mktemp -d)
build/release/app/sparqlab-cli init-model --config docs/bench/learned-sparse/deepseek_v4_lab.json \
  --out "$v4/model" --seed 1 --tokenizer resources/demo-model/tokenizer.json > /dev/null
QT_QPA_PLATFORM=offscreen "$app" --model "$v4/model" --prompt-file "$prompt" --layer 1 --head 2 \
  --method sparq --r 16 --k 64 --size 1280x800 \
  --screenshot "$out/head-deepseek-v4-1280x800.png" 2>/dev/null
shot "$out/head-deepseek-v4-1280x800.png"
rm -rf "$v4"
# The repository stays under the GPU machine's 64 MiB: the shots are quantised to at most 256
# colours where pngquant is installed (apt-get install pngquant; a picture that would lose more
# than the quality floor allows, or grow, is kept as it is), else recompressed losslessly by optipng.
# Qt's PNGs are already compressed well: optipng saves 1 %, pngquant about 58 % (2026-12-02).
if command -v pngquant > /dev/null; then
  for f in "${shots[@]}"; do
    pngquant --quality 85-98 --speed 1 --skip-if-larger --force --output "$f" "$f" || true
  done
elif command -v optipng > /dev/null; then
  optipng -quiet -o2 -strip all "${shots[@]}"
fi
