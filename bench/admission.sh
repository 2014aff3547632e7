#!/bin/bash
# Admission at the door (issue 33): per objective, cacheroute without and
# with its door against the four deployed routers, on the four workloads of
# bench/route_table.sh at 8 shards (noise 0), each request an objective and
# a tenant (60% interactive: priority 0, TTFT SLO 2 s; 40% batch: priority
# -1, SLO 30 s; the heavy tenant sends 3x the light one's rate).
#
# Loads are multiples of cacheroute's capacity without the door at the
# interactive SLO, found here first: cacheroute alone over a grid of
# scales, its reachable attainment the best it shows there (on an idle
# cluster some prompts take longer than 2 s to prefill alone: conv, syn,
# zipf reach only ~0.8), the capacity the scale where its interactive
# attainment first falls below 0.95x that, interpolated between grid points
# (OUT/capacity.tsv: workload, reachable, capacity scale, req/s). Writes
# OUT/W.tsv per workload (build/replay/cacheroute-admission's rows, at the
# multiples of that capacity), OUT/all.tsv and OUT/goodput.png (goodput
# against load per objective, gnuplot).
#
# usage: bench/admission.sh BUILD OUT [WORKLOADS] [MULTIPLES]
#   e.g. bench/admission.sh build /tmp/adm conv,syn,zipf,docs 0.7,1.5
# Defaults: conv,syn,zipf,docs; 0.5,0.7,1,1.25,1.5. About ten minutes on
# one core (the generated workloads replay 100,000 requests a run).
set -eu
BUILD=${1:?usage: admission.sh BUILD OUT [WORKLOADS] [MULTIPLES]}
OUT=${2:?usage: admission.sh BUILD OUT [WORKLOADS] [MULTIPLES]}
WORKLOADS=${3:-conv,syn,zipf,docs}
MULTIPLES=${4:-0.5,0.7,1,1.25,1.5}
HERE=$(cd "$(dirname "$0")" && pwd)
TRACES=${CR_TRACES:-$HERE/../../shared/traces}
mkdir -p "$OUT"

grid() { # W -> the capacity scan's scales (arrivals x scale)
    case $1 in
    conv) seq -s, 0.1 0.1 2.0 ;;
    syn) seq -s, 0.05 0.05 1.5 ;;
    zipf) seq -s, 0.25 0.25 6 ;;
    docs) seq -s, 2.5 2.5 60 ;;
    *) echo "admission.sh: unknown workload '$1' (conv, syn, zipf, docs)" >&2; exit 2 ;;
    esac
}

capacity() { # W -> CAP, the scale where cacheroute's attainment falls below 0.95x its best
    "$BUILD/replay/cacheroute-admission" "$1" "0.01,$(grid "$1")" "$TRACES" cacheroute \
        >"$OUT/$1.scan.tsv"
    CAP=$(python3 - "$OUT/$1.scan.tsv" "$1" <<'PY' | tee -a "$OUT/capacity.tsv" | cut -f3
import sys
rows = [l.rstrip('\n').split('\t') for l in open(sys.argv[1])][1:]
pts = sorted((float(f[1]), float(f[6]), float(f[5])) for f in rows if f[3] == 'interactive')
share = sum(int(f[4]) for f in rows if f[3] == 'interactive') / sum(int(f[4]) for f in rows)
best = max(a for _, a, _ in pts)
line = 0.95 * best
cap = pts[-1][0]
for (s0, a0, _), (s1, a1, _) in zip(pts, pts[1:]):
    if a1 < line <= a0:
        cap = s0 + (s1 - s0) * (a0 - line) / (a0 - a1)
        break
# req/s: the interactive goodput at the lightest point is its rate there
rate = next(g / a for s, a, g in pts if s == pts[0][0]) / share / pts[0][0]
print('%s\t%.4f\t%.4f\t%.3f' % (sys.argv[2], best, cap, cap * rate))
PY
)
}
IFS=, read -ra WL <<<"$WORKLOADS"
: >"$OUT/all.tsv"
printf 'workload\treachable\tcapacity_scale\tcapacity_req_per_s\n' >"$OUT/capacity.tsv"
for w in "${WL[@]}"; do
    capacity "$w"
    scales=$(python3 -c "import sys; c = float(sys.argv[1])
print(','.join('%.6g' % (float(m) * c) for m in sys.argv[2].split(',')))" \
        "$CAP" "$MULTIPLES")
    echo "$(date -u +%H:%M:%S) $w scales $scales" >&2
    "$BUILD/replay/cacheroute-admission" "$w" "$scales" "$TRACES" >"$OUT/$w.tsv"
    # the load as a multiple of the capacity, first column
    python3 -c "import sys; c = float(sys.argv[1])
for i, line in enumerate(open(sys.argv[2])):
    f = line.rstrip('\n').split('\t')
    if i == 0: continue
    print('%.3g\t%s' % (float(f[1]) / c, line.rstrip('\n')))" "$CAP" "$OUT/$w.tsv" \
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
