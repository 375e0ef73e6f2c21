#!/bin/bash
# The SASS of one CUDA kernel with its source lines, on a machine without a GPU: CUDA 13's nvcc
# here ships neither cuobjdump nor nvdisasm, so this fetches once the nvdisasm of Debian's
# non-free nvidia-cuda-toolkit 11.8 (into ~/.cache/sparqlab; it knows sm_90) and rewrites the
# cubin's ELF header to the ABI that version reads (the code itself is unchanged).
#
# usage: scripts/sass.sh [--spills] KERNEL-NAME-PART [FILE.cu]
#   FILE.cu defaults to attention/cuda/kernels_f16.cu; the first kernel whose mangled name holds
#   KERNEL-NAME-PART (e.g. selectKernelI6__halfLi16ELi1E) is printed; --spills prints only its
#   local-memory stores and loads (STL/LDL: what ptxas spilled), each with its source line.
# Reading it: docs/design/CUDA.md §2.2 ("Blocks an SM") is an example of what it decided.
set -euo pipefail
spills=0
if [ "${1:-}" = "--spills" ]; then
  spills=1
  shift
fi
[ $# -ge 1 ] || { sed -n '6,10p' "$0"; exit 2; }
name=$1
src=${2:-attention/cuda/kernels_f16.cu}
root=$(cd "$(dirname "$0")/.." && pwd)
nvcc=${CUDACXX:-/usr/local/cuda/bin/nvcc}
cache=${XDG_CACHE_HOME:-$HOME/.cache}/sparqlab/cuda-11.8
dis=$cache/usr/bin/nvdisasm
if [ ! -x "$dis" ]; then
  mkdir -p "$cache"
  mirror=http://deb.debian.org/debian
  deb=$(curl -fsS "$mirror/dists/bookworm/non-free/binary-amd64/Packages.xz" | xz -dc |
    awk '/^Package: /{p=$2} /^Filename: /{if (p == "nvidia-cuda-toolkit") print $2}')
  [ -n "$deb" ] || { echo "sass.sh: nvidia-cuda-toolkit not found in Debian's non-free index" >&2; exit 1; }
  curl -fsS -o "$cache/toolkit.deb" "$mirror/$deb"
  dpkg-deb -x "$cache/toolkit.deb" "$cache/x"
  mkdir -p "$cache/usr/bin"
  mv "$cache/x/usr/bin/nvdisasm" "$dis"
  rm -rf "$cache/x" "$cache/toolkit.deb"
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$nvcc" -I"$root" -O3 -DNDEBUG -lineinfo --generate-code=arch=compute_90a,code=[sm_90a] \
  -std=c++17 -x cu -cubin "$root/$src" -o "$work/k.cubin"
python3 - "$work/k.cubin" <<'PY'
import struct, sys
d = bytearray(open(sys.argv[1], "rb").read())
d[7], d[8] = 0x33, 7                        # EI_OSABI, EI_ABIVERSION of the older CUDA ELF ABI
struct.pack_into("<I", d, 0x30, 0x005A055A)  # e_flags: sm_90, virtual sm_90, 64-bit, unified
open(sys.argv[1], "wb").write(d)
PY
"$dis" -g -c "$work/k.cubin" > "$work/all.sass"
python3 - "$work/all.sass" "$name" "$spills" <<'PY'
import re, sys
text, name, spills = open(sys.argv[1]).read(), sys.argv[2], sys.argv[3] == "1"
for part in re.split(r"(?m)^//-+ \.text\.", text)[1:]:
    if name not in part.split()[0]:
        continue
    print("//", part.split()[0])
    where = ""
    for line in part.splitlines():
        m = re.search(r'//## File "([^"]+)", line (\d+)', line)
        if m:
            where = f"{m.group(1).split('/')[-1]}:{m.group(2)}"
        if not spills:
            print(line)
        elif re.search(r"\b(STL|LDL)\b", line):
            print(f"{where:28} {line.strip()}")
    sys.exit(0)
sys.exit(f"sass.sh: no kernel whose name holds {name}")
PY
