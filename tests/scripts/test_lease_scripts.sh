#!/usr/bin/env bash
# The GPU lease's scripts on a machine without a GPU (docs/gpu.md, "What the next lease should
# run"): a lease is 15 minutes, so a script that does not parse, or a run cut short that brings
# nothing back, costs one. Checks that every script under scripts/ parses, and that the scripts a
# lease runs pack their results so far into SPARQLAB_LEASE_OUT at a stage that ends them here
# (scripts/lease-checkpoint.sh): gpu-profile.sh without Nsight Compute, gpu-model-check.sh without
# its carried packages — each in a copy of the scripts, so that this checkout's own .gpu-debs, if
# any, is not unpacked.
set -uo pipefail
unset SPARQLAB_LEASE_OUT SPARQLAB_LEASE_PACK # this test's runs set their own
src=$(cd "$(dirname "$0")/../.." && pwd)
fail=0
no() { echo "FAIL: $*"; fail=1; }

for f in "$src"/scripts/*.sh; do
  bash -n "$f" 2> /dev/null || no "$(basename "$f") does not parse: $(bash -n "$f" 2>&1 | head -1)"
done

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/repo/scripts"
cp "$src"/scripts/gpu-*.sh "$src"/scripts/lease-checkpoint.sh "$work/repo/scripts/"

# results.tgz of a run: its files and the stamped line it must hold.
expect() { # label, lease folder, a file the archive must hold, what its summary must hold (ERE)
  local label=$1 lease=$2 file=$3 text=$4
  if [ ! -s "$lease/results.tgz" ]; then
    no "$label: no results.tgz in SPARQLAB_LEASE_OUT ($(ls "$lease" | tr '\n' ' '))"
    return
  fi
  # (Listings are read whole first: under pipefail a grep -q that stops early would make tar's
  # SIGPIPE the pipeline's status.)
  local list summary
  list=$(tar -tzf "$lease/results.tgz")
  summary=$(tar -xzOf "$lease/results.tgz" ./summary.txt)
  grep -qx "./$file" <<< "$list" || no "$label: results.tgz lacks $file"
  grep -qE "$text" <<< "$summary" ||
    no "$label: the packed summary.txt lacks \"$text\""
  [ ! -e "$lease/partial.tgz" ] || no "$label: partial.tgz left beside results.tgz"
  echo "PASS: $label packed $(grep -vc '/$' <<< "$list") files"
}

# gpu-profile.sh ends at once: without Nsight Compute, or (where it is installed) without the
# build the copy lacks.
mkdir -p "$work/lease1"
OUT="$work/r1/m" SPARQLAB_LEASE_OUT="$work/lease1" \
  bash "$work/repo/scripts/gpu-profile.sh" > "$work/profile.log" 2>&1
expect "gpu-profile.sh, nothing to profile" "$work/lease1" summary.txt \
  "nothing profiled|build first"

# gpu-model-check.sh: its first stage needs .gpu-debs, which the copy lacks; a results folder
# below OUT written before (a stage's log) is packed too, a file over 8 MB only named.
mkdir -p "$work/lease2" "$work/r2/m/kernels"
echo "a stage's log" > "$work/r2/m/kernels/test.log"
head -c 9000000 /dev/zero > "$work/r2/m/kernels/sanitizer.log"
OUT="$work/r2/m" SPARQLAB_LEASE_OUT="$work/lease2" SPARQLAB_DEBS_PREFIX="$work/no-debs" \
  bash "$work/repo/scripts/gpu-model-check.sh" build > "$work/model.log" 2>&1
expect "gpu-model-check.sh without .gpu-debs" "$work/lease2" kernels/test.log "no .gpu-debs"
if [ -s "$work/lease2/results.tgz" ]; then
  list=$(tar -tzf "$work/lease2/results.tgz")
  ! grep -q sanitizer.log <<< "$list" ||
    no "a 9 MB log was packed (the archive must stay under the 16 MiB that come back)"
  grep -qx "./kernels/sanitizer.log" <<< "$(tar -xzOf "$work/lease2/results.tgz" ./left-out.txt)" ||
    no "left-out.txt does not name the 9 MB log"
fi

# Without SPARQLAB_LEASE_OUT nothing is packed anywhere.
OUT="$work/r3/m" bash "$work/repo/scripts/gpu-profile.sh" > /dev/null 2>&1
[ -z "$(find "$work/r3" -name '*.tgz' -o -name left-out.txt)" ] ||
  no "a run without SPARQLAB_LEASE_OUT packed an archive"

# A run killed between two stamps (the lease's time spent) still packs what it wrote since the
# last one, on its way out; and results that would pass 15 MB in all keep the files of 1 MB or
# less, the rest named.
mkdir -p "$work/lease4" "$work/r4/m"
for i in 1 2 3; do head -c 7000000 /dev/urandom > "$work/r4/m/big$i.log"; done
cat > "$work/repo/killed.sh" <<'SH'
cd "$(dirname "$0")" && . scripts/lease-checkpoint.sh
echo "written after the last stamp" > "$OUT/late.txt"
sleep 60 > /dev/null 2>&1 &
echo $! > "$OUT/../sleep.pid"
wait $! # (a wait, unlike a command in the foreground, ends at the signal)
SH
OUT="$work/r4/m" SPARQLAB_LEASE_OUT="$work/lease4" bash "$work/repo/killed.sh" &
killed=$!
for _ in $(seq 300); do [ -f "$work/r4/m/late.txt" ] && break; sleep 0.1; done
kill -TERM "$killed"
wait "$killed"
kill "$(cat "$work/r4/sleep.pid")" 2> /dev/null
if [ -s "$work/lease4/results.tgz" ]; then
  list=$(tar -tzf "$work/lease4/results.tgz")
  grep -qx ./late.txt <<< "$list" ||
    no "a run killed after its last stamp lost what it wrote since"
  ! grep -q big <<< "$list" ||
    no "21 MB of logs packed: the archive would not come back"
  [ "$(tar -xzOf "$work/lease4/results.tgz" ./left-out.txt | grep -c big)" = 3 ] ||
    no "left-out.txt does not name the three 7 MB logs"
else
  no "a run killed between stamps brought back no results.tgz"
fi

exit $fail
