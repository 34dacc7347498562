"""Fixtures for the gateway tests: the servers helper of the client's tests, and uvicorn."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Iterator

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1] / "clients" / "python" / "tests"))

from servers import RedisClusterProcs, RedisServer  # noqa: E402
from uvicorn_proc import Gateway  # noqa: E402


@pytest.fixture
def redis_server() -> Iterator[RedisServer]:
    server = RedisServer().start()
    yield server
    server.cleanup()


@pytest.fixture(scope="module")
def cluster() -> Iterator[RedisClusterProcs]:
    procs = RedisClusterProcs().start()
    yield procs
    procs.cleanup()


@pytest.fixture
def gateway_factory() -> Iterator[type[Gateway]]:
    started: list[Gateway] = []

    class Tracked(Gateway):
        def __init__(self, **env: str) -> None:
            super().__init__(**env)
            started.append(self)

    yield Tracked
    for g in started:
        g.stop()
