#!/usr/bin/env python3
"""Two builds of the module side by side under plain conditions: is this build slower?

    python3 bench/compare_builds.py --old /path/to/old/libredis_slidingwindow.so
    python3 bench/compare_builds.py --old OLD.so --new NEW.so --runs 9 --server redis8

Starts one server per build (same binary, same settings), warms the same keyspace in
both, then runs redis-benchmark (50 clients x pipeline 32, 200,000 calls, as
`make bench`'s plain conditions) on each case, alternating old and new run by run so
that drift on a shared machine hits both alike. Prints server µs per call (INFO
commandstats): the 25th percentile of the runs (as `make bench` summarises: noise only
adds time), the median, and new / old for both.

With `--instructions`, the same cases under callgrind instead (bench/profile_hotpath.py,
Redis 7.0): instructions per call inside call(), what INFO commandstats times. They do
not move with the machine's noise, so a 2% difference is visible where the timed runs
spread more than that (a shared 2-core VM).

Only single-limit cases that the first release already had are compared (CHECK warm and
new, with `now` and the server's clock, denied, PEEK, DETAILS); an old build need not
know LIMIT or COUNTS. The answer goes in a closing note, not in bench/results/.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench import DEFAULT_MODULE
from bench import FULL as CFG
from measure import quantile, warm_case
from plain import one_run, plain_cases
from servers import Server, binary
from workloads import allowed_limit, make_cases

CASES = ("check", "check_clock", "check_new", "check_new_clock", "denied", "peek", "details")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--old", required=True, help="the build to compare against (.so)")
    ap.add_argument("--new", default=str(DEFAULT_MODULE), help="default: target/release")
    ap.add_argument("--server", default="redis7", help="redis7, redis8, valkey8, valkey9")
    ap.add_argument("--runs", type=int, default=15, help="alternating runs per build and case")
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--instructions", action="store_true",
                    help="compare instructions per call under callgrind instead of time")
    args = ap.parse_args()
    if args.instructions:
        instructions(args)
        return

    now = int(time.time())
    wanted = args.cases.split(",")
    builds = {"old": Path(args.old).resolve(), "new": Path(args.new).resolve()}
    servers = {name: Server(args.server, binary(args.server), [so]) for name, so in
               builds.items()}
    try:
        cases = [c for c in plain_cases(make_cases("0" * 40, now, (), allowed_limit(CFG)))
                 if c.key in wanted]
        for srv in servers.values():
            for c in cases:
                warm_case(srv, c, CFG["keyspace"])
        per: dict[tuple[str, str], list[float]] = {}
        for r in range(args.runs):
            for c in cases:
                order = ("old", "new") if r % 2 == 0 else ("new", "old")
                for name in order:
                    run = one_run(servers[name], c, CFG["plain_n"], CFG["keyspace"], now)
                    per.setdefault((c.key, name), []).append(run["usec_per_call"])
            print(f"run {r + 1}/{args.runs} done", file=sys.stderr)
        srv = servers["new"]
        print(f"{srv.name}, {args.runs} alternating runs of {CFG['plain_n']:,} calls "
              f"(50 clients x P32), server µs per call: 25th percentile (as `make bench`: "
              f"noise only adds time) and median [min-max]")
        print(f"old: {builds['old']}\nnew: {builds['new']}")
        print("| case | old p25 | new p25 | new / old (p25) | old median [min-max] "
              "| new median [min-max] | new / old (median) |\n|---|---:|---:|---:|---:|---:|---:|")
        for c in cases:
            o, n = per[(c.key, "old")], per[(c.key, "new")]
            lo, ln = quantile(o, 0.25), quantile(n, 0.25)
            mo, mn = quantile(o, 0.5), quantile(n, 0.5)
            print(f"| {c.label} | {lo:.3f} | {ln:.3f} | {ln / lo:.3f} "
                  f"| {mo:.3f} [{min(o):.3f}-{max(o):.3f}] "
                  f"| {mn:.3f} [{min(n):.3f}-{max(n):.3f}] | {mn / mo:.3f} |")
    finally:
        for srv in servers.values():
            srv.cleanup()


def instructions(args: argparse.Namespace) -> None:
    """Instructions per call inside call() for each build (profile_hotpath's callgrind)."""
    builds = {"old": Path(args.old).resolve(), "new": Path(args.new).resolve()}
    per: dict[str, dict] = {}
    for name, so in builds.items():
        with tempfile.TemporaryDirectory(prefix="compare-ir-") as out:
            subprocess.run([sys.executable, str(Path(__file__).with_name("profile_hotpath.py")),
                            "--no-perf", "--cases", args.cases, "--module", str(so),
                            "--out", out], check=True, stdout=sys.stderr)
            per[name] = json.loads((Path(out) / "callgrind-summary.json").read_text())["callgrind"]
    print("Redis 7.0 under callgrind, instructions per call inside call() (what INFO "
          "commandstats times)")
    print(f"old: {builds['old']}\nnew: {builds['new']}")
    print("| case | old | new | new / old |\n|---|---:|---:|---:|")
    for key in args.cases.split(","):
        o, n = per["old"][key], per["new"][key]
        a, b = o["call_ir_per_command"], n["call_ir_per_command"]
        print(f"| {o['case']} | {a:,.0f} | {b:,.0f} | {b / a:.3f} |")


if __name__ == "__main__":
    main()
