"""The three parts of `make accuracy`, each on the same server, every limiter starting
from an empty database: the realistic mix, the adversarial patterns, memory.

Every run on the server is checked against the in-process reference of its limiter on
the same stream, request by request (and, for the module, the reply's count too): the
figures are the server's, and the references show they are what the algorithm says.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from slidingwindow_testing import RedisServer

from .drive import Client, closed_loop, open_loop
from .limiters import FixedWindow, Limiter, ModuleCounter, Replies, SlidingLog
from .metrics import fixed_window_estimate, judge, trailing_counts
from .reference import max_in_window
from .traffic import KINDS, MixConfig, Stream, burst_then_stream, double_burst, realistic_mix


@dataclass
class Config:
    mix: MixConfig
    burst_limits: tuple[int, ...]  # the open-loop attacks, per limit
    retry_limits: tuple[int, ...]  # the closed-loop client: one round trip per step
    memory_limits: tuple[int, ...]
    memory_identities: int  # module and fixed window: identities held
    log_identities: tuple[int, ...]  # sliding log, per memory limit (L entries each)
    chunk: int = 20_000


def log(msg: str) -> None:
    print(msg, flush=True)


# A short limit next to the long one, over a tenth of the window: at the same average
# rate (L/10 per W/10: no previous window can be bunched at its end, the counter's
# assumption holds), and at twice that rate (L/5 per W/10: bursts of up to L/5 pass).
SHORT_LIMITS = {"module_limit": 10, "module_limit_burst": 5}  # key: L / this per W / 10


def limiters_for(limit: int, window: int, with_limit: bool, details: bool = False
                 ) -> list[Limiter]:
    out: list[Limiter] = [ModuleCounter(limit, window, details=details)]
    for key, div in SHORT_LIMITS.items() if with_limit else ():
        short = (max(limit // div, 1), window // 10)
        out.append(ModuleCounter(limit, window, extra=[short], details=details, prefix=key,
                                 key=key, label=f"module + LIMIT {short[0]} {short[1]}"))
    out += [FixedWindow(limit, window), SlidingLog(limit, window, retry=details)]
    return out


def supports_limit(srv: RedisServer) -> bool:
    """Whether this build of the module takes the LIMIT option (issue 11)."""
    try:
        srv.r.execute_command(  # type: ignore[no-untyped-call]
            "SLIDINGWINDOW.PEEK", "probe", 10, 1000, 0, "LIMIT", 1, 100, "MS")
        return True
    except Exception:
        return False


class Mismatch(RuntimeError):
    pass


def verify(lim: Limiter, ident: np.ndarray, t: np.ndarray, rep: Replies) -> str:
    """Raises unless the server decided every request as the reference does."""
    allowed, count = lim.reference(ident, t)
    bad = int((allowed != rep.allowed).sum())
    if count is not None:
        bad += int(((count != rep.count) & (allowed == rep.allowed)).sum())
    if bad:
        first = int(np.flatnonzero((allowed != rep.allowed) | (
            (count if count is not None else rep.count) != rep.count))[0])
        raise Mismatch(f"{lim.label}: {bad} of {len(t)} replies differ from the reference "
                       f"(first: identity {ident[first]} at {t[first]} ms)")
    what = "decision and count" if count is not None else "decision"
    return f"identical to the in-process reference ({what}) on all {len(t):,} requests"


def estimate_of(lim: Limiter, ident: np.ndarray, t: np.ndarray, rep: Replies,
                window: int) -> np.ndarray | None:
    """The limiter's own count of the true window before each request, if it has one."""
    own = np.asarray(rep.count - rep.allowed, dtype=np.int64)  # the reply's count, before
    if isinstance(lim, ModuleCounter):
        return own if len(lim.limits) == 1 else None
    if isinstance(lim, FixedWindow):
        return fixed_window_estimate(ident, t, rep.allowed, window)
    return own  # the log's ZCARD: exact


