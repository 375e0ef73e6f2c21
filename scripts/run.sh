#!/usr/bin/env bash
# Installs what is missing, builds SparQ Lab (Release) and starts the app.
# Without a display (a server, CI) it renders the window to sparqlab.png instead.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh
cmake --preset release -DSPARQLAB_BUILD_TESTS=OFF
cmake --build --preset release

app=build/release/app/sparqlab
if [ -n "${DISPLAY:-}" ] || [ -n "${WAYLAND_DISPLAY:-}" ]; then
  exec "$app" "$@"
fi
echo "run.sh: no display; rendering the window to sparqlab.png"
QT_QPA_PLATFORM=offscreen "$app" --screenshot sparqlab.png "$@"
