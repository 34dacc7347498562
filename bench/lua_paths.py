#!/usr/bin/env python3
"""The Functions library's server time on each path the clients send, beside the module
and the seed's script (issue 29), on Redis 7.0 by default.

    python3 bench/lua_paths.py            # 5 interleaved rounds -> bench/results/lua_paths.*
    python3 bench/lua_paths.py --quick    # 1 short round (CI: the harness cannot rot)
    python3 bench/lua_paths.py --ir       # instructions per call instead (callgrind)

Plain redis-benchmark conditions (plain.py's: 50 clients x pipeline 32, INFO commandstats
usec/calls), warm keys (`-r 300`: 300 ids per path, each written before measuring), every
call allowed (limit 10^6), each path in a database and on keys of its own. The library
and the module read the server's clock, as the clients do; the seed's script is given an
explicit `now`, as its client gives it. Rounds interleave the paths (each round starts
one path later); the figure is the median of the rounds. After each run one call's reply
is read back, to show that the path was allowed (or, for REFUND, gave back).

The floor rows (bench/lua_floor.lua, loaded beside the library) make only the server
calls each path needs and return a constant reply of its shape: what any library keeping
the module's replies and writes costs before it parses, decodes, judges or encodes.

--ir: the same calls on a server under callgrind (bench/profile_hotpath.py's parser),
instructions per call inside the command's proc (fcallCommand, evalShaCommand,
RedisModuleCommandDispatcher: what commandstats times, less call()'s own bookkeeping),
insensitive to the machine's load.
"""

from __future__ import annotations

import argparse
import collections
import json
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import redis
from plain import CLIENTS, PIPELINE
from resp import Arg
from servers import Server, binary
from slidingwindow_testing import MODULE
from slidingwindow_testing.seed import seed_path
from workloads import RB_RANDOM

ROOT = Path(__file__).resolve().parents[1]
LIBRARY = ROOT / "lua" / "slidingwindow.lua"
FLOOR = ROOT / "bench" / "lua_floor.lua"
LIMIT, WINDOW = 1_000_000, 3600
KEYSPACE = 300
FULL = dict(n=100_000, rounds=5)
QUICK = dict(n=3_000, rounds=1)

