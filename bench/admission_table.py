#!/usr/bin/env python3
"""The acceptance table of issue 33 from bench/admission.sh's OUT/all.tsv:
per workload, at 0.7x and 1.5x cacheroute's capacity without the door,
cacheroute-door's interactive goodput against the best peer's, its
interactive attainment, critical requests shed, the heavy tenant's share
of the batch work served against its max-min fair share over the run, its
share of the held batch work dispatched against its max-min fair share of
that (the capacity the door's round robin shares), what the door held,
dropped or shed, and whether
its routes are cacheroute's without the door (the replay's routes hash).

usage: bench/admission_table.py OUT/all.tsv [OUT/capacity.tsv]"""
import sys

PEERS = ('llmd-scorer', 'sglang-cache-aware', 'dynamo-kv', 'aibrix-prefix')
COLS = ['x', 'workload', 'scale', 'policy', 'objective', 'requests', 'goodput', 'attainment',
        'p99', 'shed', 'dropped', 'held', 'heavy_requests', 'heavy_served', 'light_requests',
        'light_served', 'heavy_work', 'all_p99', 'heavy_fair', 'heavy_dispatched', 'routes',
        'heavy_dispatched_fair', 'dispatched_share']

rows = [dict(zip(COLS, l.rstrip('\n').split('\t'))) for l in open(sys.argv[1])]
cap = sys.argv[2] if len(sys.argv) > 2 else sys.argv[1].rsplit('/', 1)[0] + '/capacity.tsv'
reach = {f[0]: float(f[1]) for f in (l.split('\t') for l in list(open(cap))[1:])}
get = lambda w, x, p, o: next(r for r in rows if r['workload'] == w and r['x'] == x
                              and r['policy'] == p and r['objective'] == o)
print('| workload | load | door: interactive goodput (req/s) | best peer | its goodput | x best peer '
      '(>= 1.5) | door: interactive attainment (>= 0.95) | of the reachable | without the door '
      '| critical shed | heavy share of batch work served | its max-min fair share '
      '| of the dispatched held work: heavy / its fair share | batch shed / dropped / held '
      '| routes as without the door |')
print('|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---|---|')
for w in dict.fromkeys(r['workload'] for r in rows):
    for x in ('0.7', '1.5'):
        try:
            door = get(w, x, 'cacheroute-door', 'interactive')
        except StopIteration:
            continue
        best = max(PEERS, key=lambda p: float(get(w, x, p, 'interactive')['goodput']))
        bg = float(get(w, x, best, 'interactive')['goodput'])
        dg = float(door['goodput'])
        batch = get(w, x, 'cacheroute-door', 'batch')
        plain = get(w, x, 'cacheroute', 'interactive')
        att = float(door['attainment'])
        print('| %s | %sx | %.3f | %s | %.3f | %s | %.3f | %.3f | %.3f | %.0f | %s | %s | %s | '
              '%.3f / %.3f / %.3f | %s |' % (
            w, x, dg, best, bg, '%.1f' % (dg / bg) if bg > 0 else 'inf', att,
            att / reach[w], float(plain['attainment']),
            float(door['shed']) * float(door['requests']), batch['heavy_work'],
            batch['heavy_fair'],
            '%s / %s (%.0f%% of the served)' % (batch['heavy_dispatched'],
                                                 batch['heavy_dispatched_fair'],
                                                 100 * float(batch['dispatched_share']))
            if batch['heavy_dispatched'] != 'nan' else 'none dispatched', float(batch['shed']),
            float(batch['dropped']), float(batch['held']),
            'yes' if batch['routes'] == get(w, x, 'cacheroute', 'batch')['routes'] else 'no'))
