#!/bin/bash
# Checks that the container image's runtime stage installs every shared
# library the given binaries need.
#
#   helm/tests/check_image_libs.sh [--dockerfile FILE] BINARY [BINARY...]
#
# For each binary, `ldd` lists the libraries it loads; `dpkg -S` maps each to
# its Debian package. A package is present in the image when it is
#   - in the Dockerfile's runtime list (the one line
#     `ARG CR_RUNTIME_PACKAGES="..."`), or a dependency of one (apt installs
#     Depends/Pre-Depends recursively), or
#   - in the base image debian:12-slim: the dependency closure of packages it
#     is known to contain (BASE_SEEDS below).
# Dependencies are read from this machine's dpkg database (it must be a Debian
# 12 machine with the binaries' libraries installed, as a build machine is),
# falling back to apt-cache for listed packages that are not installed here.
# Exit status: 0 all present, 1 something missing (listed), 2 usage error.
# Libraries loaded with dlopen() (libcuda from the NVIDIA runtime) are not
# seen by ldd and are not checked.
set -euo pipefail

repo=$(cd "$(dirname "$0")/../.." && pwd)
dockerfile=${CR_DOCKERFILE:-$repo/Dockerfile}

# Packages debian:12-slim (debootstrap --variant=minbase: Priority required,
# plus apt) certainly contains; their dependencies are in it too.
BASE_SEEDS="base-files base-passwd bash bsdutils coreutils dash debconf
debianutils diffutils dpkg findutils gcc-12-base grep gzip hostname
init-system-helpers libc-bin libc6 libgcc-s1 libstdc++6 login mawk mount
ncurses-base ncurses-bin passwd perl-base sed sysvinit-utils tar tzdata
util-linux apt"

usage() {
  echo "usage: $0 [--dockerfile FILE] BINARY [BINARY...]" >&2
  exit 2
}

bins=()
while [ $# -gt 0 ]; do
  case $1 in
    --dockerfile) [ $# -ge 2 ] || usage; dockerfile=$2; shift 2 ;;
    -h|--help) sed -n '2,22p' "$0"; exit 0 ;;
    --) shift; bins+=("$@"); break ;;
    -*) echo "unknown option $1" >&2; usage ;;
    *) bins+=("$1"); shift ;;
  esac
