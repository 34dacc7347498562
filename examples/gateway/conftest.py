"""Fixtures for the gateway tests: the servers of the client's tests (one per server kind,
as there), and uvicorn."""

from __future__ import annotations

from typing import Iterator

import pytest
from slidingwindow_testing import Kind, RedisServer
from slidingwindow_testing.fixtures import cluster, server_kind
from uvicorn_proc import Gateway

__all__ = ["cluster", "server_kind"]


@pytest.fixture
def redis_server(server_kind: Kind) -> Iterator[RedisServer]:
    """A fresh server per test: the tests list every key the gateway wrote."""
    server = RedisServer(kind=server_kind).start()
    yield server
    server.cleanup()


@pytest.fixture(params=["asgi", "wsgi"])
def gateway_factory(request: pytest.FixtureRequest) -> Iterator[type[Gateway]]:
    """Starts the ASGI gateway (uvicorn) or its WSGI twin (examples/wsgi-gateway, under
    flask run): the same tests for both."""
    started: list[Gateway] = []
    flavor = str(request.param)

    class Tracked(Gateway):
        def __init__(self, **env: str) -> None:
            super().__init__(flavor, **env)
            started.append(self)

    yield Tracked
    for g in started:
        g.stop()
