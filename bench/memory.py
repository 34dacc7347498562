"""Memory per tracked identity in steady state: each identity makes one request in a
window and one in the next (explicit `now`s), so the seed's layout holds two keys per
identity and the module's one; used_memory delta over an empty database, divided by the
identities."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from measure import Log
from resp import Conn, classify, resp
from servers import Server
from workloads import WINDOW, Case, ident, three_limits


@dataclass
class Layout:
    name: str
    build: Callable[[int, int], bytes]  # (identity, now) -> one encoded command
    keys_per_identity: int | None  # None: whatever it keeps (an extra command)
    lines: int
    all_allowed: bool  # every loading call must answer [1, n]


def layouts(sha: str | None, extra: Sequence[Case] = ()) -> list[Layout]:
    def module(i: int, t: int) -> bytes:
        return resp("SLIDINGWINDOW.CHECK", f"rate:{i}", 1000, WINDOW, t)

    def module3(i: int, t: int) -> bytes:
        return resp("SLIDINGWINDOW.CHECK", f"rate:{i}", 1000, WINDOW, t, *three_limits(1000))

    def seed(i: int, t: int) -> bytes:
        w = t // WINDOW
        return resp("EVALSHA", sha, 2, f"rate:{i}:{w}", f"rate:{i}:{w - 1}", 1000, WINDOW, t)

    out = [Layout("module", module, 1, 3, True),
           *([Layout("seed", seed, 2, 3, True)] if sha is not None else []),
           Layout("module, 3 windows", module3, 1, 3, True)]
    # An extra command, called at now-window then now for each identity (keys
    # `mem<j>:<id>`): whatever layout it keeps is what it costs.
    for c in extra:
        out.append(Layout(c.key, encoder(c), None, c.lines or 1, False))
    return out


def encoder(c: Case) -> Callable[[int, int], bytes]:
    return lambda i, t: resp(*c.cmd(ident(i), t))


def measure(srv: Server, todo: Sequence[Layout], identities: int, now: int,
            log: Log) -> dict[str, dict[str, Any]]:
    out = {}
    for lay in todo:
        srv.flush()
        with Conn(srv.port) as conn:
            conn.call(resp("PING"), 1)
            before = srv.used_memory()
            t0 = time.perf_counter()
            replies: list[bytes] = []
            step = 2000
            for t in (now - WINDOW, now):
                conn.pump(((b"".join(lay.build(i, t) for i in range(k, min(k + step, identities))),
                            lay.lines * (min(k + step, identities) - k))
                           for k in range(0, identities, step)), replies)
            load_s = time.perf_counter() - t0
            data = b"".join(replies)
            after = srv.used_memory()
            dbsize = int(srv.r.dbsize())
        errors = classify(data, None, None)[2]
        allowed = data.count(b"*2\r\n:1\r\n") if lay.all_allowed else None
        res = dict(identities=identities, used_before=before, used_after=after,
                   bytes_per_identity=(after - before) / identities, dbsize=dbsize,
                   keys_per_identity=lay.keys_per_identity, load_seconds=load_s,
                   errors=errors, allowed=allowed)
        problems = []
        if errors:
            problems.append(f"{errors} error replies")
        if lay.keys_per_identity and dbsize != identities * lay.keys_per_identity:
            problems.append(f"dbsize {dbsize}, expected {identities * lay.keys_per_identity}")
        if allowed is not None and allowed != 2 * identities:
            problems.append(f"{allowed}/{2 * identities} loading calls allowed")
        if problems:
            raise RuntimeError(f"{srv.name} memory {lay.name}: " + "; ".join(problems))
        res["verified"] = True
        out[lay.name] = res
        log(f"  memory {lay.name:8s} {res['bytes_per_identity']:7.1f} B/identity "
            f"({dbsize} keys, loaded in {load_s:.1f}s)")
    srv.flush()
    return out
