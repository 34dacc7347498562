"""`python3 -m slidingwindow.library`, the operator's loader, run as a user runs it: no
runpy RuntimeWarning, it loads the library on Redis 7 (and says so again without loading
it twice), and on Redis 6.2 (no FUNCTION) it says nothing needs loading and exits 0."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Iterator

import pytest
import redis
from slidingwindow_testing import RedisServer
from slidingwindow_testing.kinds import KINDS, LIBRARY_KINDS
from slidingwindow import library


def run_helper(url: str) -> subprocess.CompletedProcess[str]:
    # -W default: warnings shown even where the interpreter would hide them.
    return subprocess.run([sys.executable, "-W", "default", "-m", "slidingwindow.library", url],
                          capture_output=True, text=True, timeout=60, env=dict(os.environ))


@pytest.fixture
def redis7() -> Iterator[RedisServer]:
    server = RedisServer(kind=KINDS["redis7"], module=False).start()
    yield server
    server.cleanup()


@pytest.fixture
def redis62() -> Iterator[RedisServer]:
    server = RedisServer(kind=LIBRARY_KINDS["redis62"]).start()
    yield server
    server.cleanup()


def test_loads_on_redis7_without_a_warning(redis7: RedisServer) -> None:
    done = run_helper(redis7.url)
    assert done.returncode == 0, done.stderr
    assert "RuntimeWarning" not in done.stderr and "Warning" not in done.stderr, done.stderr
    assert done.stdout == f"server: library {library.VERSION} loaded\n"
    with redis.Redis(port=redis7.port) as r:
        assert r.execute_command("FCALL_RO", "slidingwindow_version", 0) == library.VERSION.encode()
    again = run_helper(redis7.url)
    assert (again.returncode, again.stderr) == (0, "")
    assert again.stdout == f"server: library {library.VERSION} already loaded\n"


def test_redis62_needs_nothing_loaded(redis62: RedisServer) -> None:
    done = run_helper(redis62.url)
    assert (done.returncode, done.stderr) == (0, ""), done.stderr
    assert done.stdout == f"server: {library.NO_FUNCTIONS}\n"
    assert "nothing needs loading" in done.stdout and "EVALSHA" in done.stdout
    with redis.Redis(port=redis62.port) as r:
        assert r.info("server")["redis_version"].startswith("6.2")


def test_public_names_stay() -> None:
    assert {"CODE", "BODY", "SHA", "VERSION", "LOAD_COMMAND", "LOAD_HELPER", "load", "main",
            "is_older", "version_tuple"} <= set(dir(library))
    assert library.CODE.startswith("#!lua") and library.BODY in library.CODE
