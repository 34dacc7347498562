"""Redis going away mid-test: fail-open keeps answering, fail-closed denies (503)."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import httpx
import pytest
import redis
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from servers import RedisServer
from slidingwindow import (
    AsyncSlidingWindowRateLimiter,
    SlidingWindowRateLimiter,
    connect,
    connect_async,
)
from slidingwindow.asgi import Policy, RateLimitMiddleware


def warnings(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "slidingwindow" and r.levelno == logging.WARNING]


def test_fail_open_sync(own_server: RedisServer, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="slidingwindow")
    errors: list[BaseException] = []
    limiter = SlidingWindowRateLimiter(connect(own_server.url), on_error=errors.append)
    assert [limiter.is_allowed("c", 2, 60)[0] for _ in range(3)] == [True, True, False]

    own_server.stop()
    started = time.monotonic()
    answers = [limiter.is_allowed("c", 2, 60) for _ in range(5)]
    degraded = limiter.check("c", 2, 60)
    assert answers == [(True, 0)] * 5
    assert degraded.allowed and degraded.degraded
    assert time.monotonic() - started < 2  # refused at once: no retry storm
    assert len(errors) == 6 and all(isinstance(e, redis.ConnectionError) for e in errors)
    assert len(warnings(caplog)) == 1
    assert "fail-open" in warnings(caplog)[0].getMessage()

    own_server.start()  # same port, empty: limiting resumes from scratch
    assert [limiter.is_allowed("c", 2, 60)[0] for _ in range(3)] == [True, True, False]
    assert len(errors) == 6 and len(warnings(caplog)) == 1
    assert any("reachable again" in r.getMessage() for r in caplog.records)


def test_hung_server_times_out_and_fails_open(own_server: RedisServer) -> None:
    errors: list[BaseException] = []
    limiter = SlidingWindowRateLimiter(connect(own_server.url, timeout=0.2),
                                       on_error=errors.append)
    assert limiter.is_allowed("h", 1, 60) == (True, 1)
    own_server.pause()  # the port still accepts; nothing answers
    try:
        started = time.monotonic()
        assert limiter.is_allowed("h", 1, 60) == (True, 0)
        assert time.monotonic() - started < 1.5
        assert isinstance(errors[0], redis.TimeoutError)
    finally:
        own_server.resume()
    assert limiter.is_allowed("h", 1, 60) == (False, 1)


def test_warning_interval_and_broken_hook(own_server: RedisServer,
                                          caplog: pytest.LogCaptureFixture) -> None:
    def hook(exc: BaseException) -> None:
        raise RuntimeError("the hook is broken")

    limiter = SlidingWindowRateLimiter(connect(own_server.url), on_error=hook, warn_interval=0.3)
    own_server.stop()
    assert limiter.is_allowed("w")[0]  # the hook raised; the request is still answered
    assert limiter.is_allowed("w")[0]
    time.sleep(0.35)
    assert limiter.is_allowed("w")[0]
    assert len(warnings(caplog)) == 2
    assert sum("hook raised" in r.getMessage() for r in caplog.records) == 3


def test_fail_closed_sync(own_server: RedisServer) -> None:
    limiter = SlidingWindowRateLimiter(connect(own_server.url), fail_open=False)
    assert limiter.is_allowed("c", 5, 60) == (True, 1)
    own_server.stop()
    assert limiter.is_allowed("c", 5, 60) == (False, 0)
    result = limiter.check("c", 5, 60)
    assert (result.allowed, result.degraded) == (False, True)


def hello(request: object) -> PlainTextResponse:
    return PlainTextResponse("hello")


def gateway(url: str, fail_open: bool) -> tuple[RateLimitMiddleware, list[BaseException], Any]:
    errors: list[BaseException] = []
    client = connect_async(url)
    limiter = AsyncSlidingWindowRateLimiter(client, fail_open=fail_open, on_error=errors.append)
    app = RateLimitMiddleware(Starlette(routes=[Route("/", hello)]), limiter,
                              {"/": Policy("all", 2, 60)})
    return app, errors, client


def test_middleware_fail_open(own_server: RedisServer, caplog: pytest.LogCaptureFixture) -> None:
    async def scenario() -> None:
        app, errors, client = gateway(own_server.url, fail_open=True)
        transport = httpx.ASGITransport(app=app, client=("198.51.100.1", 1))
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as http:
            assert [(await http.get("/")).status_code for _ in range(3)] == [200, 200, 429]
            own_server.stop()
            during = [await http.get("/") for _ in range(6)]
            assert [r.status_code for r in during] == [200] * 6
            assert all("x-ratelimit-limit" not in r.headers for r in during)
            assert len(errors) == 6 and len(warnings(caplog)) == 1
            own_server.start()
            assert [(await http.get("/")).status_code for _ in range(3)] == [200, 200, 429]
            assert len(warnings(caplog)) == 1
        await client.aclose()

    asyncio.run(scenario())


def test_middleware_fail_closed_answers_503(own_server: RedisServer) -> None:
    async def scenario() -> None:
        app, errors, client = gateway(own_server.url, fail_open=False)
        transport = httpx.ASGITransport(app=app, client=("198.51.100.1", 1))
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as http:
            assert (await http.get("/")).status_code == 200
            own_server.stop()
            r = await http.get("/")
            assert r.status_code == 503
            assert r.json()["error"] == "rate_limiter_unavailable"
            assert "x-ratelimit-limit" not in r.headers
            own_server.start()
            assert (await http.get("/")).status_code == 200
        await client.aclose()

    asyncio.run(scenario())


def test_out_of_memory_counts_as_unavailable(own_server: RedisServer) -> None:
    """maxmemory reached with noeviction: CHECK answers OOM (the command is deny-oom);
    that is the server's state, not a bad request, so fail-open applies. PEEK still works."""
    client = redis.Redis(port=own_server.port)
    errors: list[BaseException] = []
    limiter = SlidingWindowRateLimiter(client, on_error=errors.append)
    assert limiter.check("o", 1, 60, now=10).allowed
    client.config_set("maxmemory-policy", "noeviction")
    client.config_set("maxmemory", 1)
    try:
        result = limiter.check("o", 1, 60, now=10)
        assert (result.allowed, result.degraded) == (True, True)
        assert isinstance(errors[0], redis.exceptions.OutOfMemoryError)
        peeked = limiter.peek("o", 1, 60, now=10)
        assert (peeked.allowed, peeked.degraded) == (False, False)
    finally:
        client.config_set("maxmemory", 0)
    assert not limiter.check("o", 1, 60, now=10).allowed
    client.close()
