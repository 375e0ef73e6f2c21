#!/usr/bin/env bash
# On a bare GPU machine (docs/design/CUDA.md §7; the device tool's machines: CUDA 13, a pip
# PyTorch with its CUDA libtorch, no Qt): builds the attention library, the CLI and the CUDA
# tests against that libtorch, runs the tests, times the CUDA kernels against PyTorch's SDPA at
# the shapes of CUDA.md §8, and prints one table. Everything it writes goes to $OUT (default
# out/gpu-check): summary.txt, build.log, test.log, sanitizer.log, bench.jsonl (every bench row),
# stages.jsonl (SparQ's two steps timed alone), bench.err, anchor.json (SDPA and the copy
# bandwidth measured from Python in the same run).
#
#   scripts/gpu-check.sh            # build, test, the §4 benches (about 5 minutes on an H100)
#   scripts/gpu-check.sh --figures  # also the Fig. 8 and Fig. F1 sweeps
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-out/gpu-check}
mkdir -p "$OUT"
figures=0
[ "${1:-}" = "--figures" ] && figures=1
start=$(date +%s)
. scripts/lease-checkpoint.sh # checkpoint: the results so far into SPARQLAB_LEASE_OUT
stamp() { echo "[$(($(date +%s) - start)) s] $*" | tee -a "$OUT/summary.txt"; checkpoint; }

{
  echo "gpu-check $(git describe --always --dirty 2>/dev/null || echo '?') on $(hostname)"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,clocks.mem \
    --format=csv,noheader 2>&1
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)' 2>&1
  nvcc --version 2>&1 | tail -1
} | tee "$OUT/summary.txt"

# --- the anchor from Python, first (it needs no build) ---------------------------------------
stamp "anchor: SDPA and the copy bandwidth from PyTorch"
timeout 120 python3 scripts/gpu_anchor.py > "$OUT/anchor.json" 2>> "$OUT/bench.err" ||
  stamp "anchor failed: $(tail -3 "$OUT/bench.err")"
cat "$OUT/anchor.json" >> "$OUT/summary.txt"

# --- build -----------------------------------------------------------------------------------
# SPARQLAB_GPU_BUILD names a build folder configured already (gpu-model-check.sh's, with the
# model runtime): its targets are brought up to date there instead of a build of our own.
BUILD=${SPARQLAB_GPU_BUILD:-build/gpu}
if [ -n "${SPARQLAB_GPU_BUILD:-}" ] && [ -f "$BUILD/CMakeCache.txt" ]; then
  stamp "reusing the build in $BUILD"
else
  stamp "configure"
  TORCH_PREFIX=$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')
  GEN=Ninja
  command -v ninja > /dev/null || GEN="Unix Makefiles"
  if ! cmake -S . -B "$BUILD" -G "$GEN" -DCMAKE_BUILD_TYPE=Release -DSPARQLAB_GUI=OFF \
      -DSPARQLAB_HDF5=OFF -DSPARQLAB_BENCH=OFF -DCMAKE_PREFIX_PATH="$TORCH_PREFIX" \
      > "$OUT/build.log" 2>&1; then
    stamp "configure FAILED"; tail -30 "$OUT/build.log" | tee -a "$OUT/summary.txt"; exit 1
  fi
fi
stamp "build"
if ! cmake --build "$BUILD" -j "$(nproc)" --target sparqlab-cli test_cuda_logic test_cuda_decode \
    >> "$OUT/build.log" 2>&1; then
  stamp "build FAILED"; grep -E "error|Error" "$OUT/build.log" | head -30 | tee -a "$OUT/summary.txt"
  exit 1
fi
grep -E "spill|warning" "$OUT/build.log" | head -20 >> "$OUT/summary.txt"
CLI=$BUILD/app/sparqlab-cli

# --- tests -----------------------------------------------------------------------------------
stamp "tests"
"$BUILD/tests/cuda/test_cuda_logic" > "$OUT/test.log" 2>&1
echo "test_cuda_logic exit $?" | tee -a "$OUT/summary.txt"
timeout 240 "$BUILD/tests/cuda/test_cuda_decode" >> "$OUT/test.log" 2>&1
echo "test_cuda_decode exit $?" | tee -a "$OUT/summary.txt"
grep -E "^FAIL" "$OUT/test.log" | head -25 >> "$OUT/summary.txt"
tail -3 "$OUT/test.log" >> "$OUT/summary.txt"

