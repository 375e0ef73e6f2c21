#!/usr/bin/env bash
# Run here (a machine that reaches Debian's registry), before a device run: fetches the Debian 12
# packages the GPU machine lacks for the model runtime and its tests (CUDA.md §1: no Qt, no PCRE2
# headers there) into .gpu-debs/ (ignored by git). Name .gpu-debs in the device run's `carry`;
# scripts/gpu-model-check.sh unpacks them into a prefix there (17 MB, README "With PyTorch").
# With --gui: the further packages the lab needs (Qt Widgets, Gui with its offscreen platform,
# Svg, Concurrent, PrintSupport, QCustomPlot, the OpenGL headers Qt's CMake files ask for,
# fontconfig and a font) into .gpu-gui-debs/ (13 MB), for the `lab` stage of gpu-model-check.sh
# in a call of their own (the tracked files and both folders would pass the 64 MiB a call carries).
#
#   bash scripts/gpu-debs.sh         # .gpu-debs/
#   bash scripts/gpu-debs.sh --gui   # .gpu-gui-debs/
set -euo pipefail
cd "$(dirname "$0")/.."
dir=.gpu-debs
[ "${1:-}" = --gui ] && dir=.gpu-gui-debs
mkdir -p "$dir"
cd "$dir"
# Qt 6 Core and Test with moc, and what libQt6Core needs that Ubuntu 24.04 does not have (ICU 72,
# double-conversion, libb2), qmake (Qt6CoreTools checks that it exists); the PCRE2 headers and libraries; GLib (unpacked only where missing).
packages=(libqt6core6 libqt6test6 qt6-base-dev qt6-base-dev-tools libicu72 libdouble-conversion3
  libb2-1 libpcre2-dev libpcre2-8-0 libpcre2-16-0 libpcre2-32-0 libpcre2-posix3 libglib2.0-0 qmake6
  qmake6-bin)
if [ "$dir" = .gpu-gui-debs ]; then
  packages=(libqt6gui6 libqt6widgets6 libqt6dbus6 libqt6printsupport6 libqt6svg6 qt6-svg-dev
    libqt6concurrent6 libqcustomplot2.1-qt6 libqcustomplot-dev libegl1 libgl1 libglx0 libopengl0
    libglvnd0 libgl-dev libglx-dev libopengl-dev libegl-dev libx11-6 libx11-data libxcb1 libxau6
    libxdmcp6 libbsd0 libmd0 libxkbcommon0 libxkbcommon-dev libfontconfig1 fontconfig-config
    fonts-dejavu-core libfreetype6 libbrotli1 libharfbuzz0b libgraphite2-3 libpng16-16 libmd4c0
    libdbus-1-3 libexpat1)
fi
rm -f ./*.deb
# (apt-get warns that root downloads unsandboxed: that line is dropped, a failure is not.)
apt-get download "${packages[@]}" 2> >(grep -v "^W: Download is performed unsandboxed" >&2)
for p in "${packages[@]}"; do
  ls "./${p}_"*.deb > /dev/null 2>&1 || { echo "gpu-debs: $p was not downloaded" >&2; exit 1; }
done
du -sh . | sed "s/\t.*/ in $dir/"
