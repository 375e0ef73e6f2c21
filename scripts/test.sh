#!/usr/bin/env bash
# Installs what is missing, builds SparQ Lab with its tests (Release) and runs every test
# through CTest. Pass a CMake preset name (release, debug, asan) to use another build.
set -euo pipefail
cd "$(dirname "$0")/.."
preset="${1:-release}"

scripts/install-deps.sh
if [ ! -d ../shared/refs ]; then
  echo "test.sh: ../shared/refs (the golden references) is missing beside the checkout" >&2
  exit 1
fi
start=$(date +%s)
cmake --preset "$preset" -DSPARQLAB_BUILD_TESTS=ON
cmake --build --preset "$preset"
built=$(date +%s)
ctest --test-dir "build/$preset" --output-on-failure -j 2
echo "test.sh: build $((built - start)) s, tests $(($(date +%s) - built)) s"
