#!/usr/bin/env python3
"""The routing table from cacheroute-replay JSON documents (route_table.sh's
runs): per run, every policy's capacity at the p99 SLO, its ratio to the best
of the four deployed routers, and its served hit ratio and p99 TTFT at a
common load (the highest tested load at which that best peer meets the SLO);
then one summary row per run, with the ceiling no router passes (every
reusable prefix hit, the work spread perfectly: R x 1000 / the mean prefill
ms of the workload's ceiling dump) over the best peer's capacity, so 1.2x
is out of reach where that is below 1.2. Standard library only.

usage: route_table.py RUN.json...
"""
import csv
import json
import os
import sys

PEERS = ("llmd-scorer", "sglang-cache-aware", "dynamo-kv", "aibrix-prefix")


def run_name(path):
    return os.path.splitext(os.path.basename(path))[0]


def mean_work(run_json):
    """The mean prefill ms of the measured requests (after the warm-up) in
    the run's workload's ceiling dump (route_table.sh), or None."""
    name = run_name(run_json)
    dump = os.path.join(os.path.dirname(run_json), name.split("-r")[0] + "-ceiling.csv")
    if not os.path.exists(dump):
        return None
    with open(run_json) as f:
        warm = json.load(f)["inputs"]["cluster"].get("warmup", 0)
    with open(dump) as f:
        rows = list(csv.DictReader(f))[warm:]
    return sum(float(r["prefill_ms"]) for r in rows) / len(rows)


def load(path):
    with open(path) as f:
        doc = json.load(f)
    cap = {c["policy"]: c for c in doc["capacity"]}
    res = {}
    for r in doc["results"]:
        res.setdefault(r["policy"], []).append(r)
    slo = doc["inputs"]["replay"]["slo-p99-ms"]
    return doc, cap, res, slo


def common_load(res, best, slo):
    """The highest offered load the best peer meets the SLO at (its row
    index), else its lowest."""
    rows = res[best]
    ok = [i for i, r in enumerate(rows) if r["ttft_p99_ms"] <= slo]
    return ok[-1] if ok else 0


def table(path):
    doc, cap, res, slo = load(path)
    best = max(PEERS, key=lambda p: cap[p]["capacity_req_per_s"] if p in cap else -1)
    best_cap = cap[best]["capacity_req_per_s"]
    work = mean_work(path)
    shards = doc["inputs"]["cluster"]["shards"]
    ceiling = shards * 1000.0 / work if work else float("nan")
    at = common_load(res, best, slo)
    load_at = res[best][at]["offered_load_per_s"]
    out = ["### %s" % run_name(path), "",
           "p99 SLO %g s; common load %.3g req/s (the best peer, %s, meets the SLO there); "
           "ceiling %.3g req/s" % (slo / 1000, load_at, best, ceiling), "",
           "| policy | capacity (req/s) | x best peer | hit ratio | p99 TTFT (s) |",
           "|---|---:|---:|---:|---:|"]
    for p, c in cap.items():
        r = res[p][at]
        ratio = c["capacity_req_per_s"] / best_cap if best_cap > 0 else float("nan")
        out.append("| %s | %.3f%s | %.2f | %.3f | %.1f |"
                   % (p, c["capacity_req_per_s"],
                      "" if c["bound"] == "interpolated" else " (%s)" % c["bound"], ratio,
                      r["hit_ratio"], r["ttft_p99_ms"] / 1000))
    summary = (run_name(path), best, best_cap, ceiling, cap["cacheroute"]["capacity_req_per_s"],
               res["cacheroute"][at]["hit_ratio"] - res[best][at]["hit_ratio"],
               cap["cacheroute"]["capacity_req_per_s"]
               - cap.get("min-ttft-exact", {"capacity_req_per_s": 0})["capacity_req_per_s"])
    return "\n".join(out) + "\n", summary


def main(paths):
    if not paths:
        sys.stderr.write(__doc__)
        return 2
    parts, rows = [], []
    for p in sorted(paths):
        if not any(c["policy"] in PEERS for c in load(p)[0]["capacity"]):
            sys.stderr.write("route_table.py: %s has no deployed router: left out\n" % p)
            continue
        text, summary = table(p)
        parts.append(text)
        rows.append(summary)
    print("| run | best peer | its capacity | ceiling / it | cacheroute | x best peer |"
          " hit - peer's | cacheroute - min-ttft-exact |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for name, best, bc, ceil, cc, dh, dx in rows:
        print("| %s | %s | %.3f | %.2f | %.3f | %.2f | %+.3f | %+.3f |"
              % (name, best, bc, ceil / bc if bc > 0 else float("nan"), cc,
                 cc / bc if bc > 0 else float("nan"), dh, dx))
    print()
    print("\n".join(parts))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
