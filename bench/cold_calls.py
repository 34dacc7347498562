#!/usr/bin/env python3
"""Server time per call at a low, fixed rate (issue 32): CHECK as the Envoy service and
the Node stores send it, beside envoyproxy/ratelimit's INCRBY + EXPIRE and a floor.

    python3 bench/cold_calls.py           # 5 interleaved rounds -> bench/results/cold_calls.*
    python3 bench/cold_calls.py --quick   # 1 short round (CI: the harness cannot rot)

At 1,000 calls a second each call is its own event-loop turn: the server's caches and
branch predictors have moved on between calls, so a call costs several times what it
costs in a pipeline of 32 (bench/lua_paths.py). Each run: FLUSHALL, then 3,000 calls at
1,000 a second over 1,000 identities (each seen three times, the first a new key), one
connection; INFO commandstats usec over the run's calls, every command counted. The
cases, each on its own keys:

- `SLIDINGWINDOW.CHECK key 1000000 3600000 MS DETAILS`: one descriptor of the Envoy
  service, one call of the Node stores.
- `SWFLOOR.WRITE key` (examples/floor_module.rs): only the module API calls an allowed
  CHECK makes (open, read, write in place, expiry, WATCH, keyspace events, replication,
  a six-integer reply): what any module command keeping CHECK's contract costs before
  it parses, decodes, judges or encodes.
- `INCRBY key 1` + `EXPIRE key 3600`, pipelined: what envoyproxy/ratelimit sends for one
  descriptor (a fixed window's key per window).
- `SET key <10 bytes> PXAT ms` and `GET key`: one plain write with its expiry, one read.

Rounds interleave the cases (each round starts one case later); the figure is the median.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

import redis
from lua_paths import compact_json
from servers import Server, binary
from slidingwindow_testing import MODULE

ROOT = Path(__file__).resolve().parents[1]
FLOOR = ROOT / "target" / "release" / "examples" / "libfloor_module.so"
FULL = dict(calls=3000, ids=1000, rate=1000.0, rounds=5)
QUICK = dict(calls=300, ids=100, rate=1000.0, rounds=1)
STATE = b"\xa1\x00\x90\x1c\xba\xba\x1e\x01\x00\x0a"

Call = Callable[[redis.Redis, int], Any]


def check(r: redis.Redis, i: int) -> Any:
    return r.execute_command("SLIDINGWINDOW.CHECK", f"check:{i}", 1_000_000, 3_600_000,
                             "MS", "DETAILS")


def floor(r: redis.Redis, i: int) -> Any:
    return r.execute_command("SWFLOOR.WRITE", f"floor:{i}")


def incrby_expire(r: redis.Redis, i: int) -> Any:
    p = r.pipeline(transaction=False)
    key = f"fixed:{i}:{int(time.time()) // 3600}"
    p.incrby(key, 1)
    p.expire(key, 3600)
    return p.execute()


def set_pxat(r: redis.Redis, i: int) -> Any:
    return r.execute_command("SET", f"set:{i}", STATE, "PXAT", int(time.time() * 1000) + 7_200_000)


def get(r: redis.Redis, i: int) -> Any:
    return r.get(f"set:{i}")


CASES: list[tuple[str, Call]] = [
    ("SLIDINGWINDOW.CHECK ... MS DETAILS", check),
    ("floor: SWFLOOR.WRITE", floor),
    ("INCRBY + EXPIRE (envoyproxy/ratelimit)", incrby_expire),
    ("SET ... PXAT", set_pxat),
    ("GET", get),
]


def one_run(srv: Server, call: Call, cfg: dict[str, Any]) -> float:
    """usec of every command per call over one run at the fixed rate."""
    srv.flushall()
    if call is get:  # GET reads keys that exist
        for i in range(cfg["ids"]):
            set_pxat(srv.r, i)
    srv.r.config_resetstat()
    start = time.perf_counter()
    for k in range(cfg["calls"]):
        wait = start + k / cfg["rate"] - time.perf_counter()
        if wait > 0:
            time.sleep(wait)
        call(srv.r, k % cfg["ids"])
    stats = srv.commandstats()
    usec = sum(u for name, (_, u) in stats.items() if not name.startswith("config"))
    return usec / cfg["calls"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="one short round, for CI")
    ap.add_argument("--server", default="redis7", help="redis7 | redis8 | valkey8 | valkey9")
    ap.add_argument("--rounds", type=int)
    ap.add_argument("--out", help="output directory (default: bench/results[/quick])")
    args = ap.parse_args()
    cfg = dict(QUICK if args.quick else FULL)
    if args.rounds:
        cfg["rounds"] = args.rounds
    if not FLOOR.is_file():
        subprocess.run(["cargo", "build", "--release", "--example", "floor_module"],
                       cwd=ROOT, check=True)
    out = Path(args.out) if args.out else ROOT / "bench" / "results" / (
        "quick" if args.quick else "")
    srv = Server(args.server, binary(args.server), [Path(MODULE), FLOOR])
    runs: dict[str, list[float]] = {name: [] for name, _ in CASES}
    try:
        server = srv.describe()
        for r in range(cfg["rounds"]):
            for name, call in CASES[r % len(CASES):] + CASES[:r % len(CASES)]:
                runs[name].append(one_run(srv, call, cfg))
            print(f"  round {r + 1}/{cfg['rounds']} done", file=sys.stderr)
        load = Path("/proc/loadavg").read_text().split()[0]
    finally:
        srv.stop()
    med = {name: statistics.median(v) for name, v in runs.items()}
    check_us = med[CASES[0][0]]
    rows = ["| call | server µs per call | / CHECK | rounds |", "|---|---|---|---|"]
    for name, _ in CASES:
        rounds = ", ".join(f"{x:.2f}" for x in runs[name])
        rows.append(f"| {name} | {med[name]:.2f} | {med[name] / check_us:.2f} | {rounds} |")
    cmdline = " ".join(["python3 bench/cold_calls.py", *sys.argv[1:]])
    text = (f"{server['server']}, `{cmdline}`: {cfg['calls']} calls at "
            f"{cfg['rate']:.0f} a second over {cfg['ids']} identities per run, one "
            f"connection, median of {cfg['rounds']} interleaved rounds, INFO commandstats "
            f"µs per call (load average {load} at the end).\n\n" + "\n".join(rows))
    out.mkdir(parents=True, exist_ok=True)
    (out / "cold_calls.md").write_text(text + "\n")
    res = dict(server=server, config=cfg, load_average=load,
               cases=[dict(name=n, runs=runs[n], usec_per_call=med[n]) for n, _ in CASES])
    (out / "cold_calls.json").write_text(compact_json(res))
    print(text)


if __name__ == "__main__":
    main()
