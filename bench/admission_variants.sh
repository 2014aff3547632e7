#!/bin/bash
# The door's settings against each other (issue 33): cacheroute-door at
# 0.7x and 1.5x of the capacities bench/admission.sh measured
# (OUT/capacity.tsv), one run per variant, each variant the environment
# cacheroute-admission reads (CR_ADMIT_BUDGET_MS, CR_ADMIT_PRESSURE,
# CR_ADMIT_PRESSURE_OFF, CR_ADMIT_PRESSURE_TAU_S, CR_ADMIT_SHED, CR_ADMIT_MEET_SLO; "default"
# sets none). Prints a markdown table:
# per workload, load and variant, the interactive attainment (and of the
# reachable), the batch held / dropped / shed shares, the heavy tenant's
# share of the batch work served against its max-min fair share over the
# run, its share of the held work dispatched against its fair share of
# that, and whether the door's routes equal cacheroute's without a door
# (the replay's routes hash).
#
# usage: bench/admission_variants.sh BUILD OUT [WORKLOADS] [VARIANTS]
#   VARIANTS  ';'-separated, each 'default' or space-separated VAR=value
#   e.g. bench/admission_variants.sh build /tmp/adm conv,docs \
#          'default;CR_ADMIT_PRESSURE=0;CR_ADMIT_BUDGET_MS=250'
set -eu
BUILD=${1:?usage: admission_variants.sh BUILD OUT [WORKLOADS] [VARIANTS]}
OUT=${2:?usage: admission_variants.sh BUILD OUT [WORKLOADS] [VARIANTS]}
WORKLOADS=${3:-conv,syn,zipf,docs}
VARIANTS=${4:-default;CR_ADMIT_PRESSURE=0;CR_ADMIT_PRESSURE=0.05 CR_ADMIT_PRESSURE_TAU_S=5;CR_ADMIT_PRESSURE_OFF=0.15;CR_ADMIT_PRESSURE_TAU_S=300 CR_ADMIT_PRESSURE=0.1 CR_ADMIT_PRESSURE_OFF=0.02}
HERE=$(cd "$(dirname "$0")" && pwd)
TRACES=${CR_TRACES:-$HERE/../../shared/traces}
[ -f "$OUT/capacity.tsv" ] || { echo "admission_variants.sh: run bench/admission.sh BUILD $OUT first" >&2; exit 2; }

echo '| workload | load | variant | interactive attainment | of the reachable | batch held / dropped / shed | heavy share of batch work | its fair share | of the dispatched held work: heavy / fair | routes as without the door |'
echo '|---|---:|---|---:|---:|---|---:|---:|---|---|'
IFS=, read -ra WL <<<"$WORKLOADS"
IFS=';' read -ra VS <<<"$VARIANTS"
for w in "${WL[@]}"; do
    read -r reach cap < <(awk -F'\t' -v w="$w" '$1 == w { print $2, $3 }' "$OUT/capacity.tsv")
    [ -n "${cap:-}" ] || { echo "admission_variants.sh: no capacity for $w in $OUT/capacity.tsv" >&2; exit 2; }
    scales=$(python3 -c "import sys; c = float(sys.argv[1]); print('%.6g,%.6g' % (0.7 * c, 1.5 * c))" "$cap")
    for v in "${VS[@]}"; do
        env_args=()
        [ "$v" = default ] || read -ra env_args <<<"$v"
        env "${env_args[@]}" "$BUILD/replay/cacheroute-admission" "$w" "$scales" "$TRACES" \
            cacheroute,cacheroute-door | python3 -c "
import sys
w, v, reach, cap = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4])
rows = [l.rstrip('\n').split('\t') for l in sys.stdin][1:]
for s in dict.fromkeys(r[1] for r in rows):
    def of(p, k):
        return next(r for r in rows if r[1] == s and r[2] == p and r[3] == k)
    i, b = of('cacheroute-door', 'interactive'), of('cacheroute-door', 'batch')
    same = 'yes' if b[19] == of('cacheroute', 'batch')[19] else 'no'
    print('| %s | %.1fx | %s | %.3f | %.3f | %.3f / %.3f / %.3f | %s | %s | %s | %s |' % (
        w, float(s) / cap, v, float(i[6]), float(i[6]) / reach, float(b[10]), float(b[9]),
        float(b[8]), b[15], b[17],
        '%s / %s' % (b[18], b[20]) if b[18] != 'nan' else 'none dispatched', same))" \
            "$w" "$v" "$reach" "$cap"
    done
done
