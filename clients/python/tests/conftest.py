"""Fixtures: real servers with the module, started here and always stopped at teardown."""

from __future__ import annotations

import uuid
from typing import Iterator

import pytest
import redis
from slidingwindow_testing import RedisServer
from slidingwindow_testing.fixtures import cluster, own_server, redis_server, seed_lua, server_kind

__all__ = ["cluster", "own_server", "redis_server", "seed_lua", "server_kind"]


@pytest.fixture
def r(redis_server: RedisServer) -> Iterator[redis.Redis]:
    client = redis.Redis(port=redis_server.port)
    yield client
    client.close()


@pytest.fixture
def prefix() -> str:
    """A key prefix no other test uses."""
    return f"t{uuid.uuid4().hex[:12]}:"


FIGURES: list[str] = []


@pytest.fixture
def figures(request: pytest.FixtureRequest) -> list[str]:
    """Measured figures a test reports; printed together at the end of the run."""

    class Figures(list[str]):
        def append(self, line: str) -> None:
            FIGURES.append(f"{request.node.name}: {line}")

    return Figures()


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if FIGURES:
        terminalreporter.section("measured figures")
        for line in FIGURES:
            terminalreporter.write_line(line)
