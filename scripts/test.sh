#!/usr/bin/env bash
# Installs what is missing, builds SparQ Lab with its tests and runs them through CTest:
# the whole suite in Release, then the unit suite again under AddressSanitizer and
# UndefinedBehaviorSanitizer (preset asan: no GUI, no bench tools).
# `scripts/test.sh PRESET` builds and runs one preset only (release, debug, asan).
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh
if [ ! -d ../shared/refs ]; then
  echo "test.sh: ../shared/refs (the golden references) is missing beside the checkout" >&2
  exit 1
fi

run_preset() {
  local preset="$1" start built
  start=$(date +%s)
  cmake --preset "$preset" -DSPARQLAB_BUILD_TESTS=ON
  cmake --build --preset "$preset"
  built=$(date +%s)
  ctest --test-dir "build/$preset" --output-on-failure -j 2
  echo "test.sh: $preset: build $((built - start)) s, tests $(($(date +%s) - built)) s"
}

if [ $# -gt 0 ]; then
  run_preset "$1"
else
  run_preset release
  run_preset asan
fi
