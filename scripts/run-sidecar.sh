#!/bin/sh
# Sets up cacheroute on a fresh Debian 12 machine (as root) and runs the
# sidecar in the foreground: gRPC on 0.0.0.0:50051 unless flags or
# CACHEROUTE_* variables say otherwise. Arguments go to the sidecar.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/setup.sh"
exec "$root/build/server/cacheroute-sidecar" "$@"
