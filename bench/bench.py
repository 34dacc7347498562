#!/usr/bin/env python3
"""Benchmark of SLIDINGWINDOW.CHECK / PEEK against SET PXAT, GET and the seed's Lua
script, on Redis 7.0, Redis 8.2, Valkey 8.1 and Valkey 9.1, every comparison within one
run on one server.

    python3 bench/bench.py                 # full run on the four servers -> bench/results/
    python3 bench/bench.py --quick         # the same code paths, small counts (CI)
    python3 bench/bench.py --plain         # only the plain redis-benchmark conditions
    python3 bench/bench.py --check-targets # ... and exit 1 when a target is missed
    python3 bench/bench.py --check-targets --from bench/results/latest.json  # no run
    python3 bench/bench.py --update-readme --from bench/results/latest.json
    python3 bench/bench.py --extra-module /path/redis-cell.so \\
        --extra-command 'CL.THROTTLE {key} 15 30 60 1'

Per server (one process, every case in a database of its own), see bench/README.md:
server time per call by the Python driver (measure.py) and under plain redis-benchmark
conditions (plain.py), latency without pipelining, memory per identity (memory.py).
The cases are in workloads.py, the targets in targets.py, the tables in report.py.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import measure
from compact import write_raw
import memory
import plain
import report
import targets
from servers import JUDGED, SHORTS, Server, binary
from slidingwindow_testing import MODULE
from slidingwindow_testing.seed import ENV as SEED_ENV
from slidingwindow_testing.seed import in_ci, missing_reason, seed_path
from resp import show_cmd
from workloads import (STREAM_EXPONENT, STREAM_IDS, STREAM_LIMIT, STREAM_WINDOW, WINDOW, Ids,
                       Zipf, allowed_limit, make_cases)

ROOT = report.ROOT
DEFAULT_MODULE = MODULE
OUT = {"full": ROOT / "bench" / "results", "quick": ROOT / "bench" / "results" / "quick",
       "plain": ROOT / "bench" / "results" / "plain"}

# Many short interleaved runs, summarised by their 25th percentile: on a shared machine
# noise only ever adds time (a preemption inside a command adds milliseconds to its usec,
# a neighbour's build evicts the keyspace from the cache), so a low quantile is the
# steadiest estimate of the quiet-machine cost. The median is in the JSON too.
ESTIMATE_QUANTILE = 0.25
# The stream's runs are ten times longer: its cases are judged against each other (module
# / library, library / seed), and 4,000 calls of ~1 us (4 ms of server time) left one
# case's runs spread 1.05-3.26 us in one full run, enough to move a 4 x ratio by 25%.
FULL = dict(keyspace=100_000, n32=4_000, n1=1_000, repeats=30, lat_n=15_000,
            identities=1_000_000, plain_n=200_000, plain_runs=5, stream_warm=200_000,
            stream_n32=40_000, stream_n1=4_000)
QUICK = dict(keyspace=2_000, n32=500, n1=100, repeats=2, lat_n=200, identities=10_000,
             plain_n=5_000, plain_runs=1, stream_warm=2_000, stream_n32=500, stream_n1=100)

log = report.log


# The Functions library, loaded on every benchmarked server for the stream_lua case.
LUA_LIBRARY = Path(__file__).resolve().parents[1] / "lua" / "slidingwindow.lua"


def seed_script(given: str | None) -> Path | None:
    """--seed-script, else the seed's script where slidingwindow_testing finds it; None
    (the seed's rows left out, with a note) when there is none, and under CI=true exit."""
    path = Path(given) if given else seed_path()
    if path is not None and path.is_file():
        return path
    reason = f"--seed-script {given} does not exist" if given else missing_reason()
    if in_ci():
        raise SystemExit(f"{reason}; CI=true needs the seed's rows")
    log(f"NOTE: the seed script's rows are SKIPPED: {reason}")
    return None


def bench_server(srv: Server, sha: str | None, cfg: dict[str, int], args: argparse.Namespace,
                 mode: str, zipf: Zipf) -> dict[str, Any]:
    now = int(time.time())
    limit = allowed_limit(cfg)
    cases = make_cases(sha, now, args.extra_command, limit)
    if mode == "plain":
        cases = plain.plain_cases(cases)
    ids = Ids(cfg["keyspace"], args.seed, zipf)
    log(f"{srv.name} ({srv.short}, port {srv.port}, {srv.malloc}): {len(cases)} cases")
    srv.flush()
    measure.prepare(srv, cases, cfg, ids, now, log)
    res: dict[str, Any] = dict(srv.describe(), allowed_limit=limit, now=now)
    res["commands"] = {c.key: dict(label=c.label, command=show_cmd(c.cmd("<id>", now)),
                                   keys=c.keys, clock=c.clock, note=c.note, expect=c.expect)
                       for c in cases}
    if mode != "plain":
        runs = measure.server_time(srv, cases, cfg, ids, now, log)
        res["cases"] = {c.key: dict(res["commands"][c.key],
                                    **measure.summarise(c, runs[c.key], ESTIMATE_QUANTILE))
                        for c in cases}
    if not args.no_plain:
        res["plain"] = plain.measure(srv, cases, cfg, now, log)
    if mode != "plain":
        by = {c.key: c for c in cases}
        pair = [by[k] for k in ("check", "seed") if k in by]
        res["latency"] = measure.latency(srv, pair, cfg["lat_n"], ids)
        extra = [c for c in cases if c.key.startswith("extra")]
        res["memory"] = memory.measure(srv, memory.layouts(sha, extra), cfg["identities"],
                                       now, log)
    res["ratios"] = targets.ratios(res)
    return res


def wait_for_module(module: Path) -> None:
    for _ in range(60):  # someone may be rebuilding the .so right now
        if module.exists():
            return
        log(f"{module} missing, waiting for the build...")
        time.sleep(5)
    raise SystemExit(f"{module} is missing: run `make build`")


def run(args: argparse.Namespace, mode: str) -> dict[str, Any]:
    cfg = dict(QUICK if mode == "quick" else FULL)
    for k in FULL:
        if getattr(args, k) is not None:
            cfg[k] = getattr(args, k)
    module = Path(args.module).resolve()
    wait_for_module(module)
    seed = seed_script(args.seed_script)
    seed_src = seed.read_text() if seed else None
    started = time.time()
    machine = dict(report.machine_info(), **report.module_info(module))
    zipf = Zipf()
    results = []
    for short in args.servers.split(","):
        modules = [module] + [Path(m).resolve() for m in args.extra_module]
        try:
            srv = Server(short, binary(short), modules)
        except RuntimeError as e:
            if not args.extra_module:
                raise
            log(f"{short}: could not start with the extra modules ({e}); skipped")
            continue
        try:
            sha = srv.r.script_load(seed_src) if seed_src else None
            srv.r.execute_command("FUNCTION", "LOAD", "REPLACE", LUA_LIBRARY.read_text())
            results.append(bench_server(srv, sha, cfg, args, mode, zipf))
        finally:
            srv.cleanup()
    machine["loadavg_end"] = list(os.getloadavg())
    return dict(machine=machine, mode=mode, config=cfg, servers=results, window=WINDOW,
                stream=dict(ids=STREAM_IDS, exponent=STREAM_EXPONENT, limit=STREAM_LIMIT,
                            window=STREAM_WINDOW),
                seed_script=str(seed.resolve()) if seed else None,
                seconds=round(time.time() - started, 1))


def write(rep: dict[str, Any], out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    md = report.render_markdown(rep)
    (out / "latest.md").write_text(md)
    report.write_compact(rep, out / "latest.json")
    raw = write_raw(report.jsonable(rep), f"latest-{rep['mode']}.json")
    report.draw_chart(rep, out / "chart.png")
    print(md)
    print(f"\nwritten: {out}/latest.md, latest.json, chart.png ({rep['seconds']}s); "
          f"raw samples: {raw}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="small counts (seconds), for CI")
    ap.add_argument("--plain", action="store_true",
                    help="only the plain redis-benchmark conditions -> bench/results/plain/")
    ap.add_argument("--no-plain", action="store_true", help="skip the plain conditions")
    ap.add_argument("--check-targets", action="store_true",
                    help="print every target, its value, met/missed; exit 1 on a miss")
    ap.add_argument("--from", dest="from_json", metavar="JSON",
                    help="judge / render a stored latest.json instead of running")
    ap.add_argument("--update-readme", action="store_true",
                    help="rewrite the README's Performance block from the results")
    ap.add_argument("--servers", default=",".join(SHORTS),
                    help="comma-separated, of: " + ", ".join(SHORTS)
                    + " (binaries: REDIS_SERVER, REDIS8_SERVER, VALKEY_SERVER, VALKEY9_SERVER)")
    ap.add_argument("--module", default=str(DEFAULT_MODULE))
    ap.add_argument("--seed-script", help=f"the seed's Lua script (default: ${SEED_ENV}, "
                    "else ../shared/seed/sliding_window.lua beside the repository); without "
                    "it the seed's rows are left out (an error under CI=true)")
    ap.add_argument("--extra-module", action="append", default=[],
                    help="another module to load into the same servers (repeatable)")
    ap.add_argument("--extra-command", action="append", default=[],
                    help="a command to add to the tables; {key} is replaced by a key, "
                         "{now} / {now_ms} by the time (repeatable)")
    ap.add_argument("--out", help="output directory (default: by mode, bench/results/...)")
    for k in FULL:
        ap.add_argument("--" + k.replace("_", "-"), type=int, help=f"override (full: {FULL[k]})")
    ap.add_argument("--seed", type=int, default=12345, help="random seed for the id draws")
    args = ap.parse_args()

    if args.from_json:
        rep = json.loads(Path(args.from_json).read_text())
    else:
        mode = "quick" if args.quick else "plain" if args.plain else "full"
        rep = run(args, mode)
        write(rep, Path(args.out) if args.out else OUT[mode])
    if args.update_readme:
        report.update_readme(rep, ROOT / "README.md")
        print(f"README.md: Performance block rewritten from the {rep['machine']['date']} run")
    ok = targets.print_check(rep)
    if not any(s.get("short") == JUDGED for s in rep["servers"]):
        print(f"({JUDGED} not in --servers: nothing judged)")
    if args.check_targets:
        if rep["mode"] == "quick":
            print("--check-targets: a quick run is not judged")
        elif not ok:
            sys.exit(1)


if __name__ == "__main__":
    main()