def run_stream(srv: RedisServer, lim: Limiter, s: Stream, limit: int, window: int,
               chunk: int, kinds: tuple[str, ...] = ()) -> tuple[dict[str, Any], Replies]:
    srv.flushall()
    run = open_loop(srv, lim, s.ident, s.t, chunk)
    checked = verify(lim, s.ident, s.t, run.replies)
    est = estimate_of(lim, s.ident, s.t, run.replies, window)
    j = judge(s.ident, s.t, run.replies.allowed, limit, window, estimate=est,
              kind=s.kind if kinds else None, kinds=kinds)
    j.update(label=lim.label, verified=checked, driver_seconds=round(run.seconds, 2),
             server_usec_per_request=round(run.usec_per_request(lim.stats, len(s)), 3),
             server_usec_q25=run.usec_quantile(lim.stats),
             server_calls={k: v for k, v in run.calls.items() if k in lim.stats})
    return j, run.replies


def run_mix(srv: RedisServer, cfg: Config, with_limit: bool) -> dict[str, Any]:
    m = cfg.mix
    started = time.perf_counter()
    s = realistic_mix(m)
    gen = time.perf_counter() - started
    per_id = np.bincount(s.ident, minlength=m.identities) / m.windows
    out: dict[str, Any] = {
        "config": asdict(m), "generate_seconds": round(gen, 1), "requests": len(s),
        "identities": int((per_id > 0).sum()),
        "kinds": {k: int((s.kind == i).sum()) for i, k in enumerate(KINDS)},
        "requests_per_window_per_identity": {
            f"p{q}": float(np.percentile(per_id, q)) for q in (50, 90, 99, 100)},
        "limiters": {}}
    log(f"mix: {len(s):,} requests, {out['identities']:,} identities, {m.windows} windows "
        f"of {m.window} ms, limit {m.limit} (generated in {gen:.1f}s)")
    for lim in limiters_for(m.limit, m.window, with_limit):
        j, _ = run_stream(srv, lim, s, m.limit, m.window, cfg.chunk, KINDS)
        out["limiters"][lim.key] = j
        log(f"  {lim.label}: {j['driver_seconds']}s through the server, "
            f"{j['server_usec_per_request']} us/request; {j['verified']}")
    return out


def _attack(srv: RedisServer, cfg: Config, s: Stream, limit: int, window: int,
            with_limit: bool, series: bool) -> dict[str, Any]:
    res = {}
    for lim in limiters_for(limit, window, with_limit):
        j, rep = run_stream(srv, lim, s, limit, window, cfg.chunk)
        r = {k: j[k] for k in ("requests", "allowed", "verified", "same_history")}
        r.update(label=lim.label, max_in_window=j["max_in_window"]["worst"],
                 max_in_tenth=j["max_in_tenth"]["worst"])
        if series:  # the trailing true window's allowed count over time, for the chart
            x, inside = trailing_counts(s.t, rep.allowed, window)
            r["series"] = {"t": x.tolist(), "allowed_in_window": inside.tolist()}
        res[lim.key] = r
    return res


