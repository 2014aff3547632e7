#!/usr/bin/python3
"""The EPP demo's report (scripts/demo-epp.sh): the driver's measured
figures (DIR/cacheroute.json, DIR/round-robin.json) next to the replay's
prediction for the same workload (DIR/replay.json, and its per-request
TTFTs in DIR/replay-routes.csv), as a Markdown table on stdout, and a plot
DIR/ttft_cdf.png (TTFT CDF, measured and predicted, per policy; gnuplot).
"""
import csv
import json
import os
import shutil
import subprocess
import sys

POLICIES = ("cacheroute", "round-robin")


def predicted(out):
    """The replay's hit ratio, p50 and p99 per policy, at its one scale."""
    with open(os.path.join(out, "replay.json")) as f:
        doc = json.load(f)
    return {r["policy"]: r for r in doc["results"]}


def gap(measured, pred):
    return "%+.1f%%" % (100.0 * (measured - pred) / pred) if pred else "n/a"


def cdf_file(out, name, values):
    path = os.path.join(out, "cdf-%s.dat" % name)
    s = sorted(values)
    with open(path, "w") as f:
        for i, v in enumerate(s):
            f.write("%.3f %.6f\n" % (v / 1000.0, (i + 1) / len(s)))
    return path


def plot(out, series):
    if not shutil.which("gnuplot"):
        print("gnuplot not found: %s/*.dat written, no PNG" % out, file=sys.stderr)
        return
    lines = ", ".join("'%s' using 1:2 with lines lw 2 title '%s'" % (p, t) for t, p in series)
    script = ("set terminal pngcairo size 900,560 noenhanced\n" if has_cairo() else
              "set terminal png size 900,560 noenhanced\n")
    script += ("set output '%s'\nset title 'TTFT CDF: 8 fake engines, Mooncake conversation "
               "slice'\nset xlabel 'TTFT (s)'\nset ylabel 'share of requests'\nset logscale x\n"
               "set key bottom right\nset grid\nplot %s\n"
               % (os.path.join(out, "ttft_cdf.png"), lines))
    with open(os.path.join(out, "ttft_cdf.gp"), "w") as f:
        f.write(script)
    subprocess.run(["gnuplot", os.path.join(out, "ttft_cdf.gp")], check=True, timeout=60)


def has_cairo():
    r = subprocess.run(["gnuplot", "-e", "set terminal"], capture_output=True, text=True,
                       timeout=30)
    return "pngcairo" in (r.stdout + r.stderr)


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "."
    pred = predicted(out)
    print("| policy | hit ratio: demo / replay (gap) | TTFT p50 (ms): demo / replay "
          "| TTFT p99 (ms): demo / replay (gap) | demo throughput (req/s, prompt tok/s) "
          "| errors |")
    print("|---|---|---|---|---|---:|")
    series = []
    for p in POLICIES:
        path = os.path.join(out, p + ".json")
        if not os.path.exists(path):
            continue
        with open(path) as f:
            m = json.load(f)
        r = pred.get(p, {})
        print("| %s | %.3f / %.3f (%s) | %.0f / %.0f | %.0f / %.0f (%s) | %.2f, %.0f | %d |" % (
            p, m["hit_ratio"], r.get("hit_ratio", float("nan")),
            gap(m["hit_ratio"], r.get("hit_ratio")), m["ttft_p50_ms"],
            r.get("ttft_p50_ms", float("nan")), m["ttft_p99_ms"],
            r.get("ttft_p99_ms", float("nan")), gap(m["ttft_p99_ms"], r.get("ttft_p99_ms")),
            m["throughput_req_s"], m["throughput_prompt_tok_s"], m["errors"]))
        with open(os.path.join(out, p + ".csv")) as f:
            series.append(("%s (demo)" % p, cdf_file(out, p, [float(row["ttft_ms"]) for row in
                                                              csv.DictReader(f)])))
    routes = os.path.join(out, "replay-routes.csv")
    if os.path.exists(routes):
        by = {}
        with open(routes) as f:
            for row in csv.DictReader(f):
                by.setdefault(row["policy"], []).append(float(row["ttft_ms"]))
        for p in POLICIES:
            if p in by:
                series.append(("%s (replay)" % p, cdf_file(out, p + "-replay", by[p])))
    plot(out, series)
    return 0


if __name__ == "__main__":
    sys.exit(main())
