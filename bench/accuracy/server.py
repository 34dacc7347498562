"""A redis-server with the module on a free loopback port, and a pipelined RESP driver.

The driver sends pre-encoded commands (bytes) in chunks of thousands, keeping one chunk
in flight while it reads the previous one's replies, on one connection: Redis runs one
connection's commands in the order sent, so every decision is exactly the one a client
calling one command at a time, in that order, would get.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import redis

from bench.redis_memory import settled_used_memory, wait_lazyfree

ROOT = Path(__file__).resolve().parents[2]
MODULE = ROOT / "target" / "release" / "libredis_slidingwindow.so"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    """redis-server --loadmodule MODULE on 127.0.0.1:<free port>; `stop()` ends it."""

    def __init__(self, binary: str, module: Path = MODULE) -> None:
        self.dir = tempfile.mkdtemp(prefix="swaccuracy-")
        self.port = free_port()
        args = [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                "--appendonly", "no", "--dir", self.dir, "--loadmodule", str(module),
                "--logfile", os.path.join(self.dir, "server.log")]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.r = redis.Redis(port=self.port, socket_timeout=600)
        deadline = time.time() + 20
        while True:
            try:
                self.r.ping()
                break
            except redis.ConnectionError:
                if self.proc.poll() is not None or time.time() > deadline:
                    log = Path(self.dir, "server.log").read_text(errors="replace")[-2000:]
                    self.stop()
                    raise RuntimeError(f"{binary} did not start:\n{log}") from None
                time.sleep(0.05)
        try:  # per-command latency histograms (Redis 7+): each command's first call after
            # CONFIG RESETSTAT allocates ~24 KB, which would blur the memory figures
            self.r.config_set("latency-tracking", "no")
        except redis.ResponseError:
            pass
        info = self.r.info("server")
        kind = "Valkey" if "valkey_version" in info else "Redis"
        self.name = f"{kind} {info.get('valkey_version') or info['redis_version']}"

    def stop(self) -> None:
        if self.proc.poll() is None:
            try:
                self.r.shutdown(nosave=True)
            except redis.RedisError:
                pass
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> Server:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def commandstats(self) -> dict[str, tuple[int, int]]:
        """command -> (calls, usec) since the last CONFIG RESETSTAT."""
        stats: dict[str, Any] = self.r.info("commandstats")
        return {k[len("cmdstat_"):]: (int(v["calls"]), int(v["usec"])) for k, v in stats.items()}

    def flush(self) -> None:
        self.r.execute_command("FLUSHALL", "SYNC")  # type: ignore[no-untyped-call]
        wait_lazyfree(self.r)

    def used_memory(self) -> int:
        return settled_used_memory(self.r)


class Pipe:
    """One connection; `run` sends chunks of commands and returns their reply lines."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock.settimeout(600)
        self.buf = b""
        self.lines = 0  # CRLFs in self.buf

    def close(self) -> None:
        self.sock.close()

    def _take(self, need: int) -> list[bytes]:
        """The next `need` reply lines (CRLF-terminated), without the CRLFs."""
        buf, have = self.buf, self.lines
        parts = [buf]
        last = buf[-1:]
        while have < need:
            d = self.sock.recv(1 << 22)
            if not d:
                raise ConnectionError("server closed the connection")
            have += d.count(b"\r\n") + (last == b"\r" and d[:1] == b"\n")
            last = d[-1:]
            parts.append(d)
        data = b"".join(parts)
        if data[:1] == b"-" or b"\r\n-" in data:  # an error reply: the run is wrong, stop
            at = 0 if data[:1] == b"-" else data.index(b"\r\n-") + 2
            raise RuntimeError(f"server error: {data[at:at + 200].decode(errors='replace')}")
        lines = data.split(b"\r\n", need)
        self.buf = lines.pop()
        self.lines = have - need
        return lines

    def run(self, chunks: Iterable[tuple[bytes, int]]) -> Iterator[list[bytes]]:
        """Send (payload, reply lines) chunks, one in flight ahead of the one being read,
        so the server never waits on the client; yields each chunk's reply lines."""
        pending = None
        for payload, lines in chunks:
            self.sock.sendall(payload)
            if pending is not None:
                yield self._take(pending)
            pending = lines
        if pending is not None:
            yield self._take(pending)


def ints(lines: list[bytes], index: np.ndarray) -> np.ndarray:
    """The integer replies at `index` among reply lines (each `:<n>`)."""
    picked = np.array(lines)[index]  # fixed-width bytes, e.g. b":57"
    width = picked.dtype.itemsize
    digits = np.ascontiguousarray(picked.view(np.uint8).reshape(-1, width)[:, 1:])
    return digits.view(f"S{width - 1}").ravel().astype(np.int64)
