#!/usr/bin/env bash
# Nsight Compute on the decode kernels (docs/design/CUDA.md §11): where the time of SparQ's two
# steps, the dense kernel and the decode step's linear layers goes. For each kernel: its duration,
# DRAM throughput, achieved and theoretical occupancy, registers and what limits its blocks, its
# warps' stall reasons, and the source lines where its warps' stalls were sampled most (the
# kernels are built with -lineinfo). Runs on a machine where ncu reads the hardware counters (the
# device tool's Firecracker machines, .library/device/KINDS.md), with --clock-control none.
#
# Needs a build with the CUDA kernels (SPARQLAB_GPU_BUILD, default build/gpu-model: what
# gpu-model-check.sh builds; gpu-check.sh's build/gpu works too). Writes to $OUT (default
# out/gpu-profile): summary.txt, and per profile NAME.ncu-rep (the report, for Nsight Compute's
# GUI), NAME.log, NAME-raw.csv, NAME-source.csv.
#
#   scripts/gpu-profile.sh                                  # the attention kernels (≈ 2 min)
#   scripts/gpu-profile.sh --model /tmp/gpu-models/llama2-7b  # also the decode step's kernels
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-out/gpu-profile}
mkdir -p "$OUT"
BUILD=${SPARQLAB_GPU_BUILD:-build/gpu-model}
CLI=$BUILD/app/sparqlab-cli
model=""
[ "${1:-}" = "--model" ] && model=${2:-}
start=$(date +%s)
. scripts/lease-checkpoint.sh # checkpoint: the results so far into SPARQLAB_LEASE_OUT
stamp() { echo "[$(($(date +%s) - start)) s] $*" | tee -a "$OUT/summary.txt"; checkpoint; }

NCU=$(command -v ncu || ls -d /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2> /dev/null | tail -1)
if [ -z "$NCU" ] || [ ! -x "$NCU" ]; then
  stamp "no ncu on this machine: nothing profiled"
  exit 0
fi
[ -x "$CLI" ] || { stamp "no $CLI: build first (gpu-model-check.sh build)"; exit 1; }
stamp "$("$NCU" --version | tail -1)"

# profile NAME KERNEL SKIP [COUNT] -- COMMAND: launches SKIP + 1 … SKIP + COUNT (default 1) of
# the kernels named KERNEL in COMMAND.
profile() {
  local name=$1 kernel=$2 skip=$3 count=1
  shift 3
  [ "$1" != "--" ] && { count=$1; shift; }
  shift
  stamp "profile $name: $kernel"
  if ! timeout 150 "$NCU" --clock-control none --target-processes all -k "regex:$kernel" \
      --launch-skip "$skip" --launch-count "$count" --section SpeedOfLight --section LaunchStats \
      --section Occupancy --section WarpStateStats --section MemoryWorkloadAnalysis \
      --section SourceCounters --import-source yes -f -o "$OUT/$name" "$@" \
      > "$OUT/$name.log" 2>&1; then
    stamp "profile $name FAILED: $(grep -v '^ *$' "$OUT/$name.log" | tail -2 | tr '\n' ' ')"
    return
  fi
  "$NCU" --import "$OUT/$name.ncu-rep" --page raw --csv > "$OUT/$name-raw.csv" 2>> "$OUT/$name.log"
  # (cuda,sass: the samples are the SASS rows', each under its CUDA line; plain sass without
  # the line information)
  "$NCU" --import "$OUT/$name.ncu-rep" --page source --csv --print-source cuda,sass \
    > "$OUT/$name-source.csv" 2>> "$OUT/$name.log" ||
    "$NCU" --import "$OUT/$name.ncu-rep" --page source --csv --print-source sass \
      > "$OUT/$name-source.csv" 2>> "$OUT/$name.log"
  python3 scripts/ncu_summary.py "$name" "$OUT/$name-raw.csv" "$OUT/$name-source.csv" |
    tee -a "$OUT/summary.txt"
}

bench() { # the bench at one shape, SparQ (r 32, k 128) beside its dense baseline, few repeats
  echo "$CLI" bench --device cuda --json --repeats 2 --warmup 1 --methods sparq --r 32 --k 128 "$@"
}
# Batch 64 at 4k: SparQ's two steps against the dense kernel (CUDA.md §8's first shape).
b64=$(bench --dtype f16 --batch 64 --seq 4096 --heads 32)
profile b64-dense denseKernel 1 -- $b64
profile b64-step1 lowRankKernel 1 -- $b64
profile b64-step2 selectKernel 1 -- $b64
# Batch 4 at 16k: 128 units, one wave. Batch 1 at 32k (the goal against SDPA): every kernel's
# duration over the bench's launches first (one counter, one pass: what a step launches and how
# long each kernel takes, to set against the step's time from CUDA events), then each step.
b4=$(bench --dtype f16 --batch 4 --seq 16384 --heads 32)
profile b4-step2 selectKernel 1 -- $b4
b1=$(bench --dtype f16 --batch 1 --seq 32768 --heads 32)
stamp "durations b1: every kernel of the bench"
if timeout 150 "$NCU" --clock-control none --target-processes all --metrics gpu__time_duration.sum \
    --launch-count 400 -f -o "$OUT/b1-durations" $b1 > "$OUT/b1-durations.log" 2>&1; then
  "$NCU" --import "$OUT/b1-durations.ncu-rep" --page raw --csv > "$OUT/b1-durations-raw.csv" 2>&1
  python3 scripts/ncu_summary.py --durations b1 "$OUT/b1-durations-raw.csv" | tee -a "$OUT/summary.txt"
else
  stamp "durations b1 FAILED: $(grep -v '^ *$' "$OUT/b1-durations.log" | tail -2 | tr '\n' ' ')"
fi
profile b1-step1 lowRankKernel 1 -- $b1
profile b1-step2 selectKernel 1 -- $b1
# Fig. 10's shape at 32k (bf16, r 16, k 2,046): step 2 split over blocks (the select kernel
# lists the chosen rows, selectAttendKernel gathers them).
fig10="$CLI bench --device cuda --json --repeats 2 --warmup 1 --methods sparq --dtype bf16 --batch 1 --seq 32768 --heads 32 --r 16 --k 2046"
profile fig10-step2 selectKernel 1 -- $fig10
profile fig10-step2-attend selectAttendKernel 1 -- $fig10

# The decode step's linear layers in a model (bench-generate at 4k, batch 1, one load of the
# model): the first four launches of the gemv kernel, layer 0's q·k·v, o, gate·up and down.
if [ -n "$model" ] && [ -f "$model/config.json" ]; then
  gen="$CLI bench-generate --model $model --device cuda --batch 1 --seq 4096 --methods dense --steps 2 --warmup 1 --json"
  profile step-gemv gemvKernel 0 4 -- $gen
fi
stamp "done"
