#!/bin/sh
# Values that must be rejected: each file in helm/tests/bad-values/ must make
# `helm template` fail with the message on its "# expect:" line, and, unless
# it says "# fails: template" (a template fail(), which helm lint only logs),
# `helm lint --strict` too.
set -u
# shellcheck source=helm/tests/lib.sh
. "$(dirname "$0")/lib.sh"
for f in "$repo"/helm/tests/bad-values/*.yaml; do
  name=$(basename "$f" .yaml)
  expect=$(expected_message "$f")
  [ -n "$expect" ] || { fail "$name: no '# expect:' line"; continue; }
  reject "$name: helm template" "$expect" "$helm" template cr "$chart" -f "$f"
  grep -q '^# fails: template' "$f" ||
    reject "$name: helm lint --strict" "$expect" "$helm" lint --strict "$chart" -f "$f"
done
finish
