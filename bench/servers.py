"""The servers the benchmark runs on: slidingwindow_testing's, with the benchmark's settings
and the few readings only the benchmark takes."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from resp import Conn, resp
from slidingwindow_testing import KINDS, RedisServer
from slidingwindow_testing.memory import wait_lazyfree

SHORTS = list(KINDS)  # redis7, redis8, valkey8, valkey9: the order of the columns
JUDGED = "redis7"  # the targets are judged on Redis 7.0; the others are reported alongside


def binary(short: str) -> str:
    """The server binary for `short`: its environment variable, else the packaged one."""
    try:
        return KINDS[short].binary
    except RuntimeError as e:
        raise SystemExit(str(e)) from None


class Server(RedisServer):
    """One started server with `modules` loaded (ours first), a database per case."""

    def __init__(self, short: str, binary_path: str, modules: Sequence[Path],
                 wrapper: Sequence[str] = (), start_timeout: float = 10) -> None:
        """`wrapper`: a command to run the server under (valgrind, for profiling)."""
        super().__init__(kind=KINDS[short], binary=binary_path, module=False,
                         modules=modules, wrapper=wrapper, start_timeout=start_timeout,
                         stop_timeout=60, extra=("--enable-debug-command", "local",
                                                 "--databases", "64"))
        self.short = short
        self.start()
        info = self.r.info("server")
        self.version: str = info.get("valkey_version") or info["redis_version"]
        self.malloc: str = self.r.info("memory").get("mem_allocator", "?")

    def module_counters(self) -> dict[str, int]:
        try:
            return {k: int(v) for k, v in self.r.info("slidingwindow").items()}
        except Exception:
            return {}  # an extra module's server without ours: no counters to compare

    def flush(self, db: int | None = None) -> None:
        """FLUSHALL SYNC, or FLUSHDB SYNC of one database; returns once freed."""
        if db is None:
            self.flushall()
            return
        # A raw connection: redis-py's pooled one would keep a SELECT.
        with Conn(self.port, db) as c:
            c.call(resp("FLUSHDB", "SYNC"), 1)
        wait_lazyfree(self.r)

    def dbsize(self, db: int) -> int:
        with Conn(self.port, db) as c:
            sink: list[bytes] = []
            c.call(resp("DBSIZE"), 1, sink)
        return int(b"".join(sink).strip()[1:])

    def describe(self) -> dict[str, Any]:
        return dict(short=self.short, server=self.name, version=self.version,
                    binary=self.binary, mem_allocator=self.malloc)
