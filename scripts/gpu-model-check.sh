#!/usr/bin/env bash
# The model on the GPU (docs/gpu.md, "The model on the GPU"), on a bare GPU machine (CUDA.md §1:
# CUDA 13, a pip PyTorch with its CUDA libtorch, HDF5, Eigen, nlohmann-json; no Qt, no PCRE2
# headers). Needs the Debian packages of scripts/gpu-debs.sh carried in .gpu-debs/: they are
# unpacked into a prefix, never into /. Builds the model runtime and the CLI without the GUI
# against that libtorch, runs test_model_device (a capture on the GPU against the CPU's and greedy
# generation for each attention kind), then the paper's Fig. 10 with `sparqlab-cli bench-generate`:
# a random Llama-2-7B-shaped model in bfloat16 at batch 1 and a 1B-shaped one at batch 16,
# S = 4k … 32k, dense against SparQ at 1/8 compression, beside the limit the measured copy
# bandwidth sets. Its results go to $OUT (default out/gpu-model): summary.txt, build.log, test.log,
# fig10.jsonl, bench.err; besides, it writes the packages' prefix ($SPARQLAB_DEBS_PREFIX, default
# /tmp/sparqlab-debs), the build (build/gpu-model) and the random models (/tmp/gpu-models: the
# 7B-shaped one is 13.5 GB).
#
# The stage `profile` (not run by default) runs scripts/gpu-profile.sh (Nsight Compute on the
# kernels that decide the goals; the gemv kernel too where fig10 wrote the 7B-shaped model).
# The stage `lab` (not run by default) needs the packages of `scripts/gpu-debs.sh --gui` carried
# in .gpu-gui-debs/: it rebuilds the same build folder with the GUI and renders the lab's timing
# view offscreen with the model on the GPU (the CPU and CUDA curves of the capture's shape), on
# the demo model and, where fig10 made it, the 1B-shaped model, into $OUT/lab-timing-*.png.
#
#   scripts/gpu-model-check.sh             # build, test, Fig. 10 (about 8 minutes on an H100)
#   scripts/gpu-model-check.sh build test  # some stages only (build, kernels, test, fig10, profile, lab)
#   scripts/gpu-model-check.sh build kernels test fig10  # also gpu-check.sh on the same build
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-out/gpu-model}
mkdir -p "$OUT"
stages=${*:-build test fig10}
start=$(date +%s)
. scripts/lease-checkpoint.sh # checkpoint: the results so far into SPARQLAB_LEASE_OUT
stamp() { echo "[$(($(date +%s) - start)) s] $*" | tee -a "$OUT/summary.txt"; checkpoint; }
has() { [[ " $stages " == *" $1 "* ]]; }

{
  echo "gpu-model-check $(git describe --always --dirty 2>/dev/null || echo '?') on $(hostname): $stages"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)' 2>&1
} | tee -a "$OUT/summary.txt"

