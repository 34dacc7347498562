"""Fixtures giving tests real servers with the module, one per server kind.

Every test that uses `redis_server`, `own_server` or `cluster` runs on each of the four
servers, its id naming the server (`test_x[redis8]`). Imported by the conftest.py of
clients/python/tests and of the examples.
"""

from __future__ import annotations

from typing import Iterator

import pytest
from servers import KINDS, Kind, RedisClusterProcs, RedisServer


@pytest.fixture(scope="session", params=list(KINDS), ids=list(KINDS))
def server_kind(request: pytest.FixtureRequest) -> Kind:
    return KINDS[request.param]


@pytest.fixture(scope="session")
def redis_server(server_kind: Kind) -> Iterator[RedisServer]:
    """One server of each kind for the session; tests keep apart through `prefix`."""
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
