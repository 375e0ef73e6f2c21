#!/usr/bin/env bash
# Builds the libFuzzer targets (clang, ASan + UBSan) and runs each for a given time, starting
# from the seed corpus in tests/fuzz/corpus; new inputs go to build/fuzz/corpus, crashes to
# build/fuzz/crashes, each target's whole log to build/fuzz/logs. A crash found is fixed and
# its input kept in tests/fuzz/corpus.
#
#   scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]      (default 600 s, every target)
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-600}
shift || true
targets=("$@")
# Every target by default: the list in tests/fuzz/fuzz_targets.cmake.
[ ${#targets[@]} -gt 0 ] || read -r -a targets <<<"$(sed -n '/^set(SPARQLAB_FUZZ_TARGETS/,/)/p' \
  tests/fuzz/fuzz_targets.cmake | sed 's/set(SPARQLAB_FUZZ_TARGETS//; s/)//' | tr -s ' \n' ' ')"
scripts/install-deps.sh clang libclang-rt-14-dev # the fuzz preset builds with clang's libFuzzer
cmake --preset fuzz >/dev/null
cmake --build build/fuzz --target "${targets[@]/#/fuzz_}"
mkdir -p build/fuzz/crashes build/fuzz/logs
failed=()
for t in "${targets[@]}"; do
  status=0
  mkdir -p "build/fuzz/corpus/$t"
  echo "fuzz: $t for ${seconds}s"
  ASAN_OPTIONS=detect_leaks=0:allocator_may_return_null=1 \
    "build/fuzz/tests/fuzz/fuzz_$t" -max_total_time="$seconds" -rss_limit_mb=4096 -timeout=20 \
    -max_len=65536 -artifact_prefix="build/fuzz/crashes/$t-" -print_final_stats=1 \
    "build/fuzz/corpus/$t" "tests/fuzz/corpus/$t" > "build/fuzz/logs/$t.log" 2>&1 || status=$?
  grep -E "^(#|stat::|==|SUMMARY)" "build/fuzz/logs/$t.log" | tail -12
  if [ "$status" -ne 0 ]; then
    echo "fuzz: $t failed (exit $status): see build/fuzz/logs/$t.log"
    failed+=("$t")
  fi
done
[ ${#failed[@]} -eq 0 ] || { echo "fuzz: failed: ${failed[*]}"; exit 1; }
