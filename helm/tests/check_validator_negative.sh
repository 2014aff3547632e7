#!/bin/sh
# The validator must reject broken manifests: each file in
# helm/tests/bad-manifests/ must fail validate.cjs with the message on its
# "# expect:" line (proves the schema check is not a no-op).
set -u
# shellcheck source=helm/tests/lib.sh
. "$(dirname "$0")/lib.sh"
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for f in "$repo"/helm/tests/bad-manifests/*.yaml; do
  name=$(basename "$f" .yaml)
  expect=$(sed -n 's/^# expect: //p' "$f" | head -n1)
  [ -n "$expect" ] || { fail "$name: no '# expect:' line"; continue; }
  $validate "$f" >"$out" 2>&1
  rc=$?
  if [ "$rc" -ne 1 ]; then
    fail "$name: validate exited $rc, expected 1"; cat "$out"
  elif grep -qF -- "$expect" "$out"; then
    pass "$name: rejected ($expect)"
  else
    fail "$name: rejected without '$expect':"; cat "$out"
  fi
done
finish