# --- benches (CUDA.md §8) ----------------------------------------------------------------------
JSONL=$OUT/bench.jsonl
bench() { # label, then the bench arguments; rows into $JSONL
  local label=$1; shift
  stamp "bench $label"
  timeout 240 "$CLI" bench --device cuda --json --repeats 20 --warmup 3 "$@" \
    >> "$JSONL" 2>> "$OUT/bench.err" || stamp "bench $label FAILED: $(tail -2 "$OUT/bench.err")"
}
for shape in "64 4096" "4 16384" "1 32768"; do
  set -- $shape
  bench "sparq B=$1 S=$2" --dtype f16 --batch "$1" --seq "$2" --heads 32 --r 32 --k 128
done
# Each step of SparQ alone (SPARQLAB_CUDA_STAGES: 1 step 1, 2 step 2), to see where the time
# goes (rows into stages.jsonl).
JSONL=$OUT/stages.jsonl
for st in 1 2; do
  for shape in "64 4096" "4 16384" "1 32768"; do
    set -- $shape
    SPARQLAB_CUDA_STAGES=$st bench "sparq step $st alone B=$1 S=$2" --dtype f16 --batch "$1" \
      --seq "$2" --heads 32 --methods sparq --r 32 --k 128
  done
done
python3 - "$OUT/stages.jsonl" <<'PY' | tee -a "$OUT/summary.txt"
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    if r.get("method") == "sparq":
        print(f"stage alone B={r['batch']} S={r['seq']}: sparq {r.get('graph_us')} us (graph), dense {r.get('dense_graph_us')} us")
PY
JSONL=$OUT/bench.jsonl
methods=dense,sparq,quest,loki,double-sparsity,oracle-top-p,sparq-top-p
bench "methods B=4 S=16384" --dtype f16 --batch 4 --seq 16384 --methods $methods --r 32 --k 128
bench "methods B=64 S=4096" --dtype f16 --batch 64 --seq 4096 --methods $methods --r 32 --k 128
bench "methods GQA 32/8 B=4 S=16384" --dtype bf16 --batch 4 --seq 16384 --heads 32 --kv-heads 8 \
  --methods dense,sparq,quest,loki,double-sparsity,oracle-top-p --r 32 --k 128
# Step 2's shortcuts (CUDA.md §2.2) against the paths before them, SparQ and its top-p at each
# level into few-passes-<level>.jsonl: 2 (the default) the threshold in two stages, 1 in one stage
# over all the group maxima, 0 the four-pass radix selects.
for level in 2 1 0; do
  JSONL=$OUT/few-passes-$level.jsonl
  for shape in "64 4096" "4 16384" "1 32768"; do
    set -- $shape
    SPARQLAB_CUDA_FEW_PASSES=$level bench "sparq B=$1 S=$2, few passes $level" --dtype f16 \
      --batch "$1" --seq "$2" --heads 32 --methods sparq,sparq-top-p --r 32 --k 128
  done
done
python3 - "$OUT/few-passes-2.jsonl" "$OUT/few-passes-1.jsonl" "$OUT/few-passes-0.jsonl" <<'PY' | tee -a "$OUT/summary.txt"
import json, sys
def rows(path):
    return {(r["batch"], r["seq"], r["method"]): r for r in map(json.loads, open(path))
            if r.get("method") in ("sparq", "sparq-top-p") and r.get("k") == 128
            and r.get("kv_heads") == 32 and r.get("dtype") == "f16"}
two, one, off = rows(sys.argv[1]), rows(sys.argv[2]), rows(sys.argv[3])
for key in sorted(off):
    print(f"B={key[0]} S={key[1]} {key[2]}: step 2's threshold in two stages "
          f"{two.get(key, {}).get('graph_us')} us, in one {one.get(key, {}).get('graph_us')} us, "
          f"no shortcuts {off[key].get('graph_us')} us (graph)")
PY
# Step 2 asking for its candidates' rows into L2 while it ranks them (CUDA.md §2.2) against not
# (SPARQLAB_CUDA_PREFETCH=0): rows into prefetch-off.jsonl.
JSONL=$OUT/prefetch-off.jsonl
for shape in "64 4096" "4 16384" "1 32768"; do
  set -- $shape
  SPARQLAB_CUDA_PREFETCH=0 bench "sparq B=$1 S=$2, prefetch off" --dtype f16 --batch "$1" \
    --seq "$2" --heads 32 --methods sparq --r 32 --k 128
done
python3 - "$OUT/bench.jsonl" "$OUT/prefetch-off.jsonl" <<'PY' | tee -a "$OUT/summary.txt"
import json, sys
def rows(path):
    return {(r["batch"], r["seq"]): r for r in map(json.loads, open(path))
            if r.get("method") == "sparq" and r.get("k") == 128 and r.get("kv_heads") == 32
            and r.get("dtype") == "f16"}
on, off = rows(sys.argv[1]), rows(sys.argv[2])
for key in sorted(off):
    print(f"B={key[0]} S={key[1]} sparq: {on.get(key, {}).get('graph_us')} us with the "
          f"candidates' rows prefetched, {off[key].get('graph_us')} us without (graph)")
