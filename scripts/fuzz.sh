#!/usr/bin/env bash
# Builds the libFuzzer targets (clang, ASan + UBSan) and runs each for a given time, starting
# from the seed corpus in tests/fuzz/corpus; new inputs go to build/fuzz/corpus, crashes to
# build/fuzz/crashes. A crash found is fixed and its input kept in tests/fuzz/corpus.
#
#   scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]      (default 600 s, every target)
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-600}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(safetensors config tokenizer tokenize_text capture bench_json)
cmake --preset fuzz >/dev/null
cmake --build build/fuzz --target "${targets[@]/#/fuzz_}"
mkdir -p build/fuzz/crashes
for t in "${targets[@]}"; do
  mkdir -p "build/fuzz/corpus/$t"
  echo "fuzz: $t for ${seconds}s"
  ASAN_OPTIONS=detect_leaks=0:allocator_may_return_null=1 \
    "build/fuzz/tests/fuzz/fuzz_$t" -max_total_time="$seconds" -rss_limit_mb=4096 -timeout=20 \
    -max_len=65536 -artifact_prefix="build/fuzz/crashes/$t-" -print_final_stats=1 \
    "build/fuzz/corpus/$t" "tests/fuzz/corpus/$t" 2>&1 | grep -E "^(#|stat::|==|SUMMARY)" | tail -12
done
