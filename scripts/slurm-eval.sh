#!/usr/bin/env bash
# Runs a `sparqlab-cli eval` study as a Slurm array of `--shard i/n` jobs and merges their
# outputs into one results file in the order the unsharded run writes (example by example).
#
#   scripts/slurm-eval.sh --shards N --out OUT.jsonl [--cli PATH] [--wait] [--sbatch "OPTS"] \
#       -- EVAL_ARGS...        (everything `sparqlab-cli eval` takes but --out, --shard and
#                               --resume, which each shard is given)
#
# Shard i writes OUT.shard-i-of-N.jsonl with --resume, so running the same command again after
# a job was cancelled (scancel) or failed picks each shard up where it stopped. The merge runs
# as a job after the array (afterok) or, with --wait, here once the array is done. Job logs go
# beside OUT (OUT.slurm-<job>_<task>.log).
set -euo pipefail
shards=0 out="" cli="sparqlab-cli" wait=0 extra=""
while [ $# -gt 0 ]; do
  case "$1" in
    --shards) shards=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --cli) cli=$2; shift 2 ;;
    --wait) wait=1; shift ;;
    --sbatch) extra=$2; shift 2 ;;
    --) shift; break ;;
    *) echo "slurm-eval: unknown option $1 (see the header of $0)" >&2; exit 2 ;;
  esac
done
[ "$shards" -ge 1 ] 2>/dev/null || { echo "slurm-eval: --shards N needs N >= 1" >&2; exit 2; }
[ -n "$out" ] || { echo "slurm-eval: --out OUT.jsonl is required" >&2; exit 2; }
[ $# -gt 0 ] || { echo "slurm-eval: give the eval options after --" >&2; exit 2; }
command -v sbatch >/dev/null || { echo "slurm-eval: no sbatch on this machine" >&2; exit 2; }
out=$(realpath -m "$out")
cli=$(command -v "$cli" || realpath -m "$cli")
dir=$(dirname "$out")
mkdir -p "$dir"

# The array job: one shard per task, resumable.
job="$out.array.sh"
{
  echo "#!/usr/bin/env bash"
  echo "set -euo pipefail"
  printf 'prefix=%q\n' "$out.shard-"
  printf 'exec %q eval' "$cli"
  printf ' %q' "$@"
  printf ' --shard "${SLURM_ARRAY_TASK_ID}/%d" --resume' "$shards"
  printf ' --out "${prefix}${SLURM_ARRAY_TASK_ID}-of-%d.jsonl"\n' "$shards"
} > "$job.tmp"
mv "$job.tmp" "$job"
chmod +x "$job"

# The merge: shard files taken example group by example group, round-robin (example e of the
# study is in shard e mod N), which is the unsharded run's order.
merge="$out.merge.sh"
{
  echo "#!/usr/bin/env bash"
  echo "set -euo pipefail"
  printf 'files=('
  for ((i = 0; i < shards; i++)); do printf ' %q' "$out.shard-$i-of-$shards.jsonl"; done
  echo ' )'
  cat <<'AWK'
for f in "${files[@]}"; do [ -f "$f" ] || { echo "slurm-eval: $f is missing (a shard did not finish)" >&2; exit 1; }; done
awk 'BEGIN { for (i = 1; i < ARGC; i++) idx[ARGV[i]] = i; nf = ARGC - 1 }
     { f = idx[FILENAME]
       id = $0; sub(/^.*"example":"/, "", id); sub(/".*$/, "", id)
       if (!(f in last) || id != last[f]) { g[f]++; last[f] = id }
       group[f, g[f]] = group[f, g[f]] $0 "\n" }
     END { for (k = 1; ; k++) { any = 0
             for (i = 1; i <= nf; i++) if (k <= g[i]) { printf "%s", group[i, k]; any = 1 }
             if (!any) break } }' "${files[@]}" > "$OUT.tmp"
mv "$OUT.tmp" "$OUT"
echo "slurm-eval: merged ${#files[@]} shards into $OUT ($(wc -l < "$OUT") lines)"
AWK
} > "$merge"
chmod +x "$merge"

logs="$out.slurm-%A_%a.log"
array=$(sbatch --parsable $extra --array=0-$((shards - 1)) --job-name=sparqlab-eval \
  --output="$logs" "$job")
echo "slurm-eval: array job $array (shards 0-$((shards - 1))), results $out.shard-*-of-$shards.jsonl"
if [ "$wait" -eq 1 ]; then
  # Wait for the array (a job that ends early does not stop the others), then merge here.
  while squeue -h -j "$array" 2>/dev/null | grep -q .; do sleep 1; done
  OUT="$out" "$merge"
else
  merged=$(sbatch --parsable $extra --dependency=afterok:"$array" --job-name=sparqlab-merge \
    --output="$out.slurm-merge-%j.log" --export=ALL,OUT="$out" "$merge")
  echo "slurm-eval: merge job $merged writes $out when every shard is done"
fi