PY
# Step 1 staging its loads of K in shared memory by asynchronous copies (CUDA.md §2.1) against
# loads into registers (SPARQLAB_CUDA_STAGED=0): SparQ whole (staged-off.jsonl) and its step 1
# alone (staged-off-step1.jsonl; the staged step 1 alone is stages.jsonl's first row a shape).
for shape in "64 4096" "4 16384" "1 32768"; do
  set -- $shape
  JSONL=$OUT/staged-off.jsonl
  SPARQLAB_CUDA_STAGED=0 bench "sparq B=$1 S=$2, step 1 not staged" --dtype f16 --batch "$1" \
    --seq "$2" --heads 32 --methods sparq --r 32 --k 128
  JSONL=$OUT/staged-off-step1.jsonl
  SPARQLAB_CUDA_STAGED=0 SPARQLAB_CUDA_STAGES=1 bench "sparq step 1 alone B=$1 S=$2, not staged" \
    --dtype f16 --batch "$1" --seq "$2" --heads 32 --methods sparq --r 32 --k 128
done
python3 - "$OUT/bench.jsonl" "$OUT/staged-off.jsonl" "$OUT/stages.jsonl" \
  "$OUT/staged-off-step1.jsonl" <<'PY' | tee -a "$OUT/summary.txt"
import json, sys
def rows(path): # (batch, seq) -> graph µs of its first SparQ row (r 32, k 128, MHA, f16)
    out = {}
    for r in map(json.loads, open(path)):
        if (r.get("method") == "sparq" and r.get("k") == 128 and r.get("r") == 32
                and r.get("kv_heads") == 32 and r.get("dtype") == "f16"):
            out.setdefault((r["batch"], r["seq"]), r.get("graph_us"))
    return out
on, off, on1, off1 = (rows(p) for p in sys.argv[1:5])
for key in sorted(off):
    print(f"B={key[0]} S={key[1]} sparq: step 1 staged {on.get(key)} us, not staged {off[key]} us; "
          f"step 1 alone staged {on1.get(key)} us, not staged {off1.get(key)} us (graph)")
PY
# Programmatic dependent launch (CUDA.md §3: each kernel of a step may begin while the one before
# it finishes) against plain launches (SPARQLAB_CUDA_PDL=0): dense and SparQ, rows into pdl-off.jsonl.
JSONL=$OUT/pdl-off.jsonl
for shape in "64 4096" "4 16384" "1 32768"; do
  set -- $shape
  SPARQLAB_CUDA_PDL=0 bench "dense, sparq B=$1 S=$2, plain launches" --dtype f16 --batch "$1" \
    --seq "$2" --heads 32 --methods dense,sparq --r 32 --k 128
done
python3 - "$OUT/bench.jsonl" "$OUT/pdl-off.jsonl" <<'PY' | tee -a "$OUT/summary.txt"
import json, sys
def rows(path): # (batch, seq, method) -> (graph µs, plain µs), from method rows or a shape's row
    out = {}
    for r in map(json.loads, open(path)):
        if r.get("kv_heads") != 32 or r.get("dtype") != "f16" or r.get("head_dim") != 128:
            continue
        b, s = r["batch"], r["seq"]
        if "method" in r:
            if r["method"] == "dense" or (r["method"] == "sparq" and r.get("k") == 128 and r.get("r") == 32):
                out[(b, s, r["method"])] = (r.get("graph_us"), r.get("us"))
        elif r.get("k") == 128 and r.get("r") == 32:
            out.setdefault((b, s, "sparq"), (r.get("sparq_graph_us"), r.get("sparq_us")))
            out.setdefault((b, s, "dense"), (r.get("dense_graph_us"), r.get("dense_us")))
    return out
on, off = rows(sys.argv[1]), rows(sys.argv[2])
for key in sorted(off):
    a, b = on.get(key, (None, None)), off[key]
    print(f"B={key[0]} S={key[1]} {key[2]}: overlapped launches {a[0]} us graph, {a[1]} plain; "
          f"plain launches (SPARQLAB_CUDA_PDL=0) {b[0]} graph, {b[1]} plain")
PY
# The rank kernel (CUDA.md §2.2) against step 2 ranking a combined GQA rule alone, one block a
# row (SPARQLAB_CUDA_RANK=0, as before the kernel): the same GQA shape, rows into rank-off.jsonl.
JSONL=$OUT/rank-off.jsonl
SPARQLAB_CUDA_RANK=0 bench "GQA 32/8 B=4 S=16384, rank kernel off" --dtype bf16 --batch 4 \
  --seq 16384 --heads 32 --kv-heads 8 --methods dense,sparq,oracle-top-p --r 32 --k 128
