#!/bin/sh
# helm lint --strict, helm template and Kubernetes schema validation (strict:
# unknown fields fail) of the chart with its default values, each values file
# in helm/cacheroute/ci/, and the all-options file in standalone and epp
# modes (epp without its endpoints, whose addresses are not all ip:port).
set -u
# shellcheck source=helm/tests/lib.sh
. "$(dirname "$0")/lib.sh"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

# name|helm arguments (values files relative to the chart)
cases="default|
$(for f in "$chart"/ci/*.yaml; do n=$(basename "$f" .yaml); printf '%s|-f %s\n' "$n" "$f"; done)
all-options-standalone|-f $chart/ci/all-options-values.yaml --set mode=standalone
all-options-epp|-f $chart/ci/all-options-values.yaml --set mode=epp --set endpoints.enabled=false"

echo "$cases" | while IFS='|' read -r name args; do
  [ -n "$name" ] || continue
  # shellcheck disable=SC2086
  if "$helm" lint --strict "$chart" $args >"$out/$name.lint" 2>&1; then
    pass "helm lint --strict ($name)"
  else
    fail "helm lint --strict ($name)"; cat "$out/$name.lint"
  fi
  # shellcheck disable=SC2086
  if "$helm" template cr "$chart" --namespace serving $args >"$out/$name.yaml" 2>"$out/$name.err"; then
    pass "helm template ($name)"
    if $validate --quiet "$out/$name.yaml" >"$out/$name.val" 2>&1; then
      pass "kubernetes schema validation, strict ($name): $(tail -n1 "$out/$name.val")"
    else
      fail "kubernetes schema validation ($name)"; cat "$out/$name.val"
    fi
  else
    fail "helm template ($name)"; cat "$out/$name.err"
  fi
  # The while loop runs in a subshell: pass the counts out through a file.
  echo "$passed $failed" >"$out/counts"
done
read -r passed failed <"$out/counts"
finish
