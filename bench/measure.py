"""Server time per call, measured by the Python driver: many short runs per case,
interleaved across cases, each its own CONFIG RESETSTAT / INFO commandstats sample, every
reply read and classified and cross-checked against the server's own counters."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from resp import Conn, batches_of, classify, resp
from servers import Server
from workloads import AGE_WINDOWS, WINDOW, Case, Ids, ident

Run = dict[str, Any]
Log = Callable[[str], None]


def quantile(xs: Sequence[float], f: float) -> float:
    """Linear-interpolated quantile f of xs."""
    s = sorted(xs)
    pos = f * (len(s) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def spread_of(xs: Sequence[float]) -> dict[str, float]:
    """min, quartiles and max of the per-run samples (noise, for the JSON)."""
    return dict(min=min(xs), q1=quantile(xs, 0.25), median=quantile(xs, 0.5),
                q3=quantile(xs, 0.75), max=max(xs), samples=len(xs))


def learn_reply_shape(srv: Server, case: Case) -> None:
    """An extra command's reply lines, from one call."""
    if case.lines is not None:
        return
    with Conn(srv.port, case.db) as conn:
        reply = conn.probe(resp(*case.cmd(ident(0), int(time.time()))))
    case.sample_reply = reply.decode(errors="replace").strip().replace("\r\n", " ")
    if reply[:1] == b"-":
        raise RuntimeError(f"{case.label}: {case.sample_reply}")
    case.lines = max(1, reply.count(b"\r\n"))


def write_keys(srv: Server, case: Case, ids: Sequence[int], times: Sequence[int]) -> None:
    """Writes the case's state for each id at each time (bulk, not timed)."""
    lines = case.lines if case.prefill is None else case.prefill_lines
    with Conn(srv.port, case.db) as conn:
        for t in times:
            data = conn.load([resp(*case.writes()(ident(i), t)) for i in ids], lines or 1)
            if classify(data, None, None)[2]:
                raise RuntimeError(f"{case.label}: error while writing keys: {data[:200]!r}")


def warm_case(srv: Server, case: Case, keyspace: int) -> None:
    """The case's background keyspace: every key written as in steady state."""
    learn_reply_shape(srv, case)
    if case.prefill_at:
        write_keys(srv, case, range(keyspace), case.prefill_at)


def age_keys(srv: Server, case: Case, ids: Sequence[int], now: int) -> None:
    """Keys whose counts have aged out: written AGE_WINDOWS windows before `now`."""
    write_keys(srv, case, ids, [now - AGE_WINDOWS * WINDOW])


def delete_keys(srv: Server, case: Case, ids: Sequence[int]) -> None:
    """Removes a run's new or aged keys; each must exist (so each call did create or keep
    its key)."""
    names = [case.cmd(ident(i), 0)[1] for i in ids]  # the key is the first argument
    cmds = [resp("DEL", *names[k:k + 500]) for k in range(0, len(names), 500)]
    with Conn(srv.port, case.db) as conn:
        data = conn.load(cmds, 1, step=20)
    deleted = sum(int(x) for x in data.replace(b":", b"").split())
    if deleted != len(ids):
        raise RuntimeError(f"{srv.name} {case.label}: {deleted} of the run's {len(ids)} keys "
                           "existed after it")


def timed_run(srv: Server, case: Case, ids: Sequence[int], pipeline: int) -> Run:
    """One measured run: RESETSTAT, the calls, commandstats."""
    assert case.lines is not None
    t = int(time.time())
    cmds = [resp(*case.cmd(ident(i), t)) for i in ids]
    batches = list(batches_of(cmds, pipeline))
    full, tail = case.lines * pipeline, case.lines * (len(cmds) % pipeline or pipeline)
    with Conn(srv.port, case.db) as conn:
        counters0 = srv.module_counters()
        srv.r.config_resetstat()
        sink: list[bytes] = []
        t0 = time.perf_counter()
        last = len(batches) - 1
        for k, b in enumerate(batches):
            conn.call(b, full if k != last else tail, sink)
        elapsed = time.perf_counter() - t0
        stats = srv.commandstats()
        counters1 = srv.module_counters()
    calls, usec = stats.get(case.stat, (0, 0))
    allowed, denied, errors = classify(b"".join(sink), case.allowed_pat, case.denied_pat)
    res = dict(pipeline=pipeline, n=len(cmds), calls=calls, usec=usec,
               usec_per_call=usec / calls if calls else None,
               client_ops=len(cmds) / elapsed, allowed=allowed, denied=denied, errors=errors)
    check_run(srv, case, res, stats, counters0, counters1, "driver")
    return res


