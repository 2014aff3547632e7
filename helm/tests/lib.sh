# Shared set-up for the chart check scripts (sourced, POSIX sh).
# Finds the repository, the chart and the tools scripts/helm-tools.sh installed.
repo=$(cd "$(dirname "$0")/../.." && pwd)
chart=$repo/helm/cacheroute
tools=${CR_TOOLS_DIR:-$repo/.tools}
helm=${CR_HELM:-$tools/bin/helm}
export CR_NODE_MODULES="${CR_NODE_MODULES:-$tools/npm/node_modules}"
validate="node $repo/helm/tests/validate.cjs"
if ! [ -x "$helm" ] || ! [ -d "$CR_NODE_MODULES/kubernetes-models" ]; then
  echo "helm or the validator packages are missing under $tools: run scripts/helm-tools.sh" >&2
  exit 2
fi
passed=0
failed=0
pass() { passed=$((passed + 1)); printf 'PASS %s\n' "$*"; }
fail() { failed=$((failed + 1)); printf 'FAIL %s\n' "$*"; }
finish() {
  printf '%d passed, %d failed\n' "$passed" "$failed"
  [ "$failed" -eq 0 ]
}

# The text after "# expect: " in a bad-input file.
expected_message() { sed -n 's/^# expect: //p' "$1" | head -n1; }

# reject LABEL EXPECT CMD...: CMD must exit 1 (a refusal, not a crash) and
# print EXPECT.
reject() {
  label=$1
  expect=$2
  shift 2
  out=$(mktemp)
  "$@" >"$out" 2>&1
  rc=$?
  if [ "$rc" -ne 1 ]; then
    fail "$label: exited $rc, expected 1"; cat "$out"
  elif grep -qF -- "$expect" "$out"; then
    pass "$label: rejected ($expect)"
  else
    fail "$label: rejected without '$expect':"; cat "$out"
  fi
  rm -f "$out"
}
