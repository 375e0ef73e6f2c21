#!/usr/bin/env bash
# Run here (a machine that reaches Debian's registry), before a device run: fetches the Debian 12
# packages the GPU machine lacks for the model runtime and its tests (GPU.md §2: no Qt, no PCRE2
# headers there) into .gpu-debs/ (ignored by git). Name .gpu-debs in the device run's `carry`;
# scripts/gpu-model-check.sh unpacks them into a prefix there (17 MB, README "With PyTorch").
#
#   bash scripts/gpu-debs.sh
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .gpu-debs
cd .gpu-debs
# Qt 6 Core and Test with moc, and what libQt6Core needs that Ubuntu 24.04 does not have (ICU 72,
# double-conversion, libb2), qmake (Qt6CoreTools checks that it exists); the PCRE2 headers and libraries; GLib (unpacked only where missing).
packages=(libqt6core6 libqt6test6 qt6-base-dev qt6-base-dev-tools libicu72 libdouble-conversion3
  libb2-1 libpcre2-dev libpcre2-8-0 libpcre2-16-0 libpcre2-32-0 libpcre2-posix3 libglib2.0-0 qmake6
  qmake6-bin)
rm -f ./*.deb
# (apt-get warns that root downloads unsandboxed: that line is dropped, a failure is not.)
apt-get download "${packages[@]}" 2> >(grep -v "^W: Download is performed unsandboxed" >&2)
for p in "${packages[@]}"; do
  ls "./${p}_"*.deb > /dev/null 2>&1 || { echo "gpu-debs: $p was not downloaded" >&2; exit 1; }
done
du -sh . | sed 's/\t.*/ in .gpu-debs/'
