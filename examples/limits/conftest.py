"""Fixtures for the flask-limiter and slowapi examples: a real server with the module."""

from __future__ import annotations

from typing import Iterator

import pytest
from slidingwindow_testing import RedisServer


@pytest.fixture
def redis_server() -> Iterator[RedisServer]:
    server = RedisServer().start()
    yield server
    server.cleanup()
