#!/bin/sh
# Sets up cacheroute on a fresh Debian 12 machine as root: installs the Debian
# packages and builds a release into build/.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
"$root/scripts/install-deps.sh"
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DBUILD_TESTING=OFF
cmake --build build -j "$(nproc)"
