"""pytest fixtures giving tests real servers with the module, one per server kind.

A conftest.py imports the ones it uses (`from slidingwindow_testing.fixtures import
server_kind, redis_server`). Every test that uses `redis_server`, `own_server` or
`cluster` runs on each of the four servers, its id naming the server (`test_x[redis8]`).
"""

from __future__ import annotations

from typing import Iterator

import pytest

from .cluster import RedisClusterProcs
from .kinds import ALL_KINDS, KINDS, Kind
from .seed import in_ci, missing_reason, seed_path
from .server import RedisServer


@pytest.fixture(scope="session", params=list(KINDS), ids=list(KINDS))
def server_kind(request: pytest.FixtureRequest) -> Kind:
    """The four servers with the module; a test module adds the servers without it
    (LIBRARY_KINDS) through `parametrize_library_kinds` in its conftest."""
    return ALL_KINDS[request.param]


def parametrize_library_kinds(metafunc: pytest.Metafunc) -> None:
    """For a `pytest_generate_tests(tryfirst=True)`: run the test on ALL_KINDS (the
    module's servers and those without the module, where the client runs the Functions
    library). A parametrize mark, as pytest lets a test's own marks override a fixture's
    params."""
    if "server_kind" in metafunc.fixturenames:
        metafunc.definition.add_marker(pytest.mark.parametrize(
            "server_kind", list(ALL_KINDS), ids=list(ALL_KINDS), indirect=True,
            scope="session"))


@pytest.fixture(scope="session")
def redis_server(server_kind: Kind) -> Iterator[RedisServer]:
    """One server of each kind for the session; tests keep apart through their keys."""
    server = RedisServer(kind=server_kind).start()
    yield server
    server.cleanup()


@pytest.fixture
def own_server(server_kind: Kind) -> Iterator[RedisServer]:
    """A server of the test's own, which it may stop, pause and restart."""
    server = RedisServer(kind=server_kind).start()
    yield server
    server.cleanup()


@pytest.fixture(scope="session")
def cluster(server_kind: Kind) -> Iterator[RedisClusterProcs]:
    procs = RedisClusterProcs(server_kind).start()
    yield procs
    procs.cleanup()


@pytest.fixture(scope="session")
def seed_lua() -> str:
    """The seed's script text; SKIPPED with the reason without it (FAILED under CI=true)."""
    path = seed_path()
    if path is None:
        if in_ci():
            pytest.fail(f"{missing_reason()}; CI=true needs it", pytrace=False)
        pytest.skip(missing_reason())
    return path.read_text()
