#!/bin/bash
# Self-test of check_image_libs.sh on binaries built here: a program linked
# with libcunit (libcunit1, in scripts/deps.txt) and one linked with a library
# no Debian package owns, against fake Dockerfiles. Proves the check finds a
# missing package, accepts a complete list, and reads the real Dockerfile.
set -u
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
check=$here/check_image_libs.sh
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
passed=0 failed=0
pass() { passed=$((passed + 1)); echo "PASS $*"; }
fail() { failed=$((failed + 1)); echo "FAIL $*"; }

# expect NAME RC PATTERN -- command...: the command exits RC and prints PATTERN.
expect() {
  local name=$1 want_rc=$2 pattern=$3; shift 4
  local out rc
  out=$("$@" 2>&1); rc=$?
  if [ "$rc" -ne "$want_rc" ]; then
    fail "$name: exit $rc, expected $want_rc"; printf '%s\n' "$out" | sed 's/^/    /'
  elif ! grep -qE -- "$pattern" <<<"$out"; then
    fail "$name: output lacks /$pattern/"; printf '%s\n' "$out" | sed 's/^/    /'
  else
    pass "$name"
  fi
}

dockerfile() {  # dockerfile FILE PACKAGES
  printf 'FROM debian:12-slim\n# runtime\nARG CR_RUNTIME_PACKAGES="%s"\nENTRYPOINT ["x"]\n' "$2" >"$1"
}

cc=${CC:-cc}
cat >"$tmp/uses_cunit.c" <<'C'
#include <CUnit/Basic.h>
int main(void) { if (CU_initialize_registry() != CUE_SUCCESS) return 1; CU_cleanup_registry(); return 0; }
C
cunit_flags=$(pkg-config --cflags --libs cunit 2>/dev/null || echo -lcunit)
# shellcheck disable=SC2086
if ! "$cc" -o "$tmp/uses_cunit" "$tmp/uses_cunit.c" $cunit_flags; then
  echo "cannot build the test binary (needs cc and libcunit1-dev)"; exit 1
fi
"$tmp/uses_cunit" || { echo "test binary does not run"; exit 1; }

printf 'int cr_local_lib(void) { return 42; }\n' >"$tmp/local.c"
printf 'int cr_local_lib(void);\nint main(void) { return cr_local_lib() == 42 ? 0 : 1; }\n' >"$tmp/uses_local.c"
if ! "$cc" -shared -fPIC -o "$tmp/libcrlocal.so" "$tmp/local.c" ||
   ! "$cc" -o "$tmp/uses_local" "$tmp/uses_local.c" -L"$tmp" -lcrlocal -Wl,-rpath,"$tmp"; then
  echo "cannot build the local-library test binary"; exit 1
fi

printf 'int main(void) { return 0; }\n' >"$tmp/static.c"
"$cc" -static -o "$tmp/static" "$tmp/static.c" || { echo "cannot build a static test binary"; exit 1; }

dockerfile "$tmp/complete" "libcunit1"
dockerfile "$tmp/incomplete" "libssl3 zlib1g"
dockerfile "$tmp/unknown" "libcunit1 libno-such-package-cr0"
printf 'FROM debian:12-slim\nRUN apt-get install -y libcunit1\n' >"$tmp/no-arg"
dockerfile "$tmp/two-args" "libcunit1"
echo 'ARG CR_RUNTIME_PACKAGES="libssl3"' >>"$tmp/two-args"

expect "complete list passes" 0 'ok +libcunit\.so\.1 +libcunit1 +runtime list \(libcunit1\)' -- \
  "$check" --dockerfile "$tmp/complete" "$tmp/uses_cunit"
expect "missing package fails and is named" 1 'FAIL: add to CR_RUNTIME_PACKAGES in .*: libcunit1' -- \
  "$check" --dockerfile "$tmp/incomplete" "$tmp/uses_cunit"
expect "unused listed package is noted" 1 'note: zlib1g is listed but no checked binary needs it' -- \
  "$check" --dockerfile "$tmp/incomplete" "$tmp/uses_cunit"
expect "libc comes from the base image" 0 'ok +libc\.so\.6 +libc6 +debian:12-slim' -- \
  "$check" --dockerfile "$tmp/complete" "$tmp/uses_cunit"
expect "unknown package in the list fails" 1 "unknown package 'libno-such-package-cr0'" -- \
  "$check" --dockerfile "$tmp/unknown" "$tmp/uses_cunit"
expect "library owned by no package fails" 1 'MISSING +libcrlocal\.so .*no Debian package owns it' -- \
  "$check" --dockerfile "$tmp/complete" "$tmp/uses_local"
expect "Dockerfile without the ARG line is a usage error" 2 'expected exactly one' -- \
  "$check" --dockerfile "$tmp/no-arg" "$tmp/uses_cunit"
expect "two ARG lines are a usage error" 2 'found 2' -- \
  "$check" --dockerfile "$tmp/two-args" "$tmp/uses_cunit"
expect "the real Dockerfile is parsed (and lacks libcunit1)" 1 \
  "runtime packages \($repo/Dockerfile\): [a-z0-9]+.*FAIL|FAIL: add to CR_RUNTIME_PACKAGES in $repo/Dockerfile: libcunit1" -- \
  "$check" "$tmp/uses_cunit"
expect "several binaries at once" 1 'libcunit1.*|no Debian package owns it' -- \
  "$check" --dockerfile "$tmp/complete" "$tmp/uses_cunit" "$tmp/uses_local"
expect "static binary needs nothing" 0 'static binary: nothing to check' -- \
  "$check" --dockerfile "$tmp/incomplete" "$tmp/static"
expect "missing binary is a usage error" 2 'no such binary' -- \
  "$check" --dockerfile "$tmp/complete" "$tmp/does-not-exist"
if [ -x /usr/bin/h2load ]; then  # a real third-party binary, when installed
  dockerfile "$tmp/h2load" "nghttp2-client"
  expect "h2load with its package passes" 0 'OK:' -- "$check" --dockerfile "$tmp/h2load" /usr/bin/h2load
  dockerfile "$tmp/h2load-short" "libnghttp2-14 libssl3"
  expect "h2load without libev4 fails" 1 'FAIL: add to CR_RUNTIME_PACKAGES .*libev4' -- \
    "$check" --dockerfile "$tmp/h2load-short" /usr/bin/h2load
fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
