#!/usr/bin/env bash
# Installs what is missing, builds SparQ Lab with its tests and runs them through CTest:
# the whole suite in Release, then the unit suite again under AddressSanitizer and
# UndefinedBehaviorSanitizer (preset asan: no GUI, no bench tools).
# `scripts/test.sh PRESET` builds and runs one preset only (release, debug, asan).
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh
# The golden references: ../shared/refs beside the checkout (elsewhere: SPARQLAB_SHARED_DIR in
# the environment); without it the golden tests run on the compact copy in tests/data/refs
# (scripts/make-test-data.py), except under CI (CI=true, as CI services and .ci/run set it),
# which requires the full ones (tests/common/test_support.h).
shared="${SPARQLAB_SHARED_DIR:-../shared}"
shared="$(cd "$shared" 2>/dev/null && pwd || echo "$shared")"
if [ ! -d "$shared/refs" ]; then
  case "${CI:-}" in
    true | TRUE | True | 1)
      echo "test.sh: $shared/refs (the golden references) is required under CI (CI=true) and is missing" >&2
      exit 1
      ;;
  esac
  echo "test.sh: no $shared/refs: the golden tests use the compact references in tests/data/refs (CI=true requires them)"
fi
shared_arg=() # the default of tests/CMakeLists.txt is ../shared
[ -z "${SPARQLAB_SHARED_DIR:-}" ] || shared_arg=(-DSPARQLAB_SHARED_DIR="$shared")

# ccache (installed above) keeps its cache outside the work tree; with the checkout as its base
# directory another clone of the same sources hits it too. It never changes a result.
export CCACHE_BASEDIR="$PWD"
export CCACHE_SLOPPINESS="pch_defines,time_macros,include_file_mtime,include_file_ctime"
export CCACHE_NOHASHDIR=1
# Qt6::Test gives every test its build and source folder as definitions, for QFINDTESTDATA, which
# the suite does not use (tests/common/test_support.h has sourcePath()): left out of the hash, a
# clone elsewhere hits the same objects. Our own absolute paths are each in one small file.
export CCACHE_IGNOREOPTIONS="-DQT_TESTCASE_BUILDDIR=* -DQT_TESTCASE_SOURCEDIR=*"
export CCACHE_MAXSIZE="${CCACHE_MAXSIZE:-12G}"

run_preset() {
  local preset="$1" start built
  start=$(date +%s)
  cmake --preset "$preset" -DSPARQLAB_BUILD_TESTS=ON "${shared_arg[@]}"
  cmake --build --preset "$preset"
  built=$(date +%s)
  ctest --test-dir "build/$preset" --output-on-failure -j 2
  echo "test.sh: $preset: build $((built - start)) s, tests $(($(date +%s) - built)) s"
}

if [ $# -gt 0 ]; then
  run_preset "$1"
else
  all=$(date +%s)
  # The core configuration (no GUI, no HDF5: what a GPU machine builds) is configured here; its
  # code is compiled by the release build (sparqlab-cli-core, tests/cuda; the CUDA kernels with
  # nvcc where /usr/local/cuda has it).
  cmake --preset core -DSPARQLAB_BUILD_TESTS=ON "${shared_arg[@]}" > /dev/null
  echo "test.sh: the core configuration configures"
  run_preset release
  run_preset asan
  echo "test.sh: all: $(($(date +%s) - all)) s"
  command -v ccache > /dev/null && ccache --show-stats | grep -E "Hits|Misses|hit rate" || true
fi
