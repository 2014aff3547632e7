#!/bin/sh
# Values that must be rejected: each file in helm/tests/bad-values/ must make
# `helm template` fail with the message on its "# expect:" line, and, unless
# it says "# fails: template" (a template fail(), which helm lint only logs),
# `helm lint --strict` too.
set -u
# shellcheck source=helm/tests/lib.sh
. "$(dirname "$0")/lib.sh"
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for f in "$repo"/helm/tests/bad-values/*.yaml; do
  name=$(basename "$f" .yaml)
  expect=$(sed -n 's/^# expect: //p' "$f" | head -n1)
  [ -n "$expect" ] || { fail "$name: no '# expect:' line"; continue; }
  if "$helm" template cr "$chart" -f "$f" >/dev/null 2>"$out"; then
    fail "$name: helm template accepted it"
  elif grep -qF -- "$expect" "$out"; then
    pass "$name: helm template rejects it ($expect)"
  else
    fail "$name: helm template failed without '$expect':"; cat "$out"
  fi
  if grep -q '^# fails: template' "$f"; then
    continue
  fi
  if "$helm" lint --strict "$chart" -f "$f" >"$out" 2>&1; then
    fail "$name: helm lint --strict accepted it"; cat "$out"
  elif grep -qF -- "$expect" "$out"; then
    pass "$name: helm lint --strict rejects it"
  else
    fail "$name: helm lint --strict failed without '$expect':"; cat "$out"
  fi
done
finish
