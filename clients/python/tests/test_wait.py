"""wait / acquire: sleeping exactly retry_after, on the server's clock, never past the timeout.

With whole seconds and a 1-second window, "2 per second" means at most 2 requests in any
two consecutive seconds (the previous second weighs fully at every whole second). So from
just after a second boundary s0, sequential waiters get through at s0, s0, then, after
one denial with retry_after 2 and a sleep of exactly 2 s, at s0+2, s0+2: 4 in 2 s, the
most that limit allows. A fifth, with a 0.5 s timeout, sleeps 0.5 s and gives up denied.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import redis
import redis.asyncio

from slidingwindow_testing import DEFAULT_KIND, RedisServer
from slidingwindow import AsyncSlidingWindowRateLimiter, SlidingWindowRateLimiter


class CountingRedis(redis.Redis):
    """A real client that counts the CHECKs it sends (to show there is no busy loop)."""

    checks = 0

    def execute_command(self, *args: Any, **options: Any) -> Any:
        self.checks += args[0] == "SLIDINGWINDOW.CHECK"
        return super().execute_command(*args, **options)


class AsyncCountingRedis(redis.asyncio.Redis):
    checks = 0

    async def execute_command(self, *args: Any, **options: Any) -> Any:
        self.checks += args[0] == "SLIDINGWINDOW.CHECK"
        return await super().execute_command(*args, **options)


def sleep_to_second_boundary(port: int) -> None:
    """Until 30 ms after the server's clock next turns a second."""
    client = redis.Redis(port=port)
    seconds, micros = client.time()
    client.close()
    time.sleep(1.03 - micros / 1e6)


def test_wait_lets_exactly_the_limit_through(redis_server: RedisServer, prefix: str) -> None:
    client = CountingRedis(port=redis_server.port)
    limiter = SlidingWindowRateLimiter(client, prefix=prefix)
    sleep_to_second_boundary(redis_server.port)
    started = time.monotonic()
    results = [limiter.wait("job", 2, 1, timeout=10) for _ in range(4)]
    span = time.monotonic() - started
    assert [(r.allowed, r.count) for r in results] == [(True, 1), (True, 2), (True, 1), (True, 2)]
    assert client.checks == 5  # one denial, one exact sleep, then allowed: no busy loop
    assert 2.0 <= span < 3.0

    started = time.monotonic()
    gave_up = limiter.wait("job", 2, 1, timeout=0.5)
    waited = time.monotonic() - started
    assert (gave_up.allowed, gave_up.degraded) == (False, False)
    assert gave_up.retry_after >= 1
    assert client.checks == 7  # denied, slept the 0.5 s left, denied again: returned
    assert 0.5 <= waited < 1.5
    assert not limiter.acquire("job", 2, 1, timeout=0)
    client.close()


def test_wait_returns_at_once_when_it_can_never_pass(redis_server: RedisServer,
                                                     prefix: str) -> None:
    client = CountingRedis(port=redis_server.port)
    limiter = SlidingWindowRateLimiter(client, prefix=prefix)
    started = time.monotonic()
    never = limiter.wait("big", 3, 60, timeout=30, cost=4)  # cost > limit
    assert (never.allowed, never.retry_after) == (False, -1)
    assert client.checks == 1 and time.monotonic() - started < 5
    client.close()


def test_async_wait_lets_exactly_the_limit_through(prefix: str) -> None:
    server = RedisServer(kind=DEFAULT_KIND).start()  # the client's side: one server kind

    async def scenario() -> None:
        client = AsyncCountingRedis(port=server.port)
        limiter = AsyncSlidingWindowRateLimiter(client, prefix=prefix)
        sleep_to_second_boundary(server.port)
        started = time.monotonic()
        results = [await limiter.wait("job", 2, 1, timeout=10) for _ in range(4)]
        span = time.monotonic() - started
        assert [(r.allowed, r.count) for r in results] == [
            (True, 1), (True, 2), (True, 1), (True, 2)]
        assert client.checks == 5 and 2.0 <= span < 3.0
        started = time.monotonic()
        assert not await limiter.acquire("job", 2, 1, timeout=0.5)
        assert client.checks == 7 and 0.5 <= time.monotonic() - started < 1.5
        await client.aclose()

    try:
        asyncio.run(scenario())
    finally:
        server.cleanup()