def run_adversarial(srv: RedisServer, cfg: Config, with_limit: bool) -> dict[str, Any]:
    w = cfg.mix.window
    out: dict[str, Any] = {"burst_then_stream": {}, "double_burst": {}, "retry_after": {}}
    for limit in cfg.burst_limits:
        first = limit == cfg.burst_limits[0]
        out["burst_then_stream"][str(limit)] = _attack(
            srv, cfg, burst_then_stream(limit, w), limit, w, with_limit, series=first)
        out["double_burst"][str(limit)] = _attack(
            srv, cfg, double_burst(limit, w), limit, w, with_limit, series=False)
        log(f"adversarial bursts, limit {limit}: " + ", ".join(
            f"{k} {v['max_in_window']:.2f}x" for k, v in
            out["burst_then_stream"][str(limit)].items()))
    starts = (0.0, 0.5, 0.95)  # where in window 2 each client starts
    for limit in cfg.retry_limits:
        clients = [Client(k, int((2 + f) * w), int((6 + f) * w)) for k, f in enumerate(starts)]
        res = {}
        for lim in limiters_for(limit, w, with_limit, details=True):
            srv.flushall()
            lr = closed_loop(srv, lim, clients)
            checked = verify(lim, lr.ident, lr.t, Replies(lr.allowed, lr.count))
            a = lr.allowed.astype(np.int64)
            per_client = max_in_window(lr.ident, lr.t, w, a) / limit
            by_start = dict(zip(map(str, starts), per_client.tolist(), strict=True))
            res[lim.key] = {
                "label": lim.label, "requests": len(lr.t), "allowed": int(lr.allowed.sum()),
                "retries_at_retry_after": lr.retries,
                "retries_denied": lr.retries_denied, "verified": checked,
                "max_in_window_by_start": by_start,
                "max_in_window": float(per_client.max()),
                "max_in_tenth": float(max_in_window(lr.ident, lr.t, w // 10, a).max() / limit),
                "seconds": round(lr.seconds, 2)}
        out["retry_after"][str(limit)] = res
        log(f"retry at retry_after, limit {limit}: " + ", ".join(
            f"{k} {v['max_in_window']:.2f}x ({v['retries_denied']} retries denied)"
            for k, v in res.items()))
    return out


def _held(srv: RedisServer, fill: list[tuple[Limiter, Stream]], identities: int) -> dict[str, Any]:
    """used_memory held per identity after the fill runs (from an empty database), and
    the server time per request of the last run."""
    srv.flushall()
    before = srv.used_memory()
    usec = 0.0
    for lim, s in fill:
        run = open_loop(srv, lim, s.ident, s.t)
        if not run.replies.allowed.all():
            raise RuntimeError(f"{lim.label}: memory fill denied a request")
        usec = run.usec_per_request(lim.stats, len(s))
    after = srv.used_memory()
    keys = int(srv.r.dbsize())
    if keys != identities:
        raise RuntimeError(f"memory fill: {keys} keys for {identities} identities (expired?)")
    return {"identities": identities, "bytes_per_identity": round((after - before) / identities, 1),
            "fill_usec_per_request": round(usec, 3)}


def run_memory(srv: RedisServer, cfg: Config, with_limit: bool = False) -> dict[str, Any]:
    """Bytes per identity held by an identity at its limit: for the module, L in the
    previous window and L/2 in this one (two CHECKs with COST); for the fixed window,
    its key at L (INCRBY L); for the sliding log, L entries (L script calls, one every
    W/L ms through one window: its fill time is a steady state at the limit, the other
    two fills' times are not per-request figures). Several windows per key (LIMIT) are
    measured by `make bench`."""
    w = cfg.mix.window
    out: dict[str, Any] = {}
    n = cfg.memory_identities
    ids = np.arange(n, dtype=np.int64)

    def at(x: int) -> Stream:  # every identity once at time x
        return Stream(ids, np.full(n, x, dtype=np.int64), np.zeros(n, np.int64), 0)

    for limit, n_log in zip(cfg.memory_limits, cfg.log_identities, strict=True):
        half = max(limit // 2, 1)
        res = {
            "module": _held(srv, [(ModuleCounter(limit, w, cost=limit), at(w + w // 2)),
                                  (ModuleCounter(limit, w, cost=half), at(2 * w + w // 2))], n),
            "fixed": _held(srv, [(FixedWindow(limit, w, step=limit), at(2 * w + w // 2))], n),
        }
        k = np.arange(limit, dtype=np.int64)
        li = np.repeat(np.arange(n_log, dtype=np.int64), limit)
        lt = np.tile(w + k * w // limit, n_log)
        res["log"] = _held(srv, [(SlidingLog(limit, w), Stream(li, lt, li * 0, 0))], n_log)
        out[str(limit)] = res
        log(f"memory at limit {limit}: " + ", ".join(
            f"{k} {v['bytes_per_identity']} B" for k, v in res.items()))
    return out
