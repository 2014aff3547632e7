#!/bin/sh
# The validator must reject broken manifests: each file in
# helm/tests/bad-manifests/ must fail validate.cjs with the message on its
# "# expect:" line (proves the schema check is not a no-op).
set -u
# shellcheck source=helm/tests/lib.sh
. "$(dirname "$0")/lib.sh"
for f in "$repo"/helm/tests/bad-manifests/*.yaml; do
  name=$(basename "$f" .yaml)
  expect=$(expected_message "$f")
  [ -n "$expect" ] || { fail "$name: no '# expect:' line"; continue; }
  # shellcheck disable=SC2086 # $validate is "node script"
  reject "$name: validate" "$expect" $validate "$f"
done
finish
