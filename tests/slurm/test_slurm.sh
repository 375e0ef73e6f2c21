#!/usr/bin/env bash
# A study through a real scheduler (issue 37): a single-node Slurm on this machine
# (scripts/slurm-local.sh), a small RULER study on the demo model run unsharded and as a 4-shard
# array (scripts/slurm-eval.sh): the merged file equals the unsharded one byte for byte; then the
# array is cancelled mid-way (scancel) and the same command resumes it to the same bytes.
# Skips (77) where Slurm cannot run: not root, or slurm-wlm / munge not installed.
#
#   tests/slurm/test_slurm.sh PATH/TO/sparqlab-cli
set -euo pipefail
cli=$(realpath "$1")
root=$(cd "$(dirname "$0")/../.." && pwd)
[ "$(id -u)" -eq 0 ] || { echo "test_slurm: skipped (needs root to start munged and slurmd)"; exit 77; }
for b in munged slurmctld slurmd sbatch scancel; do
  command -v "$b" >/dev/null || { echo "test_slurm: skipped (no $b: apt-get install slurm-wlm munge)"; exit 77; }
done
work=$(mktemp -d)
chmod 755 "$work" # munged runs as the munge user
trap '"$root/scripts/slurm-local.sh" stop "$work/cluster" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
"$root/scripts/slurm-local.sh" start "$work/cluster"
export SLURM_CONF="$work/cluster/slurm.conf"

args=(--model demo --task niah_single_1 --samples 6 --length 512,1024 --methods dense,sparq
      --r 16 --k 64)
t0=$(date +%s.%N)
"$cli" eval "${args[@]}" --out "$work/one.jsonl"
t1=$(date +%s.%N)
"$root/scripts/slurm-eval.sh" --shards 4 --out "$work/four.jsonl" --cli "$cli" --wait -- "${args[@]}"
t2=$(date +%s.%N)
cmp "$work/one.jsonl" "$work/four.jsonl" || { echo "test_slurm: the merged file differs from the unsharded run"; exit 1; }
echo "test_slurm: 4 shards merged equal the unsharded run ($(wc -l < "$work/one.jsonl") lines);" \
  "wall-clock 1 process $(awk "BEGIN { printf \"%.1f\", $t1 - $t0 }") s, 4-shard array $(awk "BEGIN { printf \"%.1f\", $t2 - $t1 }") s"

# Cancelled mid-way, then resumed by running the same command again.
"$root/scripts/slurm-eval.sh" --shards 4 --out "$work/again.jsonl" --cli "$cli" --wait -- "${args[@]}" \
  > "$work/first.log" 2>&1 &
runner=$!
for _ in $(seq 300); do # until some shard has written a line
  if cat "$work"/again.jsonl.shard-*-of-4.jsonl.partial 2>/dev/null | grep -q .; then break; fi
  sleep 0.1
done
job=$(squeue -h -o %F -n sparqlab-eval | head -1)
[ -n "$job" ] || { echo "test_slurm: the array ended before it could be cancelled"; exit 1; }
scancel "$job"
wait "$runner" || true # its merge finds shards missing
partial=$(cat "$work"/again.jsonl.shard-*-of-4.jsonl.partial 2>/dev/null | wc -l)
echo "test_slurm: cancelled job $job with $partial lines written"
"$root/scripts/slurm-eval.sh" --shards 4 --out "$work/again.jsonl" --cli "$cli" --wait -- "${args[@]}"
cmp "$work/one.jsonl" "$work/again.jsonl" || { echo "test_slurm: the resumed study differs"; exit 1; }
# At least one shard took up the lines written before the cancel.
grep -h "already there" "$work"/again.jsonl.slurm-*.log | grep -qv "(0 already there)" ||
  { echo "test_slurm: no shard resumed from its partial file"; exit 1; }
echo "test_slurm: cancelled and resumed, the merged file equals the unsharded run"