# The paths as the clients send them: (name, the arguments after the key).
PATHS: list[tuple[str, list[Arg]]] = [
    ("plain", [LIMIT, WINDOW]),
    ("DETAILS", [LIMIT, WINDOW, "DETAILS"]),
    ("MS DETAILS", [LIMIT, WINDOW * 1000, "MS", "DETAILS"]),
    ("LIMIT x3 DETAILS", [LIMIT, WINDOW, "LIMIT", LIMIT, 60, "LIMIT", LIMIT, 1, "DETAILS"]),
    ("COST 5", [LIMIT, WINDOW, "COST", 5]),
    ("REFUND", [LIMIT, WINDOW]),
    ("PEEK DETAILS", [LIMIT, WINDOW, "DETAILS"]),
]
# What each path's keys hold before measuring: REFUND's enough to give back every call.
PREFILL: dict[str, list[Arg]] = {"REFUND": [LIMIT, WINDOW, "COST", LIMIT // 4]}
OTHER = "other_"  # --compare's library is loaded with its names' prefix changed to this
# The floor's function for each path (bench/lua_floor.lua): its server calls and its reply's
# shape, nothing else.
FLOOR_FN = {"plain": "plain", "DETAILS": "details", "MS DETAILS": "details",
            "LIMIT x3 DETAILS": "three", "COST 5": "plain", "REFUND": "refund",
            "PEEK DETAILS": "peek"}
VERB = {"REFUND": ("slidingwindow_refund", "SLIDINGWINDOW.REFUND", "fcall"),
        "PEEK DETAILS": ("slidingwindow_peek", "SLIDINGWINDOW.PEEK", "fcall_ro")}


def cases(sha: str | None, now: int, other: bool) -> list[dict[str, Any]]:
    """Each path for the library (and, with `other`, the library given by --compare,
    loaded under the names other_*), its floor, the module; and the seed's script."""
    out = []
    for p, (path, args) in enumerate(PATHS):
        fn, cmd, stat = VERB.get(path, ("slidingwindow_check", "SLIDINGWINDOW.CHECK", "fcall"))
        fcall = "FCALL_RO" if stat == "fcall_ro" else "FCALL"
        pre = PREFILL.get(path, args)
        for impl, prefix in [("library", "slidingwindow_"), ("other", OTHER)][:2 if other else 1]:
            lib = f"{impl}{p}:{RB_RANDOM}"
            out.append(dict(path=path, impl=impl, stat=stat,
                            cmd=[fcall, fn.replace("slidingwindow_", prefix), 1, lib, *args],
                            prefill=["FCALL", prefix + "check", 1, lib, *pre]))
        floor = ["FCALL_RO" if stat == "fcall_ro" else "FCALL", "swfloor_" + FLOOR_FN[path],
                 1, f"floor{p}:{RB_RANDOM}", *args]
        out.append(dict(path=path, impl="floor", stat=stat, cmd=floor, prefill=floor))
        mod = f"mod{p}:{RB_RANDOM}"
        out.append(dict(path=path, impl="module", stat=cmd.lower(), cmd=[cmd, mod, *args],
                        prefill=["SLIDINGWINDOW.CHECK", mod, *pre]))
    if sha:
        w = now // WINDOW
        keys = [f"rate:{RB_RANDOM}:{w}", f"rate:{RB_RANDOM}:{w - 1}"]
        seed = ["EVALSHA", sha, 2, *keys, LIMIT, WINDOW, now]
        out.append(dict(path="seed script", impl="seed", stat="evalsha", cmd=seed, prefill=seed))
    for db, c in enumerate(out, start=1):
        c["db"] = db
    return out


def bench(srv: Server, c: dict[str, Any], argv: list[Arg], n: int) -> list[str]:
    exe = shutil.which("redis-benchmark")
    if not exe:
        raise SystemExit("redis-benchmark not found: apt-get install redis-tools")
    return [exe, "-h", "127.0.0.1", "-p", str(srv.port), "--dbnum", str(c["db"]), "-c",
            str(CLIENTS), "-P", str(PIPELINE), "-n", str(n), "-r", str(KEYSPACE), "--csv",
            *(str(x) for x in argv)]


def one_run(srv: Server, c: dict[str, Any], n: int) -> float:
    srv.r.config_resetstat()
    out = subprocess.run(bench(srv, c, c["cmd"], n), capture_output=True, text=True,
                         timeout=900)
    if out.returncode != 0:
        raise RuntimeError(f"redis-benchmark failed: {out.stderr or out.stdout}")
    calls, usec = srv.commandstats().get(c["stat"], (0, 0))
    if calls < n:
        raise RuntimeError(f"{c['impl']} {c['path']}: {calls} calls counted for {n}")
    return usec / calls


def allowed(srv: Server, c: dict[str, Any]) -> None:
    """One call of the case on one of its keys: allowed (REFUND: still holds counts)."""
    argv = [str(x).replace(RB_RANDOM, "000000000001") for x in c["cmd"]]
    srv.r.execute_command("SELECT", c["db"])
    r = srv.r.execute_command(*argv)
    srv.r.execute_command("SELECT", 0)
    if not isinstance(r, list) or r[0] != 1:
        raise RuntimeError(f"{c['impl']} {c['path']}: not allowed: {r!r}")


def measure(srv: Server, todo: list[dict[str, Any]], n: int, rounds: int) -> None:
    for c in todo:  # warm keys: every id written (redis-benchmark draws with replacement)
        subprocess.run(bench(srv, c, c["prefill"], KEYSPACE * 20), capture_output=True,
                       check=True, timeout=900)
        c["runs"] = []
    for r in range(rounds):
        for c in todo[r % len(todo):] + todo[:r % len(todo)]:
            c["runs"].append(one_run(srv, c, n))
            allowed(srv, c)
        print(f"  round {r + 1}/{rounds} done", file=sys.stderr)
    for c in todo:
        c["usec_per_call"] = statistics.median(c["runs"])


PROCS = {"fcall": "fcallCommand", "fcall_ro": "fcallroCommand", "evalsha": "evalShaCommand"}


def ids(c: dict[str, Any], n: int) -> list[list[str]]:
    return [[str(x).replace(RB_RANDOM, "%012d" % (i % KEYSPACE)) for x in c["cmd"]]
            for i in range(n)]


def instructions(srv: Server, todo: list[dict[str, Any]], n: int) -> None:
    """Each case's Ir per call: its keys warmed, the counters zeroed, n calls (pipeline
    32), the profile dumped and parsed."""
    from profile_hotpath import Profile
    pid = srv.proc.pid
    for c in todo:
        r = redis.Redis(port=srv.port, db=c["db"])
        for i in range(KEYSPACE):
            r.execute_command(*[str(x).replace(RB_RANDOM, "%012d" % i) for x in c["prefill"]])
        calls = ids(c, n)
        subprocess.run(["callgrind_control", "-z", str(pid)], check=True, capture_output=True)
        for k in range(0, n, PIPELINE):
            p = r.pipeline(transaction=False)
            for argv in calls[k:k + PIPELINE]:
                p.execute_command(*argv)
            p.execute()
        name = f"{c['impl']}-{c['db']}"
        subprocess.run(["callgrind_control", "-d", name, str(pid)], check=True,
                       capture_output=True)
        allowed(srv, c)
        dump = max(Path(srv.ir_dir).glob(f"callgrind.{pid}.*"), key=lambda f: f.stat().st_mtime)
        proc = PROCS.get(c["stat"], "RedisModuleCommandDispatcher")
        c["ir_per_call"] = Profile(dump).inclusive(proc) / n
        print(f"  {c['impl']} {c['path']}: {c['ir_per_call']:.0f} Ir per call", file=sys.stderr)


def table(todo: list[dict[str, Any]], field: str = "usec_per_call") -> str:
    f = ".0f" if field == "ir_per_call" else ".2f"
    seed = next((c[field] for c in todo if c["impl"] == "seed"), None)
    by = collections.defaultdict(lambda: float("nan"),
                                 {(c["path"], c["impl"]): c[field] for c in todo})
    other = any(c["impl"] == "other" for c in todo)
    extra = " --compare library µs | library / --compare |" if other else ""
    rows = ["| path | library µs | module µs | module / library | library / seed script "
            "| floor µs | floor / seed script |" + extra,
            "|---|---|---|---|---|---|---|" + ("---|---|" if other else "")]
    for path, _ in PATHS:
        lib, mod, low = by[(path, "library")], by[(path, "module")], by[(path, "floor")]
        ratio = f"{lib / seed:.2f}" if seed else "-"
        low_ratio = f"{low / seed:.2f}" if seed else "-"
        row = (f"| {path} | {lib:{f}} | {mod:{f}} | {mod / lib:.2f} | {ratio} "
               f"| {low:{f}} | {low_ratio} |")
        if other:
            row += f" {by[(path, 'other')]:{f}} | {lib / by[(path, 'other')]:.2f} |"
        rows.append(row)
    if seed:
        rows.append(f"| seed script (explicit `now`) | - | - | - | {seed:{f}} µs | - | - |"
                    + (" - | - |" if other else ""))
    return "\n".join(rows)


def compact_json(res: dict) -> str:
    """`res` with one line per case, so that the committed file stays short and a diff
    shows which case moved."""
    head = json.dumps({k: v for k, v in res.items() if k != "cases"}, indent=1)[:-2]
    cases = ",\n".join("  " + json.dumps(c) for c in res["cases"])
    return f'{head},\n "cases": [\n{cases}\n ]\n}}\n'


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="one short round, for CI")
    ap.add_argument("--server", default="redis7", help="redis7 | redis8 | valkey8 | valkey9")
    ap.add_argument("--module", default=str(MODULE))
    ap.add_argument("--seed-script", help="the seed's Lua script (default: as bench.py)")
    ap.add_argument("--compare", metavar="LUA", help="another version of the library (e.g. "
                    "`git show main:lua/slidingwindow.lua > /tmp/old.lua`), measured beside")
    ap.add_argument("--ir", action="store_true", help="instructions per call (callgrind)")
    ap.add_argument("--only", help="comma-separated impl names to run (library,other,floor,"
                    "module,seed): a partial run, for working on one")
    ap.add_argument("--rounds", type=int)
    ap.add_argument("--n", type=int, help="calls per run")
    ap.add_argument("--out", help="output directory (default: bench/results[/quick])")
    args = ap.parse_args()
    cfg = dict(QUICK if args.quick else FULL)
    cfg.update({k: getattr(args, k) for k in ("rounds", "n") if getattr(args, k)})
    seed = Path(args.seed_script) if args.seed_script else seed_path()
    out = Path(args.out) if args.out else ROOT / "bench" / "results" / (
        "quick" if args.quick else "")
    wrapper: list[str] = []
    if args.ir:
        import tempfile
        ir_dir = tempfile.mkdtemp(prefix="lua-paths-ir-")
        wrapper = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={ir_dir}/callgrind.%p",
                   "--dump-instr=no", "--separate-threads=no"]
    srv = Server(args.server, binary(args.server), [Path(args.module)], wrapper=wrapper,
                 start_timeout=180 if args.ir else 10)
    if args.ir:
        srv.ir_dir = ir_dir  # type: ignore[attr-defined]
    server = srv.describe()
    try:
        srv.r.execute_command("FUNCTION", "LOAD", "REPLACE", LIBRARY.read_text())
        srv.r.execute_command("FUNCTION", "LOAD", "REPLACE", FLOOR.read_text())
        if args.compare:
            text = Path(args.compare).read_text().replace("slidingwindow_", OTHER)
            text = text.replace("#!lua name=slidingwindow", "#!lua name=other", 1)
            srv.r.execute_command("FUNCTION", "LOAD", "REPLACE", text)
        sha = srv.r.script_load(seed.read_text()) if seed and seed.is_file() else None
        if sha is None:
            print("NOTE: no seed script: its row is left out", file=sys.stderr)
        todo = cases(sha, int(time.time()), bool(args.compare))
        if args.only:
            todo = [c for c in todo if c["impl"] in args.only.split(",")]
        if args.ir:
            instructions(srv, todo, args.n or 2000)
            text = table(todo, "ir_per_call").replace("µs", "Ir")
        else:
            measure(srv, todo, cfg["n"], cfg["rounds"])
            text = table(todo)
        res = dict(server=server, config=cfg, clients=CLIENTS, pipeline=PIPELINE,
                   keyspace=KEYSPACE, limit=LIMIT,
                   cases=[{k: v for k, v in c.items() if k != "prefill"} for c in todo])
    finally:
        srv.stop()
    out.mkdir(parents=True, exist_ok=True)
    name = "lua_paths_ir" if args.ir else "lua_paths"
    cmdline = " ".join(["python3 bench/lua_paths.py", *sys.argv[1:]])
    (out / f"{name}.json").write_text(compact_json(res))
    if args.ir:
        (out / f"{name}.md").write_text(f"{server['server']} under callgrind, `{cmdline}`: "
                                        f"Ir per call.\n\n{text}\n")
        print(text)
        return
    (out / f"{name}.md").write_text(
        f"{server['server']}, `{cmdline}`: redis-benchmark -c {CLIENTS} -P {PIPELINE} "
        f"-r {KEYSPACE}, {cfg['n']} calls per run, median of {cfg['rounds']} interleaved "
        f"rounds, INFO commandstats µs per call.\n\n{text}\n")
    print(text)


if __name__ == "__main__":
    main()