def check_run(srv: Server, case: Case, res: Run, stats: dict[str, tuple[int, int]],
              c0: dict[str, int], c1: dict[str, int], who: str) -> None:
    """The replies (driver) and the server's own counters (both drivers) must agree with
    the case: every call allowed, or every call denied, or (the stream) every call one of
    the two; an error anywhere fails the run."""
    n = res["n"]
    problems = []
    calls = stats.get(case.stat, (0, 0))[0]
    if calls < n:
        problems.append(f"commandstats counted {calls} {case.stat} calls for {n} sent")
    if res.get("errors"):
        problems.append(f"{res['errors']} error replies")
    a, d = res.get("allowed"), res.get("denied")
    if a is not None and d is not None:
        want = {"allowed": a, "denied": d, None: a + d}[case.expect]
        if want != n:
            problems.append(f"{a} allowed and {d} denied replies for {n} calls "
                            f"(expected: all {case.expect or 'allowed or denied'})")
    # Server-side cross-checks (also for redis-benchmark, which does not read replies).
    if case.counted_by == "module" and c0 and c1:
        da = c1["slidingwindow_allowed"] - c0["slidingwindow_allowed"]
        dd = c1["slidingwindow_denied"] - c0["slidingwindow_denied"]
        res["server_allowed"], res["server_denied"] = da, dd
        if {"allowed": da, "denied": dd, None: da + dd}[case.expect] < n:
            problems.append(f"INFO slidingwindow: {da} allowed, {dd} denied for {n} calls")
        if a is not None and da != a:
            problems.append(f"INFO slidingwindow counted {da} allowed, the replies {a}")
    if case.counted_by == "seed":
        incr = stats.get("incr", (0, 0))[0]  # one INCR per allowed call, inside the script
        res["server_allowed"], res["server_denied"] = incr, calls - incr
        if case.expect == "allowed" and incr < n:
            problems.append(f"the script ran INCR {incr} times for {n} calls")
        if a is not None and incr != a:
            problems.append(f"the script ran INCR {incr} times for {a} allowed replies")
    res["verified"] = not problems
    if problems:
        raise RuntimeError(f"{srv.name} {case.label} ({who}, pipeline {res['pipeline']}): "
                           + "; ".join(problems))


def warm_stream(srv: Server, cases: Sequence[Case], ids: Sequence[int]) -> None:
    """The stream's history before measuring: the same draws for every stream case."""
    for c in cases:
        with Conn(srv.port, c.db) as conn:
            t = int(time.time())
            data = conn.load([resp(*c.cmd(ident(i), t)) for i in ids], c.lines or 3)
        if classify(data, None, None)[2]:
            raise RuntimeError(f"{c.label}: error while warming the stream: {data[:200]!r}")


