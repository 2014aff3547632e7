#!/usr/bin/env python3
"""Issue 32's table from foreign_traffic.sh's runs: per workload, cacheroute's
capacity at the p99 SLO with scrapes (W-scraped.json) and without
(W-blind.json), the best of the four deployed routers (route_table.py's
PEERS, W-peers.json), the ratios the issue's acceptance asks for
(>= 1.15x its own capacity without scrapes, >= 1.1x the best peer's), and
the hit ratios at the best peer's highest load within the SLO (route_table.py's
common load; target: cacheroute's >= the peer's - 0.01). Then every
policy's capacity and mean hit ratio per run. Standard library only.

usage: foreign_traffic.py OUT
"""
import glob
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from route_table import PEERS, common_load, load  # noqa: E402


def ratio(a, b):
    return a / b if b > 0 else float("nan")


def row(out, w):
    doc, cap, res, slo = load(os.path.join(out, w + "-peers.json"))
    _, mine, mine_res, _ = load(os.path.join(out, w + "-scraped.json"))
    cap["cacheroute"], res["cacheroute"] = mine["cacheroute"], mine_res["cacheroute"]
    blind = load(os.path.join(out, w + "-blind.json"))[1]["cacheroute"]["capacity_req_per_s"]
    best = max((p for p in PEERS if p in cap), key=lambda p: cap[p]["capacity_req_per_s"])
    bc = cap[best]["capacity_req_per_s"]
    cc = cap["cacheroute"]["capacity_req_per_s"]
    at = common_load(res, best, slo)
    hit_c, hit_p = res["cacheroute"][at]["hit_ratio"], res[best][at]["hit_ratio"]
    return ("| %s | %.3f | %.3f | %.2f | %s | %.3f | %.2f | %.3g | %.3f / %.3f | %+.3f |"
            % (w, cc, blind, ratio(cc, blind), best, bc, ratio(cc, bc),
               res[best][at]["offered_load_per_s"], hit_c, hit_p, hit_c - hit_p))


def details(path):
    doc, cap, res, slo = load(path)
    name = os.path.splitext(os.path.basename(path))[0]
    out = ["### %s" % name, "", "| policy | capacity (req/s) | mean hit ratio |", "|---|---:|---:|"]
    for p, c in cap.items():
        out.append("| %s | %.3f%s | %.3f |" % (
            p, c["capacity_req_per_s"], "" if c["bound"] == "interpolated" else " (%s)" % c["bound"],
            c["hit_ratio_mean"]))
    return "\n".join(out) + "\n"


def main(argv):
    if len(argv) != 1:
        sys.stderr.write(__doc__)
        return 2
    out = argv[0]
    names = sorted({os.path.basename(p)[:-len("-peers.json")]
                    for p in glob.glob(os.path.join(out, "*-peers.json"))})
    print("| workload | cacheroute, scrapes (req/s) | without (req/s) | x without (target >= 1.15)"
          " | best peer | its capacity (req/s) | x best peer (target >= 1.1) | common load (req/s)"
          " | hit: cacheroute / peer | hit - peer's (target >= -0.01) |")
    print("|---|---:|---:|---:|---|---:|---:|---:|---:|---:|")
    for w in names:
        if all(os.path.exists(os.path.join(out, w + x)) for x in ("-scraped.json", "-blind.json")):
            print(row(out, w))
    print()
    for p in sorted(glob.glob(os.path.join(out, "*.json"))):
        print(details(p))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