# --- the carried Debian packages, into a prefix ---------------------------------------------
PREFIX=${SPARQLAB_DEBS_PREFIX:-/tmp/sparqlab-debs}
LIBDIR=$PREFIX/usr/lib/x86_64-linux-gnu
if [ ! -f "$LIBDIR/libQt6Core.so.6" ]; then
  ls .gpu-debs/*.deb > /dev/null 2>&1 || {
    stamp "no .gpu-debs/*.deb: run scripts/gpu-debs.sh here first and carry .gpu-debs"; exit 1; }
  mkdir -p "$PREFIX" || { stamp "cannot make $PREFIX"; exit 1; }
  for f in .gpu-debs/*.deb; do
    dpkg-deb -x "$f" "$PREFIX" || { stamp "cannot unpack $f into $PREFIX"; exit 1; }
  done
  # A library the system has already stays the system's (GLib). (grep -c, not -q: under pipefail
  # a grep that stops early would fail the pipeline with ldconfig's SIGPIPE.)
  if ldconfig -p | grep -c "libglib-2.0.so.0 " > /dev/null; then rm -f "$LIBDIR"/libglib-2.0.so.0* "$LIBDIR"/libgobject-2.0.so.0* "$LIBDIR"/libgio-2.0.so.0* "$LIBDIR"/libgmodule-2.0.so.0* "$LIBDIR"/libgthread-2.0.so.0*; fi
  stamp "unpacked $(ls .gpu-debs/*.deb | wc -l) packages into $PREFIX"
fi
# (Debian 12 puts some libraries under /lib, not /usr/lib: libdbus, which Qt's D-Bus needs.)
export LD_LIBRARY_PATH=$LIBDIR:$PREFIX/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
missing=$(ldd "$LIBDIR/libQt6Core.so.6" "$PREFIX/usr/lib/qt6/libexec/moc" 2>&1 | grep "not found" | sort -u)
[ -n "$missing" ] && stamp "libraries Qt needs and neither the system nor .gpu-debs has: $missing"
export PKG_CONFIG_PATH=$LIBDIR/pkgconfig PKG_CONFIG_SYSROOT_DIR=$PREFIX
BUILD=build/gpu-model
CLI=$BUILD/app/sparqlab-cli

# --- build -----------------------------------------------------------------------------------
if has build; then
  stamp "configure"
  TORCH_PREFIX=$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')
  GEN=Ninja
  command -v ninja > /dev/null || GEN="Unix Makefiles"
  if ! cmake -S . -B "$BUILD" -G "$GEN" -DCMAKE_BUILD_TYPE=Release -DSPARQLAB_GUI=OFF \
      -DSPARQLAB_BENCH=OFF -DCMAKE_PREFIX_PATH="$TORCH_PREFIX;$PREFIX/usr" \
      -DQt6_DIR="$LIBDIR/cmake/Qt6" > "$OUT/build.log" 2>&1; then
    stamp "configure FAILED"; grep -B2 -A8 "Error" "$OUT/build.log" | head -40 | tee -a "$OUT/summary.txt"
    exit 1
  fi
  stamp "build"
  if ! cmake --build "$BUILD" -j "$(nproc)" --target sparqlab-cli test_model_device \
      test_cuda_logic test_cuda_decode \
      >> "$OUT/build.log" 2>&1; then
    stamp "build FAILED"; grep -E -A3 "error|Error" "$OUT/build.log" | head -40 | tee -a "$OUT/summary.txt"
    exit 1
  fi
  grep -c "warning" "$OUT/build.log" | sed 's/^/warnings: /' >> "$OUT/summary.txt"
fi

# --- the kernels (gpu-check.sh) on this build: tests, benches, compute-sanitizer ---------------
if has kernels; then
  stamp "kernels: scripts/gpu-check.sh into $OUT/kernels"
  SPARQLAB_GPU_BUILD=$BUILD OUT=$OUT/kernels bash scripts/gpu-check.sh > /dev/null 2>&1
  stamp "kernels: gpu-check.sh exit $?"
  cat "$OUT/kernels/summary.txt" >> "$OUT/summary.txt"
fi

# --- the model on the GPU against the CPU ------------------------------------------------------
if has test; then
  stamp "test_model_device"
  timeout 300 "$BUILD/tests/test_model_device" > "$OUT/test.log" 2>&1
  echo "test_model_device exit $?" | tee -a "$OUT/summary.txt"
  grep -E "^(FAIL|SKIP|XFAIL)|Totals" "$OUT/test.log" | head -40 | tee -a "$OUT/summary.txt"
fi

# --- Fig. 10: tokens/s dense and SparQ at 1/8 ---------------------------------------------------
if has fig10; then
  : > "$OUT/fig10.jsonl" # this run's rows only
  run_fig10() { # label, config, batch, r
    local label=$1 config=$2 batch=$3 r=$4 dir=/tmp/gpu-models/$1
    mkdir -p /tmp/gpu-models
    if [ ! -f "$dir/config.json" ]; then
      stamp "init-model $label (bfloat16)"
      "$CLI" init-model --config "$config" --out "$dir" --dtype bf16 --seed 0 >> "$OUT/bench.err" 2>&1 ||
        { stamp "init-model $label FAILED: $(tail -2 "$OUT/bench.err")"; return; }
    fi
    stamp "bench-generate $label batch $batch"
    timeout 300 "$CLI" bench-generate --model "$dir" --device cuda --batch "$batch" \
      --seq 4096,8192,16384,32768 --methods dense,sparq --compression 0.125 --r "$r" \
      --steps 32 --warmup 16 --json >> "$OUT/fig10.jsonl" \
      2>> "$OUT/bench.err" || stamp "bench-generate $label FAILED: $(tail -2 "$OUT/bench.err")"
  }
  # SPARQLAB_FIG10_MODELS: which of the two (default both; the 1B one at batch 16 takes ≈ 2 min).
  models=${SPARQLAB_FIG10_MODELS:-llama2-7b llama-1b}
  [[ " $models " == *" llama2-7b "* ]] && run_fig10 llama2-7b bench/configs/llama2-7b.json 1 16
  [[ " $models " == *" llama-1b "* ]] && run_fig10 llama-1b bench/configs/llama-1b.json 16 8
  # The 7B model at batch 1 with one switch of the environment set against the default (fig10's
  # rows): its rows into fig10-<name>.jsonl, a line a row in the summary.
  fig10_switch() { # name, VAR=value, what the default is, what the switch makes it, seq list
    local name=$1 var=$2 on=$3 off=$4 seqs=$5
    [ -f /tmp/gpu-models/llama2-7b/config.json ] || return
    stamp "bench-generate llama2-7b batch 1, $off ($var)"
    env "$var" timeout 200 "$CLI" bench-generate --model /tmp/gpu-models/llama2-7b \
      --device cuda --batch 1 --seq "$seqs" --methods dense,sparq --compression 0.125 --r 16 \
      --steps 32 --warmup 16 --json > "$OUT/fig10-$name.jsonl" 2>> "$OUT/bench.err" ||
      stamp "bench-generate $var FAILED: $(tail -2 "$OUT/bench.err")"
    python3 - "$OUT/fig10.jsonl" "$OUT/fig10-$name.jsonl" "$on" "$off" <<'PY' | tee -a "$OUT/summary.txt"
import json, sys
def rows(path):
    return {(r["seq"], r["method"]): r for r in map(json.loads, open(path)) if r.get("model") == "llama2-7b"}
default, switched = rows(sys.argv[1]), rows(sys.argv[2])
for key in sorted(switched):
    a, b = default.get(key, {}), switched[key]
    print(f"llama2-7b S={key[0]} {key[1]}: {a.get('tokens_per_s', 0):.1f} t/s with {sys.argv[3]} "
          f"(graphs {a.get('graphs_ms', 0):.2f} ms), {b['tokens_per_s']:.1f} with {sys.argv[4]} "
          f"(graphs {b.get('graphs_ms', 0):.2f} ms)")
PY
  }
  # The linear layers: the step's gemv kernel (cuda/step.h, the default) against cuBLAS.
  fig10_switch cublas SPARQLAB_CUDA_GEMV=0 "the gemv kernel" cuBLAS 4096,32768
  # Programmatic dependent launch (CUDA.md §3: our kernels of the step overlap the one before)
  # against plain launches.
  fig10_switch pdl-off SPARQLAB_CUDA_PDL=0 "overlapped launches" "plain launches" 4096
  [ -s "$OUT/fig10.jsonl" ] && python3 - "$OUT/fig10.jsonl" <<'PY' | tee -a "$OUT/summary.txt"
import json, sys
# Hugging Face transformers 5.17 with SDPA, 7B-shaped BF16 model, batch 1, on an H100 (CUDA.md §1).
hf = {4096: 15.9, 16384: 15.4, 32768: 13.2}
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
by = {(r["model"], r["seq"], r["method"]): r for r in rows}
print(f"{'model':10} {'S':>6} {'dense t/s':>10} {'limit':>8} {'of limit':>8} {'sparq t/s':>10} {'k':>6} {'sparq/dense':>11} {'vs HF':>7} {'graphs ms':>9} {'of copy':>7} {'host ms d/s':>11}  steps")
for (m, s, meth), r in sorted(by.items()):
    if meth != "dense":
        continue
    sp = by.get((m, s, "sparq"), {})
    ratio = sp.get("tokens_per_s", 0) / r["tokens_per_s"] if r["tokens_per_s"] else 0
    vs = f"{r['tokens_per_s'] / hf[s]:.1f}x" if m == "llama2-7b" and s in hf else "-"
    print(f"{m:10} {s:>6} {r['tokens_per_s']:>10.1f} {r['limit_tokens_per_s']:>8.1f} "
          f"{r['fraction_of_limit']:>8.2f} {sp.get('tokens_per_s', 0):>10.1f} {sp.get('k', 0):>6} "
          f"{ratio:>11.2f} {vs:>7} {r.get('graphs_ms', 0):>9.2f} "
          f"{r.get('graphs_gbps', 0) * 1e9 / (r['limit_tokens_per_s'] * r['bytes_per_step'] or 1):>7.2f} "
          f"{r.get('host_ms', 0):>5.2f}/{sp.get('host_ms', 0):<5.2f}  "
          f"{r.get('steps', '?')[:60]}/{sp.get('steps', '?')[:60]}")
PY
fi
# --- Nsight Compute on the kernels that decide the goals (CUDA.md §11) --------------------------
if has profile; then
  stamp "profile: scripts/gpu-profile.sh into $OUT/profile"
  SPARQLAB_GPU_BUILD=$BUILD OUT=$OUT/profile bash scripts/gpu-profile.sh \
    $([ -f /tmp/gpu-models/llama2-7b/config.json ] && echo --model /tmp/gpu-models/llama2-7b) \
    > /dev/null 2>&1
  stamp "profile: gpu-profile.sh exit $?"
  cat "$OUT/profile/summary.txt" >> "$OUT/summary.txt"
fi
# --- the lab on the GPU: the timing view's CPU and CUDA curves, offscreen ----------------------
if has lab; then
  if [ ! -f "$LIBDIR/libQt6Widgets.so.6" ]; then
    ls .gpu-gui-debs/*.deb > /dev/null 2>&1 || {
      stamp "no .gpu-gui-debs/*.deb: run scripts/gpu-debs.sh --gui here first and carry .gpu-gui-debs"
      exit 1; }
    for f in .gpu-gui-debs/*.deb; do
      dpkg-deb -x "$f" "$PREFIX" || { stamp "cannot unpack $f into $PREFIX"; exit 1; }
    done
    stamp "unpacked $(ls .gpu-gui-debs/*.deb | wc -l) GUI packages into $PREFIX"
  fi
  missing=$(ldd "$LIBDIR/libQt6Widgets.so.6" "$LIBDIR/libQCustomPlotQt6.so.2.1" \
    "$LIBDIR/qt6/plugins/platforms/libqoffscreen.so" 2>&1 | grep "not found" | sort -u)
  [ -n "$missing" ] && stamp "libraries the lab needs and neither the system nor .gpu-gui-debs has: $missing"
  # Fonts from the prefix (its fontconfig would read /etc/fonts, which may not be there).
  printf '<?xml version="1.0"?>\n<!DOCTYPE fontconfig SYSTEM "fonts.dtd">\n<fontconfig><dir>%s</dir><cachedir>/tmp/sparqlab-fontconfig</cachedir></fontconfig>\n' \
    "$PREFIX/usr/share/fonts" > "$PREFIX/fonts.conf"
  export FONTCONFIG_FILE=$PREFIX/fonts.conf QT_PLUGIN_PATH=$LIBDIR/qt6/plugins QT_QPA_PLATFORM=offscreen
  stamp "configure and build the lab"
  TORCH_PREFIX=$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')
  if ! { cmake -S . -B "$BUILD" -DSPARQLAB_GUI=ON -DCMAKE_PREFIX_PATH="$TORCH_PREFIX;$PREFIX/usr" \
      -DQt6_DIR="$LIBDIR/cmake/Qt6" && cmake --build "$BUILD" -j "$(nproc)" --target sparqlab; } \
      > "$OUT/lab-build.log" 2>&1; then
    stamp "lab build FAILED"
    grep -E -B2 -A6 "Error|error" "$OUT/lab-build.log" | head -40 | tee -a "$OUT/summary.txt"
    exit 1
  fi
  shot() { # name, model, then the lab's own arguments
    local name=$1 model=$2 size
    shift 2
    for size in 1920x1080 1280x800; do
      stamp "lab timing view, $name, $size"
      timeout 300 "$BUILD/app/sparqlab" --model "$model" --device cuda \
        --prompt-file tests/data/sotu_2012_excerpt.txt --view timing --size "$size" \
        --screenshot "$OUT/lab-timing-$name-$size.png" "$@" >> "$OUT/lab.log" 2>&1 ||
        stamp "lab $name $size FAILED: $(tail -2 "$OUT/lab.log")"
    done
  }
  shot demo demo --layer 3 --head 1 --r 8 --k 16
  # A random model has no tokenizer: the 1B-shaped one reads the prompt with the demo model's
  # (its ids are within the 1B model's vocabulary).
  if [ -f /tmp/gpu-models/llama-1b/config.json ]; then
    cp resources/demo-model/tokenizer.json /tmp/gpu-models/llama-1b/
    shot llama-1b /tmp/gpu-models/llama-1b --r 8 --k 64
  fi
fi
stamp "done"
