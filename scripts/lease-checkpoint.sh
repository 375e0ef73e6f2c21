# shellcheck shell=bash
# Sourced by the GPU scripts (gpu-model-check.sh, gpu-check.sh, gpu-profile.sh) after their OUT
# is set. A device run brings back only what lies under its own $OUT, and a run that the lease's
# remaining time cuts short is killed before the command's last line (a final tar) runs. Where
# SPARQLAB_LEASE_OUT names that folder, `checkpoint` (called at every stamp) packs the results so
# far, those of the outermost script's OUT, into $SPARQLAB_LEASE_OUT/results.tgz, replaced whole:
# a cut-short run still brings back what its finished stages wrote. Nsight Compute's reports stay
# out (tens of MB each); their summaries are in the text.
SPARQLAB_LEASE_PACK=${SPARQLAB_LEASE_PACK:-$(cd "$OUT" && pwd)}
export SPARQLAB_LEASE_PACK
checkpoint() {
  [ -n "${SPARQLAB_LEASE_OUT:-}" ] || return 0
  # A file over 8 MB (a sanitizer's log gone wild) would take the archive past the 16 MiB that
  # comes back: such files are named in left-out.txt instead.
  (cd "$SPARQLAB_LEASE_PACK" && find . -type f -size +8M ! -name '*.ncu-rep' > left-out.txt &&
    find . -type f ! -name '*.ncu-rep' -size -8193k | sort |
    tar -czf "$SPARQLAB_LEASE_OUT/partial.tgz" -T - 2> /dev/null) &&
    mv -f "$SPARQLAB_LEASE_OUT/partial.tgz" "$SPARQLAB_LEASE_OUT/results.tgz"
}
