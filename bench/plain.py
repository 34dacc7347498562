"""Plain conditions anyone can reproduce with redis-benchmark alone: 50 clients x
pipeline 32, `plain_n` (200,000) calls per run, random ids from the 100,000-id warm
keyspace (`-r 100000`), or for new keys from redis-benchmark's whole range
(`-r 2147483647`, the case's database flushed before each run, so every call but a
handful of random collisions creates a key); the cases alternate run by run, and server
time per call is INFO commandstats usec/calls, summarised by the median of the runs.

Not here: the aged-out keys (redis-benchmark draws ids with replacement, so a run cannot
be kept to keys it has not touched yet) and the Zipf stream (it draws uniformly); the
Python driver measures both.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Sequence
from typing import Any

from measure import Log, Run, check_run, quantile
from servers import Server
from workloads import RB_MAX_KEYSPACE, RB_RANDOM, Case

CLIENTS, PIPELINE = 50, 32


def plain_cases(cases: Sequence[Case]) -> list[Case]:
    return [c for c in cases if c.plain and c.keys in ("warm", "new")]


def command(srv: Server, case: Case, n: int, keyspace: int, now: int) -> list[str]:
    exe = shutil.which("redis-benchmark")
    if not exe:
        raise SystemExit("redis-benchmark not found: apt-get install redis-tools")
    r = RB_MAX_KEYSPACE if case.keys == "new" else keyspace
    return [exe, "-h", "127.0.0.1", "-p", str(srv.port), "--dbnum", str(case.db),
            "-c", str(CLIENTS), "-P", str(PIPELINE), "-n", str(n), "-r", str(r), "--csv",
            *(x.decode() if isinstance(x, bytes) else str(x) for x in case.cmd(RB_RANDOM, now))]


def one_run(srv: Server, case: Case, n: int, keyspace: int, now: int) -> Run:
    if case.keys == "new":
        srv.flush(case.db)  # "from an empty database"
    argv = command(srv, case, n, keyspace, now)
    counters0 = srv.module_counters()
    srv.r.config_resetstat()
    out = subprocess.run(argv, capture_output=True, text=True, timeout=900)
    stats = srv.commandstats()
    counters1 = srv.module_counters()
    rows = [x for x in out.stdout.splitlines() if x.startswith('"') and not x.startswith('"test"')]
    if out.returncode != 0 or not rows:
        raise RuntimeError(f"redis-benchmark failed: {out.stderr or out.stdout}")
    f = [x.strip('"') for x in rows[-1].rsplit(",", 7)]
    calls, usec = stats.get(case.stat, (0, 0))
    res: Run = dict(pipeline=PIPELINE, clients=CLIENTS, n=n, rps=float(f[1]),
                    p50_ms=float(f[4]), p99_ms=float(f[6]), calls=calls, usec=usec,
                    usec_per_call=usec / calls if calls else None)
    check_run(srv, case, res, stats, counters0, counters1, "redis-benchmark")
    if case.keys == "new":
        # Every call but random collisions (n^2 / 2^32, about 10 at 200,000) made a key.
        res["keys_created"] = srv.dbsize(case.db)
        if res["keys_created"] < n - max(100, n // 1000):
            raise RuntimeError(f"{srv.name} {case.label} (plain): {res['keys_created']} keys "
                               f"for {n} calls on new keys")
    return res


def measure(srv: Server, cases: Sequence[Case], cfg: dict[str, int], now: int,
            log: Log) -> dict[str, dict[str, Any]]:
    todo = plain_cases(cases)
    runs: dict[str, list[Run]] = {c.key: [] for c in todo}
    for r in range(cfg["plain_runs"]):
        for c in todo[r % len(todo):] + todo[:r % len(todo)]:
            runs[c.key].append(one_run(srv, c, cfg["plain_n"], cfg["keyspace"], now))
        log(f"  plain conditions: run {r + 1}/{cfg['plain_runs']} done")
    out = {}
    for c in todo:
        per = [x["usec_per_call"] for x in runs[c.key]]
        out[c.key] = dict(usec_per_call=quantile(per, 0.5), rps=quantile(
            [x["rps"] for x in runs[c.key]], 0.5), min=min(per), max=max(per),
            command=" ".join(command(srv, c, cfg["plain_n"], cfg["keyspace"], now)[1:]),
            runs=runs[c.key])
    return out
