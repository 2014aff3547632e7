#!/bin/sh
# Installs the Debian 12 packages listed in the given files (default:
# scripts/deps.txt), as root. Does nothing when all are installed.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
[ $# -gt 0 ] || set -- "$here/deps.txt"
pkgs=$(cat "$@" | grep -v '^#' | tr '\n' ' ')
missing=""
for p in $pkgs; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q --no-install-recommends $missing