def server_time(srv: Server, cases: Sequence[Case], cfg: dict[str, int], ids: Ids, now: int,
                log: Log) -> dict[str, dict[int, list[Run]]]:
    """`repeats` rounds; in each, every case (in a rotated order, to spread the noise) runs
    n32 calls at pipeline 32 and n1 at pipeline 1 (the stream's cases stream_n32 and
    stream_n1). Keys a run creates or ages are deleted after it; the aged keys of round
    r+1 are written at the start of round r."""
    plan = [(32, cfg["n32"]), (1, cfg["n1"])]
    stream_plan = [(32, cfg["stream_n32"]), (1, cfg["stream_n1"])]
    n_max = max(n for _, n in plan)
    slot = {(r, p): 2 * r + k for r in range(cfg["repeats"]) for k, (p, _) in enumerate(plan)}
    aged = [c for c in cases if c.keys == "aged"]

    def age_round(r: int) -> None:
        for c in aged:
            for p, n in plan:
                age_keys(srv, c, ids.fresh(slot[(r, p)], n, n_max), now)

    runs: dict[str, dict[int, list[Run]]] = {c.key: {1: [], 32: []} for c in cases}
    for r in range(cfg["repeats"]):
        if r + 1 < cfg["repeats"]:
            age_round(r + 1)
        order = list(cases[r % len(cases):]) + list(cases[:r % len(cases)])
        for c in order:
            for p, n in stream_plan if c.keys == "stream" else plan:
                run_ids = ids.for_run(c.keys, slot[(r, p)], n, n_max)
                runs[c.key][p].append(timed_run(srv, c, run_ids, p))
                if c.keys in ("new", "aged"):
                    delete_keys(srv, c, run_ids)
        log(f"  server time: round {r + 1}/{cfg['repeats']} done")
    return runs


def prepare(srv: Server, cases: Sequence[Case], cfg: dict[str, int], ids: Ids, now: int,
            log: Log) -> None:
    """Every case's database before the first run: aged keys of round 0 first (the rest of
    the warm-up pushes them out of the cache), the warm keyspaces, the stream's history."""
    n_max = max(cfg["n32"], cfg["n1"])
    for c in cases:
        if c.keys == "aged":
            learn_reply_shape(srv, c)
            for k, n in enumerate((cfg["n32"], cfg["n1"])):
                age_keys(srv, c, ids.fresh(k, n, n_max), now)
    for c in cases:
        warm_case(srv, c, cfg["keyspace"])
    stream = [c for c in cases if c.keys == "stream"]
    if stream and cfg["stream_warm"]:
        warm_stream(srv, stream, ids.for_run("stream", -1, cfg["stream_warm"], 0))
    log(f"  {len(cases)} databases ready")


def latency(srv: Server, pair: Sequence[Case], n: int, ids: Ids) -> dict[str, dict[str, float]]:
    """Round trips without pipelining, one connection per command, the commands
    alternating call by call so both see the same noise."""
    samples: dict[str, list[int]] = {c.key: [] for c in pair}
    t = int(time.time())
    draws = ids.for_run("warm", -2, n, 0)
    conns = {c.key: Conn(srv.port, c.db) for c in pair}
    clock = time.perf_counter_ns
    try:
        for i in draws:
            for c in pair:
                payload = resp(*c.cmd(ident(i), t))
                conn = conns[c.key]
                t0 = clock()
                conn.call(payload, c.lines or 1)
                samples[c.key].append(clock() - t0)
    finally:
        for conn in conns.values():
            conn.close()
    out = {}
    for k, s in samples.items():
        s.sort()

        def pct(p: float, s: list[int] = s) -> float:
            return s[min(len(s) - 1, int(p * len(s)))] / 1000

        out[k] = dict(n=len(s), p50_us=pct(0.50), p99_us=pct(0.99), p999_us=pct(0.999),
                      mean_us=sum(s) / len(s) / 1000)
    return out


def summarise(case: Case, runs: dict[int, list[Run]], estimate_quantile: float
              ) -> dict[str, Any]:
    """One case's runs -> the table's figures (the low quantile, the median, the spread)."""
    per = {p: [x["usec_per_call"] for x in runs[p]] for p in (1, 32)}
    n = sum(x["n"] for p in (1, 32) for x in runs[p])
    first = runs[32][0]
    allowed = (None if first["allowed"] is None
               else sum(x["allowed"] for p in (1, 32) for x in runs[p]) / n)
    return dict(
        usec_per_call={p: quantile(per[p], estimate_quantile) for p in (1, 32)},
        usec_per_call_median={p: quantile(per[p], 0.5) for p in (1, 32)},
        usec_per_call_spread={p: spread_of(per[p]) for p in (1, 32)},
        driver_ops={p: quantile([x["client_ops"] for x in runs[p]], 0.5) for p in (1, 32)},
        verified=all(x["verified"] for p in (1, 32) for x in runs[p]),
        allowed_fraction=allowed, runs=runs)
