#!/bin/bash
# Admission at the door (issue 33): per objective, cacheroute without and
# with its door against the four deployed routers, on the four workloads of
# bench/route_table.sh at 8 shards (noise 0), each request an objective and
# a tenant (60% interactive: priority 0, TTFT SLO 2 s; 40% batch: priority
# -1, SLO 30 s; the heavy tenant sends 3x the light one's rate).
#
# Loads are multiples of cacheroute's capacity without the door at the
# workload's p99 SLO (bench/README.md, "Routes against the deployed
# routers", n0 at 8 shards: conv 6.525, syn 5.970, zipf 9.569, docs 55.732
# req/s), converted to the trace's scale (its mean rate: conv 3.401, syn
# 3.907 req/s; the generated ones run at 1 req/s a scale). Writes OUT/W.tsv
# per workload (build/replay/cacheroute-admission's rows), OUT/all.tsv and
# OUT/goodput.png (goodput against load per objective, gnuplot).
#
# usage: bench/admission.sh BUILD OUT [WORKLOADS] [MULTIPLES]
#   e.g. bench/admission.sh build /tmp/adm conv,syn,zipf,docs 0.7,1.5
# Defaults: conv,syn,zipf,docs; 0.5,0.7,1,1.25,1.5. Seconds to a minute
# per workload on one core (the generated ones replay 100,000 requests).
set -eu
BUILD=${1:?usage: admission.sh BUILD OUT [WORKLOADS] [MULTIPLES]}
OUT=${2:?usage: admission.sh BUILD OUT [WORKLOADS] [MULTIPLES]}
WORKLOADS=${3:-conv,syn,zipf,docs}
MULTIPLES=${4:-0.5,0.7,1,1.25,1.5}
HERE=$(cd "$(dirname "$0")" && pwd)
TRACES=${CR_TRACES:-$HERE/../../shared/traces}
mkdir -p "$OUT"

capacity() { # W -> req/s of cacheroute without the door; the scale of 1 req/s
    case $1 in
    conv) CAP=6.525 RATE=3.401 ;;
    syn) CAP=5.970 RATE=3.907 ;;
    zipf) CAP=9.569 RATE=1 ;;
    docs) CAP=55.732 RATE=1 ;;
    *) echo "admission.sh: unknown workload '$1' (conv, syn, zipf, docs)" >&2; exit 2 ;;
    esac
}

IFS=, read -ra WL <<<"$WORKLOADS"
: >"$OUT/all.tsv"
for w in "${WL[@]}"; do
    capacity "$w"
    scales=$(python3 -c "import sys; c, r = map(float, sys.argv[1:3])
print(','.join('%.6g' % (float(m) * c / r) for m in sys.argv[3].split(',')))" \
        "$CAP" "$RATE" "$MULTIPLES")
    echo "$(date -u +%H:%M:%S) $w scales $scales" >&2
    "$BUILD/replay/cacheroute-admission" "$w" "$scales" "$TRACES" >"$OUT/$w.tsv"
    # the load as a multiple of the capacity, first column
    python3 -c "import sys; c, r = map(float, sys.argv[1:3])
for i, line in enumerate(open(sys.argv[3])):
    f = line.rstrip('\n').split('\t')
    if i == 0: continue
    print('%.3g\t%s' % (float(f[1]) * r / c, line.rstrip('\n')))" "$CAP" "$RATE" "$OUT/$w.tsv" \
        >>"$OUT/all.tsv"
done

# goodput against load: a panel per workload and objective, a line per policy
python3 - "$OUT" "${WL[@]}" <<'PY'
import sys
out, wls = sys.argv[1], sys.argv[2:]
rows = [l.rstrip('\n').split('\t') for l in open(out + '/all.tsv')]
pols = ['cacheroute', 'cacheroute-door', 'llmd-scorer', 'sglang-cache-aware', 'dynamo-kv',
        'aibrix-prefix']
with open(out + '/goodput.gp', 'w') as g:
    g.write("set terminal pngcairo size 1400,%d noenhanced\nset output 'goodput.png'\n"
            % (330 * len(wls)))
    g.write("set multiplot layout %d,2\nset grid\nset key top left font ',8'\n" % len(wls))
    for w in wls:
        for obj in ('interactive', 'batch'):
            g.write("set title '%s: %s goodput (requests within SLO per s)'\n" % (w, obj))
            g.write("set xlabel 'load (x capacity without the door)'\nset ylabel 'req/s'\n")
            parts = []
            for i, p in enumerate(pols):
                pts = sorted((float(r[0]), float(r[6])) for r in rows
                             if r[1] == w and r[3] == p and r[4] == obj)
                name = '%s-%s-%s.dat' % (w, obj, p)
                with open(out + '/' + name, 'w') as d:
                    d.writelines('%g %g\n' % pt for pt in pts)
                parts.append("'%s' using 1:2 with linespoints lw 2 lc %d title '%s'"
                             % (name, i + 1, p))
            g.write('plot ' + ', '.join(parts) + '\n')
    g.write('unset multiplot\n')
PY
(cd "$OUT" && gnuplot goodput.gp)
echo "admission.sh: wrote $OUT/all.tsv and $OUT/goodput.png" >&2