python3 - "$OUT/bench.jsonl" "$OUT/rank-off.jsonl" <<'PY' | tee -a "$OUT/summary.txt"
import json, sys
def rows(path):
    out = {}
    for line in open(path):
        r = json.loads(line)
        if r.get("kv_heads") == 8 and r.get("seq") == 16384:
            out[r["method"]] = r.get("graph_us")
    return out
on, off = rows(sys.argv[1]), rows(sys.argv[2])
for m in ("sparq", "oracle-top-p"):
    print(f"GQA 32/8 B=4 S=16384 {m}: rank kernel on {on.get(m)} us, off {off.get(m)} us (graph)")
PY
# Step 2's attention split over blocks where the units are few (CUDA.md §2.2) at Fig. 10's
# shapes (batch 1, 32 heads, bf16, r = 16, k ≈ S/16: what bench-generate --compression 0.125
# takes), against one block a unit (SPARQLAB_CUDA_SPLITS=1): rows into splits-on/off.jsonl.
for sk in 4096:254 16384:1022 32768:2046; do
  JSONL=$OUT/splits-on.jsonl
  bench "Fig. 10 shape S=${sk%:*} k=${sk#*:}" --dtype bf16 --batch 1 --seq "${sk%:*}" --heads 32 \
    --r 16 --k "${sk#*:}"
  JSONL=$OUT/splits-off.jsonl
  SPARQLAB_CUDA_SPLITS=1 bench "Fig. 10 shape S=${sk%:*} k=${sk#*:}, splits off" --dtype bf16 \
    --batch 1 --seq "${sk%:*}" --heads 32 --r 16 --k "${sk#*:}"
done
python3 - "$OUT/splits-on.jsonl" "$OUT/splits-off.jsonl" <<'PY' | tee -a "$OUT/summary.txt"
import json, sys
def rows(path):
    return {r["seq"]: r for r in map(json.loads, open(path)) if r.get("method") == "sparq"}
on, off = rows(sys.argv[1]), rows(sys.argv[2])
for s in sorted(on):
    a, b = on[s], off.get(s, {})
    print(f"Fig. 10 shape B=1 S={s} k={a.get('k')}: sparq {a.get('graph_us')} us with step 2 split, "
          f"{b.get('graph_us')} us without; dense {a.get('dense_graph_us')} us")
PY
JSONL=$OUT/bench.jsonl
if [ $figures = 1 ]; then
  bench "Fig. 8" --dtype f16 --batch 64 --seq 1024,2048,4096,8192,16384,32768 --r 32 --k 128
  bench "Fig. F1" --dtype f16 --batch 1,4,16 --seq 1024,4096,16384,65536 --r 16,32,64 \
    --k 64,128,256
fi

# --- one table -------------------------------------------------------------------------------
stamp "table"
python3 scripts/gpu_table.py "$OUT/bench.jsonl" "$OUT/anchor.json" | tee -a "$OUT/summary.txt"

# --- the kernels under compute-sanitizer (memcheck, racecheck, synccheck; initcheck on request), a sample of the cases
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
if [ -x "$SAN" ]; then
  # synccheck: barriers reached at different sites and shuffles with lanes not converged,
  # which the CPU emulation (tests/cuda/simt) lets pass; shorter, it checks the same sample.
  # initcheck where SPARQLAB_GPU_INITCHECK=1 (off: the lease plan has no time to spare): reads of
  # global memory no kernel wrote, which the emulation cannot see (its workspace is one
  # allocation), such as words past a row's group maxima (CUDA.md §2.2, copyGroupMaxima).
  tools="memcheck racecheck synccheck"
  [ "${SPARQLAB_GPU_INITCHECK:-0}" = 1 ] && tools="$tools initcheck"
  for tool in $tools; do
    stamp "compute-sanitizer $tool"
    limit=50; [ $tool = synccheck ] && limit=30
    SPARQLAB_TEST_QUICK=50 timeout $limit "$SAN" --tool $tool --error-exitcode 3 \
      "$BUILD/tests/cuda/test_cuda_decode" > "$OUT/san.tmp" 2>&1
    echo "compute-sanitizer $tool exit $? ($(grep -c "Error\|Hazard\|error detected" "$OUT/san.tmp") reports; 124: timed out)" |
      tee -a "$OUT/summary.txt"
    grep -m5 -A6 "Error\|Hazard\|error detected" "$OUT/san.tmp" >> "$OUT/summary.txt"
    { echo "=== $tool"; cat "$OUT/san.tmp"; } >> "$OUT/sanitizer.log"
    rm -f "$OUT/san.tmp"
  done
fi

stamp "done"
