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
from slidingwindow_testing import Kind, RedisServer
from slidingwindow import library
from slidingwindow.core.backend import Backend, run_sync
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
    "test_asyncio", "test_backend", "test_counts_reset", "test_headers", "test_limiter",
    "test_limits_storage",
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
def check_cmdstat(redis_server: RedisServer, server_kind: Kind) -> str:
    """The INFO commandstats entry a CHECK is counted under on this server: the module's
    command, FCALL (the library loaded here) or EVALSHA (Redis 6.2, the script cached
    here), so a count of calls is one per CHECK whichever code answers."""
    if server_kind.module:
        return "cmdstat_slidingwindow.check"
    with redis.Redis(port=redis_server.port) as admin:
        if server_kind.name == "redis62":
            admin.script_load(library.BODY)
            return "cmdstat_evalsha"
        library.load(admin)
    return "cmdstat_fcall"


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
