#!/usr/bin/env bash
# Installs what SparQ Lab needs on Debian 12 (only what is missing), and the Debian packages
# named as arguments (fuzz.sh: clang and libFuzzer). Used by run.sh, test.sh and fuzz.sh.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config ccache
  qt6-base-dev qt6-svg-dev libgl-dev
  libtorch-dev libopenblas0-pthread   # without OpenBLAS libtorch falls back to the reference BLAS
  libqcustomplot-dev libhdf5-dev libeigen3-dev nlohmann-json3-dev libpcre2-dev
  xvfb xauth
  wamerican   # the word lists of the RULER tasks (LONGCONTEXT.md §2)
  slurm-wlm munge   # test_slurm: a single-node Slurm for scripts/slurm-eval.sh
  "$@"
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: everything is installed"
  exit 0
fi

sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
echo "install-deps: installing ${missing[*]}"
$sudo apt-get update -q
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
