#!/usr/bin/env python3
"""How much code and cache one call touches, per build: what instruction counts miss.

    python3 bench/code_footprint.py --module target/release/libredis_slidingwindow.so
    python3 bench/code_footprint.py --module OLD.so --module NEW.so --case peek

Runs redis-server (Redis 7.0 by default) under callgrind with its cache simulation,
warms 2,000 keys, zeroes the counters, sends N pipelined calls of one case on those keys,
and dumps. Per call, over the whole server (event loop, parsing, the command, the reply):

* Ir, and the simulated I1 and D1 misses (valgrind's model of this machine's caches);
* the distinct 64-byte lines of code executed, per object (redis-server, the module,
  libc, jemalloc): the code footprint. On this workload the server's hot code already
  exceeds the 32 KiB L1 instruction cache, so each extra line of module code run per call
  costs about one more miss per call, which instruction counts do not show.

Cases: check (allowed, explicit now), peek, denied, setpxat (SET PXAT on the same keys).
Slow (valgrind): about 20 s per build and case at the default 4,000 calls.
"""

from __future__ import annotations

import argparse
import collections
import glob
import os
import re
import subprocess
import tempfile
import time
from pathlib import Path

from bench import DEFAULT_MODULE
from servers import binary
from slidingwindow_testing.ports import free_port

NOW = 1_796_119_463
KEYS = 2_000
EVENTS = ("Ir", "I1mr", "D1mr", "D1mw")


def command(case: str, i: int) -> list[object]:
    key = f"fp:{i}"
    if case == "check":
        return ["SLIDINGWINDOW.CHECK", key, 1_000_000, 3600, NOW]
    if case == "peek":
        return ["SLIDINGWINDOW.PEEK", key, 1_000_000, 3600, NOW]
    if case == "denied":
        return ["SLIDINGWINDOW.CHECK", key, 1, 3600, NOW]
    if case == "setpxat":
        return ["SET", key, "x" * 12, "PXAT", (NOW + 7200) * 1000]
    raise SystemExit(f"unknown case {case}")


def profile(server: str, module: Path, case: str, calls: int, tmp: str) -> Path:
    import redis

    out = os.path.join(tmp, f"cg.{module.name}.{case}")
    port = free_port()
    proc = subprocess.Popen(
        ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", "--cache-sim=yes",
         "--dump-instr=yes", "--dump-line=no", "--compress-pos=no", "--compress-strings=no",
         server, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
         "--appendonly", "no", "--loadmodule", str(module)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        r = redis.Redis(port=port, socket_timeout=120)
        for _ in range(600):
            try:
                r.ping()
                break
            except redis.ConnectionError:
                time.sleep(0.1)
        pipe = r.pipeline(transaction=False)
        for i in range(KEYS):  # every key written once: a warm keyspace
            pipe.execute_command(*(command("setpxat", i) if case == "setpxat" else
                                   ["SLIDINGWINDOW.CHECK", f"fp:{i}", 1, 3600, NOW]))
        pipe.execute()
        subprocess.run(["callgrind_control", "-z", str(proc.pid)], check=True,
                       capture_output=True)
        for start in range(0, calls, 32):
            pipe = r.pipeline(transaction=False)
            for i in range(start, start + 32):
                pipe.execute_command(*command(case, i % KEYS))
            replies = pipe.execute(raise_on_error=False)
            if any(isinstance(x, Exception) for x in replies):
                raise SystemExit(f"{case}: an error reply: {replies[:3]}")
        subprocess.run(["callgrind_control", "-d", "measured", str(proc.pid)], check=True,
                       capture_output=True)
    finally:
        proc.terminate()
        proc.wait(timeout=120)
    dumps = sorted(glob.glob(out + ".*"))
    if not dumps:
        raise SystemExit("callgrind wrote no dump")
    return Path(dumps[0])


def summarise(dump: Path, calls: int) -> tuple[dict[str, float], dict[str, int]]:
    """Per-call events (whole program) and distinct code lines by object."""
    events: list[str] = []
    totals: dict[str, float] = {}
    lines: dict[str, set[int]] = collections.defaultdict(set)
    obj = "?"
    after_calls = False
    for text in dump.open(errors="replace"):
        if text.startswith("events:"):
            events = text.split()[1:]
        elif text.startswith("summary:") or text.startswith("totals:"):
            vals = [int(v) for v in text.split()[1:]]
            totals = {e: v / calls for e, v in zip(events, vals) if e in EVENTS}
        elif text.startswith("ob="):
            obj = os.path.basename(text[3:].strip())
        elif text.startswith("calls="):
            after_calls = True  # the next cost line is the call's inclusive cost
        else:
            m = re.match(r"0x([0-9a-f]+) ", text)
            if m:
                if not after_calls:
                    lines[obj].add(int(m.group(1), 16) >> 6)
                after_calls = False
    return totals, {o: len(s) for o, s in lines.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--module", action="append", help="a build (.so); repeat to compare")
    ap.add_argument("--case", action="append", help="check, peek, denied, setpxat (repeat)")
    ap.add_argument("--calls", type=int, default=4_000)
    ap.add_argument("--server", default="redis7", help="redis7, redis8, valkey8, valkey9")
    args = ap.parse_args()
    modules = [Path(m).resolve() for m in (args.module or [str(DEFAULT_MODULE)])]
    server = binary(args.server)
    print(f"{args.server} ({server}), {args.calls:,} calls per case at pipeline 32 on "
          f"{KEYS:,} warm keys; per call, whole server")
    print("| build | case | Ir | I1 misses | D1 read misses | D1 write misses "
          "| code lines: module | redis-server | libc | jemalloc |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory(prefix="swfootprint-") as tmp:
        for case in args.case or ["check", "peek"]:
            for module in modules:
                totals, lines = summarise(profile(server, module, case, args.calls, tmp),
                                          args.calls)

                def obj(prefix: str) -> int:
                    return sum(n for o, n in lines.items() if o.startswith(prefix))

                print(f"| {module.parent.name}/{module.name} | {case} | {totals['Ir']:,.0f} "
                      f"| {totals['I1mr']:.1f} | {totals['D1mr']:.1f} | {totals['D1mw']:.1f} "
                      f"| {lines.get(module.name, 0)} | "
                      f"{obj('redis-') + obj('valkey-')} | {obj('libc.')} | {obj('libjemalloc')} |")


if __name__ == "__main__":
    main()