done
[ ${#bins[@]} -gt 0 ] || usage
[ -f "$dockerfile" ] || { echo "no Dockerfile at $dockerfile" >&2; exit 2; }
for t in ldd dpkg dpkg-query; do
  command -v "$t" >/dev/null || { echo "$t not found (a Debian machine is needed)" >&2; exit 2; }
done

# --- the runtime package list -------------------------------------------------
mapfile -t lines < <(grep -E '^[[:space:]]*ARG[[:space:]]+CR_RUNTIME_PACKAGES=' "$dockerfile" || true)
if [ ${#lines[@]} -ne 1 ]; then
  echo "$dockerfile: expected exactly one 'ARG CR_RUNTIME_PACKAGES=\"...\"' line, found ${#lines[@]}" >&2
  exit 2
fi
value=${lines[0]#*CR_RUNTIME_PACKAGES=}
value=${value%%#*}
value=${value//\"/}
value=${value//\'/}
read -r -a runtime_pkgs <<<"$value"
echo "runtime packages ($dockerfile): ${runtime_pkgs[*]:-(none)}"

# --- dependency closures --------------------------------------------------------
# The dpkg database, read once: installed packages and their dependencies.
declare -A is_installed=() depends_of=()
while IFS=$'\t' read -r pkg st deps; do
  pkg=${pkg%%:*}
  if [ "$st" = installed ]; then
    is_installed[$pkg]=1
    depends_of[$pkg]=$deps
  fi
done < <(dpkg-query -W -f='${Package}\t${db:Status-Status}\t${Pre-Depends}, ${Depends}\n')

installed() { [ -n "${is_installed[$1]:-}" ]; }

# Direct dependencies of an installed package, one name a line; of each
# alternative group, the first installed member.
deps_installed() {
  local group alt name
  local -a groups alts
  IFS=',' read -r -a groups <<<"${depends_of[$1]:-}"
  for group in "${groups[@]}"; do
    IFS='|' read -r -a alts <<<"$group"
    for alt in "${alts[@]}"; do
      name=${alt%%(*}
      name=${name//[[:space:]]/}
      name=${name%%:*}
      [ -n "$name" ] || continue
      if installed "$name"; then echo "$name"; break; fi
    done
  done
}

declare -A origin=()   # package -> why it is in the image (first reason wins)
declare -A visited=()
add_closure() {        # add_closure REASON PACKAGE...
  local reason=$1; shift
  local queue=("$@") p d
  while [ ${#queue[@]} -gt 0 ]; do
    p=${queue[0]}; queue=("${queue[@]:1}")
    [ -z "${visited[$p]:-}" ] || continue
    visited[$p]=1
    origin[$p]=${origin[$p]:-$reason}
    if installed "$p"; then
      while IFS= read -r d; do
        if [ -n "$d" ] && [ -z "${visited[$d]:-}" ]; then queue+=("$d"); fi
      done < <(deps_installed "$p")
    fi
  done
}

# A listed package that is not installed here: its closure from apt-cache.
add_closure_apt() {
  local reason=$1 p=$2 d
  if ! apt-cache show "$p" >/dev/null 2>&1; then
    echo "CR_RUNTIME_PACKAGES: unknown package '$p' (not installed here, unknown to apt-cache)" >&2
    return 1
  fi
  origin[$p]=${origin[$p]:-$reason}
  while IFS= read -r d; do
    if [ -n "$d" ]; then origin[$d]=${origin[$d]:-$reason}; fi
  done < <(apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts \
             --no-breaks --no-replaces --no-enhances "$p" 2>/dev/null |
           sed -nE 's/^[[:space:]|]*(Pre)?Depends: ([^<[:space:]]+).*/\2/p; s/^([a-z0-9][^[:space:]]*)$/\1/p' |
           sed 's/:[a-z0-9]*$//' | sort -u)
}

read -r -d '' -a seeds <<<"$BASE_SEEDS" || true
for s in "${seeds[@]}"; do
  add_closure "debian:12-slim" "$s"
done
bad_list=0
# A listed package is there because it is listed (unless the base has it).
for p in "${runtime_pkgs[@]}"; do
  origin[$p]=${origin[$p]:-runtime list ($p)}
done
for p in "${runtime_pkgs[@]}"; do
  if installed "$p"; then
    add_closure "runtime list ($p)" "$p"
  else
    add_closure_apt "runtime list ($p)" "$p" || bad_list=1
  fi
done

# --- the binaries' libraries ----------------------------------------------------
# Path candidates for a library: as ldd gives it, resolved, and both sides of
# the /usr merge (dpkg knows each file under one of them only).
candidates() {
  local path=$1 real c
  real=$(readlink -f "$path" 2>/dev/null || echo "$path")
  for c in "$path" "$real"; do
    echo "$c"
    case $c in
      /usr/*) echo "${c#/usr}" ;;
      *) echo "/usr$c" ;;
    esac
  done
}

declare -A owner=()    # path -> package, filled by one dpkg -S call
lookup_owners() {
  local line pkgs path
  while IFS= read -r line; do
    pkgs=${line%%: /*}
    path=/${line#*: /}
    pkgs=${pkgs%%,*}
    owner[$path]=${pkgs%%:*}
  done < <(dpkg -S "$@" 2>/dev/null | grep -E '^[^ ]+(, [^ ]+)*: /' || true)
}

owner_of() {           # owner_of PATH -> package, or nothing
  local c
  while IFS= read -r c; do
    if [ -n "${owner[$c]:-}" ]; then echo "${owner[$c]}"; return; fi
  done < <(candidates "$1")
}

declare -A ldd_out=()
for bin in "${bins[@]}"; do
  if [ ! -f "$bin" ]; then
    echo "no such binary: $bin" >&2
    exit 2
  fi
  ldd_out[$bin]=$(ldd "$bin" 2>&1) || ldd_out[$bin]="LDD-FAILED $(printf '%s' "${ldd_out[$bin]}")"
done
mapfile -t all_paths < <(
  for bin in "${bins[@]}"; do
    sed -nE 's/.*=> (\/[^ ]+) .*/\1/p; s/^[[:space:]]*(\/[^ ]+) \(0x.*/\1/p' <<<"${ldd_out[$bin]}"
  done | sort -u | while IFS= read -r p; do candidates "$p"; done | sort -u)
[ ${#all_paths[@]} -eq 0 ] || lookup_owners "${all_paths[@]}"

status=0
declare -A missing=()
declare -A used=()     # origins that satisfied a library
for bin in "${bins[@]}"; do
  echo "== $bin"
  out=${ldd_out[$bin]}
  if [[ $out == LDD-FAILED* ]]; then
    out=${out#LDD-FAILED }
    if grep -q 'not a dynamic executable' <<<"$out"; then
      echo "   static binary: nothing to check"
      continue
    fi
    echo "ldd $bin failed: $out" >&2
    exit 2
  fi
  while IFS= read -r line; do
    lib=$(awk '{print $1}' <<<"$line")
    case $line in
      *"not found"*)
        echo "   MISSING  $lib: not found on this machine either"
        status=1; continue ;;
      *"=>"*) path=$(sed -E 's/.*=> ([^ ]+) .*/\1/' <<<"$line") ;;
      *)
        case $lib in
          /*) path=$lib ;;      # the dynamic loader
          *) continue ;;        # linux-vdso.so.1
        esac ;;
    esac
    pkg=$(owner_of "$path")
    if [ -z "$pkg" ]; then
      echo "   MISSING  $lib ($path): no Debian package owns it (built locally? it will not be in the image)"
      status=1
    elif [ -n "${origin[$pkg]:-}" ]; then
      printf '   ok       %-32s %-22s %s\n' "$lib" "$pkg" "${origin[$pkg]}"
      used[${origin[$pkg]}]=1
    else
      printf '   MISSING  %-32s %-22s not installed by the runtime stage\n' "$lib" "$pkg"
      missing[$pkg]=1
      status=1
    fi
  done <<<"$out"
done

for p in "${runtime_pkgs[@]}"; do
  if [ -z "${used["runtime list ($p)"]:-}" ]; then
    echo "note: $p is listed but no checked binary needs it (needed by dlopen? else drop it)"
  fi
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "FAIL: add to CR_RUNTIME_PACKAGES in $dockerfile: $(printf '%s\n' "${!missing[@]}" | sort | tr '\n' ' ')"
fi
if [ "$bad_list" -ne 0 ]; then
  echo "FAIL: CR_RUNTIME_PACKAGES names unknown packages"
  status=1
fi
[ "$status" -eq 0 ] && echo "OK: the runtime stage installs every library the binaries need"
exit "$status"
