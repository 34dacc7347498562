"""One redis-server / valkey-server child process on a loopback port.

With the module by default (unless the kind says otherwise: `Kind.module`, `Kind.extra`,
e.g. the `-managed` kinds); `module=False` for none, `modules` for more (another module
to compare with), `extra` for any other configuration, e.g. a server that refuses
modules as a managed service does:

    RedisServer(module=False, extra=("--enable-module-command", "no")).start()
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Optional

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from .kinds import DEFAULT_KIND, Kind
from .memory import settled_used_memory, wait_lazyfree
from .paths import require_module
from .ports import cluster_port


class RedisServer:
    """`start()` starts it and waits until it answers; `stop()` and `start()` again keep
    the port; `cleanup()` stops it and removes its directory."""

    def __init__(self, port: Optional[int] = None, *, kind: Kind = DEFAULT_KIND,
                 binary: Optional[str] = None, extra: Sequence[str] = (),
                 module: Optional[bool] = None, modules: Sequence[Path] = (),
                 wrapper: Sequence[str] = (), start_timeout: float = 10.0,
                 stop_timeout: float = 10.0) -> None:
        """`binary` replaces the kind's; `wrapper` is a command to run the server under
        (valgrind, when profiling)."""
        if module is None:
            module = kind.module
        self.loaded = [*((require_module(),) if module else ()), *modules]
        self.port = port or cluster_port()
        self.kind = kind
        self.binary = binary or kind.binary
        self.extra = (*kind.extra, *extra)
        self.wrapper = tuple(wrapper)
        self.start_timeout, self.stop_timeout = start_timeout, stop_timeout
        self.dir = Path(tempfile.mkdtemp(prefix=f"sw-{kind.name}-{self.port}-"))
        self.proc: Optional[subprocess.Popen[bytes]] = None
        self._control: Optional[redis.Redis] = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, *, loading_ok: bool = False) -> RedisServer:
        """Starts it and waits until it answers (with `loading_ok`, LOADING counts)."""
        args = [
            *self.wrapper, self.binary, "--port", str(self.port), "--bind", "127.0.0.1",
            "--save", "", "--appendonly", "no", "--dir", str(self.dir),
            *(a for m in self.loaded for a in ("--loadmodule", str(m))), *self.extra,
        ]
        with open(self.dir / "server.log", "ab") as log:
            self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
        try:
            self.wait_ready(self.start_timeout, loading_ok)
        except BaseException:
            self.stop()
            raise
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
                except (redis.ConnectionError, redis.TimeoutError):
                    pass  # not up yet, or slow to answer on a loaded machine
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{self.binary} did not answer: {self.log()}")
                time.sleep(0.02)
        finally:
            client.close()

    def log(self) -> str:
        return (self.dir / "server.log").read_text(errors="replace")[-2000:]

    def stop(self) -> None:
        if self._control is not None:
            self._control.close()
            self._control = None
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)  # in case a test paused it
            self.proc.terminate()
            try:
                self.proc.wait(self.stop_timeout)
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

    def __enter__(self) -> RedisServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.cleanup()

    # What the benchmarks read, through one long-lived control connection.

    @property
    def r(self) -> redis.Redis:
        """A control connection, with a timeout long enough for a benchmark's bulk load."""
        if self._control is None:
            self._control = redis.Redis(port=self.port, socket_timeout=600)
        return self._control

    @property
    def name(self) -> str:
        """e.g. "Redis 7.0.15" or "Valkey 9.1.2"."""
        info: dict[str, Any] = self.r.info("server")
        if "valkey_version" in info:
            return f"Valkey {info['valkey_version']}"
        return f"Redis {info['redis_version']}"

    def commandstats(self) -> dict[str, tuple[int, int]]:
        """command -> (calls, usec) since the last CONFIG RESETSTAT."""
        stats: dict[str, Any] = self.r.info("commandstats")
        return {k[len("cmdstat_"):]: (int(v["calls"]), int(v["usec"])) for k, v in stats.items()}

    def flushall(self) -> None:
        """FLUSHALL SYNC; returns once the memory is freed."""
        self.r.execute_command("FLUSHALL", "SYNC")  # type: ignore[no-untyped-call]
        wait_lazyfree(self.r)

    def used_memory(self) -> int:
        return settled_used_memory(self.r)
