"""Running a request stream through a limiter on the server.

`open_loop`: the whole stream is known in advance (the realistic mix, the bursts): it
is sent in time order, pipelined, on one connection, so each identity's requests are
decided in their order and the chunk size changes nothing but speed.

`closed_loop`: clients whose next request depends on the last reply (retrying exactly
at `retry_after`): one round trip per step, all clients' steps batched together.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np
from slidingwindow_testing import RedisServer

from bench.resp import Conn

from .limiters import Limiter, Replies

Stats = dict[str, tuple[int, int]]  # INFO commandstats: command -> (calls, usec)


@dataclass
class Run:
    replies: Replies  # in the stream's (identity, time) order
    seconds: float
    calls: Stats = field(default_factory=dict)  # at the end
    snapshots: list[Stats] = field(default_factory=list)  # after each chunk's replies

    def usec_per_request(self, stats: Sequence[str], requests: int) -> float:
        """Server time (INFO commandstats) of the limiter's commands, per request."""
        usec = sum(self.calls.get(s, (0, 0))[1] for s in stats)
        return usec / requests if requests else 0.0

    def usec_quantile(self, stats: Sequence[str], q: float = 0.25) -> float | None:
        """The q-quantile of the server time per request over the intervals between
        snapshots: on a shared machine noise only ever adds time, in some intervals, so
        a low quantile is the steadier estimate of the cost. The first of `stats` counts
        the requests (INCR for the fixed window, whose PEXPIREs add to its time)."""
        per = []
        for a, b in zip(self.snapshots, self.snapshots[1:], strict=False):
            n = b.get(stats[0], (0, 0))[0] - a.get(stats[0], (0, 0))[0]
            usec = sum(b.get(s, (0, 0))[1] - a.get(s, (0, 0))[1] for s in stats)
            if n >= 1000:
                per.append(usec / n)
        return float(np.quantile(per, q)) if len(per) >= 4 else None


def open_loop(srv: RedisServer, limiter: Limiter, ident: np.ndarray, t: np.ndarray,
              chunk: int = 20_000) -> Run:
    """Decides every request of a stream sorted by (identity, time); returns the replies
    in that same order."""
    order = np.argsort(t, kind="stable")  # time order; one identity's order is kept
    seq = np.arange(len(t), dtype=np.int64)  # unique per request (sliding log members)
    limiter.setup(srv.r)
    srv.r.config_resetstat()
    pipe = Conn(srv.port)
    started = time.perf_counter()

    def chunks() -> Iterator[tuple[bytes, int]]:
        for k in range(0, len(order), chunk):
            o = order[k:k + chunk]
            yield limiter.chunk(ident[o], t[o], seq[o])

    snapshots = [srv.commandstats()]
    parts = []
    try:
        for lines in pipe.replies(chunks()):
            parts.append(limiter.replies(lines))
            snapshots.append(srv.commandstats())
        tail, n = limiter.finish()
        if n:  # e.g. the fixed window's last PEXPIREs (counted in its server time)
            limiter.replies(next(pipe.replies([(tail, n)])))
    finally:
        pipe.close()
    seconds = time.perf_counter() - started
    sent = Replies.concat(parts)
    back = np.empty_like(order)
    back[order] = np.arange(len(order))
    replies = Replies(sent.allowed[back], sent.count[back],
                      None if sent.retry is None else sent.retry[back])
    return Run(replies, seconds, srv.commandstats(), snapshots)


@dataclass
class Client:
    """A closed-loop client: sends at `start`, then `gap` ms after an allowed request,
    or exactly `retry_after` ms after a denied one, until `end`."""

    ident: int
    start: int
    end: int
    gap: int = 1


@dataclass
class LoopRun:
    ident: np.ndarray
    t: np.ndarray
    allowed: np.ndarray
    count: np.ndarray
    retries: int  # requests sent exactly at a retry_after
    retries_denied: int  # ... and denied anyway: retry_after was too short
    seconds: float


def closed_loop(srv: RedisServer, limiter: Limiter, clients: list[Client]) -> LoopRun:
    """Runs the clients to their end, each denied one waiting the limiter's
    `retry_after` (-1: never again)."""
    limiter.setup(srv.r)
    ident = np.array([c.ident for c in clients], dtype=np.int64)
    now = np.array([c.start for c in clients], dtype=np.int64)
    end = np.array([c.end for c in clients], dtype=np.int64)
    gap = np.array([c.gap for c in clients], dtype=np.int64)
    is_retry = np.zeros(len(clients), dtype=bool)
    log_i, log_t, log_a, log_c = [], [], [], []
    retries = retries_denied = 0
    seq = 0
    pipe = Conn(srv.port)
    started = time.perf_counter()
    try:
        while True:
            live = np.flatnonzero(now < end)
            if not len(live):
                break
            ids, ts = ident[live], now[live]
            payload, lines = limiter.chunk(ids, ts, np.arange(seq, seq + len(live)))
            seq += len(live)
            rep = limiter.replies(next(pipe.replies([(payload, lines)])))
            retries += int(is_retry[live].sum())
            retries_denied += int((is_retry[live] & ~rep.allowed).sum())
            log_i.append(ids)
            log_t.append(ts)
            log_a.append(rep.allowed)
            log_c.append(rep.count)
            wait = np.where(rep.allowed, gap[live], limiter.retry_after(ts, rep))
            now[live] = np.where(wait < 0, end[live], ts + wait)
            is_retry[live] = ~rep.allowed
    finally:
        pipe.close()
    i, t = np.concatenate(log_i), np.concatenate(log_t)
    o = np.lexsort((t, i))  # stable: one client's order is its send order
    return LoopRun(i[o], t[o], np.concatenate(log_a)[o], np.concatenate(log_c)[o], retries,
                   retries_denied, time.perf_counter() - started)
