"""Fixtures: real servers with the module, started here and always stopped at teardown.

The test modules in ON_LIBRARY_SERVERS (the module-facing ones) also run on the servers
without the module (slidingwindow_testing.LIBRARY_KINDS: `<kind>-managed`, redis62),
where the client's default backend runs the Functions library.
"""

from __future__ import annotations

import uuid
from typing import Any, Callable, Iterator

import pytest
import redis
from slidingwindow_testing import RedisServer
from slidingwindow.backend import Backend, run_sync
from slidingwindow_testing.fixtures import (
    cluster,
    own_server,
    parametrize_library_kinds,
    redis_server,
    seed_lua,
    server_kind,
)

__all__ = ["cluster", "own_server", "redis_server", "seed_lua", "server_kind"]


ON_LIBRARY_SERVERS = {
    "test_asyncio", "test_backend", "test_headers", "test_limiter", "test_limits_storage",
    "test_multi_limit", "test_refund",
}


@pytest.hookimpl(tryfirst=True)  # before pytest gives server_kind its own params
def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if metafunc.module.__name__.rsplit(".", 1)[-1] in ON_LIBRARY_SERVERS:
        parametrize_library_kinds(metafunc)


@pytest.fixture
def sw(r: redis.Redis) -> Callable[..., Any]:
    """Sends a module command (`sw("SLIDINGWINDOW.PEEK", key, 10, 60)`) as the server
    takes it: the module's command, or the library's function where it has no module."""
    backend = Backend("auto")
    return lambda *args: run_sync(r, backend.steps(args))


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
