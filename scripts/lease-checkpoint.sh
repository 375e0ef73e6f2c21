# shellcheck shell=bash
# Sourced by the GPU scripts (gpu-model-check.sh, gpu-check.sh, gpu-profile.sh) after their OUT
# is made. A device run brings back only what lies under its own $OUT, and a run that the lease's
# remaining time cuts short is killed before the command's last line (a final tar) runs. Where
# SPARQLAB_LEASE_OUT names that folder, `checkpoint` (called at every stamp, and on exit) packs
# the results so far, those of the outermost script's OUT, into $SPARQLAB_LEASE_OUT/results.tgz,
# replaced whole: a cut-short run still brings back what its finished stages wrote. Nsight
# Compute's reports stay out (tens of MB each; their summaries are in the text), and so does any
# file over 8 MB (named in left-out.txt): what comes back is at most 16 MiB a file, so an archive
# that would pass 15 MB keeps only the files of 1 MB or less (the rest named too).
SPARQLAB_LEASE_PACK=${SPARQLAB_LEASE_PACK:-$(cd "$OUT" && pwd)}
: "${SPARQLAB_LEASE_PACK:?cannot find the results folder OUT}"
export SPARQLAB_LEASE_PACK
if [ -n "${SPARQLAB_LEASE_OUT:-}" ]; then
  mkdir -p "$SPARQLAB_LEASE_OUT" && SPARQLAB_LEASE_OUT=$(cd "$SPARQLAB_LEASE_OUT" && pwd)
  export SPARQLAB_LEASE_OUT
fi
lease_pack() { # largest size kept (find's -size), into partial.tgz; the rest into left-out.txt
  local keep=$1
  (cd "$SPARQLAB_LEASE_PACK" &&
    find . -type f ! -name '*.ncu-rep' ! -name left-out.txt ! -name partial.tgz \
      ! -name results.tgz ! -size "-$keep" | sort > left-out.txt &&
    find . -type f ! -name '*.ncu-rep' -size "-$keep" ! -name partial.tgz ! -name results.tgz |
    sort | tar -czf "$SPARQLAB_LEASE_OUT/partial.tgz" -T - 2> /dev/null)
}
checkpoint() {
  [ -n "${SPARQLAB_LEASE_OUT:-}" ] || return 0
  lease_pack 8193k || { rm -f "$SPARQLAB_LEASE_OUT/partial.tgz"; return 0; }
  if [ "$(stat -c %s "$SPARQLAB_LEASE_OUT/partial.tgz")" -gt 15000000 ]; then
    lease_pack 1025k || { rm -f "$SPARQLAB_LEASE_OUT/partial.tgz"; return 0; }
  fi
  mv -f "$SPARQLAB_LEASE_OUT/partial.tgz" "$SPARQLAB_LEASE_OUT/results.tgz"
}
trap checkpoint EXIT
trap 'exit 143' TERM # (timeout's signal: the exit runs the checkpoint above)
trap 'exit 130' INT
