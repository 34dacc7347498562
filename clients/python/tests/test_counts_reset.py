"""counts and reset (the Node client's `counts` / `reset`): COUNTS through the limiter, and
the key deleted with its deny-cache entries; sync and asyncio, on every server kind (the
module, and where there is none the Functions library: FCALL, or EVALSHA on Redis 6.2)."""

from __future__ import annotations

import asyncio
import time

import pytest
import redis
import redis.asyncio

from slidingwindow_testing import RedisServer
from slidingwindow import (
    AsyncSlidingWindowRateLimiter, DenyCache, SlidingWindowRateLimiter, WindowCounts,
)


def test_counts_is_the_windows_counts(r: redis.Redis, prefix: str) -> None:
    limiter = SlidingWindowRateLimiter(r, prefix=prefix)
    assert limiter.counts("a", 60, now=75) == WindowCounts(0, 0, 15)  # a missing key
    limiter.check("a", 5, 60, now=50)
    limiter.check("a", 5, 60, now=70, cost=2)
    assert limiter.counts("a", 60, now=75) == WindowCounts(1, 2, 15)
    assert limiter.counts("a", 60, now=130) == WindowCounts(2, 0, 10)  # a window later
    assert limiter.counts("a", 60, now=185) == WindowCounts(0, 0, 5)  # two windows later
    assert limiter.counts("a", 10, now=75) == WindowCounts(0, 0, 5)  # a window it does not hold
    # PEEK and COUNTS agree: peek at 75 weighs previous by (60 - 15) / 60
    c = limiter.counts("a", 60, now=75)
    assert limiter.peek("a", 5, 60, now=75).count == int(c.previous * 45 / 60) + c.current + 1
    # ms: a window of its own
    limiter.check("a", 5, 1500, ms=True, now=1_000_100)
    assert limiter.counts("a", 1500, ms=True, now=1_000_200) == WindowCounts(0, 1, 1_000_200 % 1500)
    assert limiter.counts("a", 1500, now=1_000_200) == WindowCounts(0, 0, 1_000_200 % 1500)


def test_counts_without_now_uses_the_server_clock(r: redis.Redis, prefix: str) -> None:
    limiter = SlidingWindowRateLimiter(r, prefix=prefix)
    limiter.check("a", 5, 3600)
    counts = limiter.counts("a", 3600)
    assert (counts.current + counts.previous, counts.degraded) == (1, False)
    assert 0 <= counts.elapsed < 3600


def test_reset_deletes_every_window_and_the_deny_cache_entries(r: redis.Redis, prefix: str) -> None:
    cache = DenyCache()
    limiter = SlidingWindowRateLimiter(r, prefix=prefix, deny_cache=cache)
    other = SlidingWindowRateLimiter(r, prefix=prefix)
    for _ in range(2):
        limiter.check_limits("a", [(2, 10), (5, 60)], now=100)
    other.check("b", 1, 10, now=100)
    refused = limiter.check_limits("a", [(2, 10), (5, 60)], now=100)
    assert not refused.allowed and len(cache) == 1
    assert limiter.reset("a") is None
    assert r.exists(limiter.key("a")) == 0 and len(cache) == 0
    assert r.exists(limiter.key("b")) == 1  # another id keeps its counts
    assert limiter.check_limits("a", [(2, 10), (5, 60)], now=100).allowed
    assert limiter.counts("a", 60, now=100) == WindowCounts(0, 1, 40)
    limiter.reset("nobody")  # a missing key: nothing to delete, no error


def test_reset_raises_an_outage() -> None:
    """There is nothing to answer instead of a reset: the outage is raised, not failed open."""
    limiter = SlidingWindowRateLimiter(redis.Redis(port=1, socket_connect_timeout=0.5))
    with pytest.raises(redis.ConnectionError):
        limiter.reset("a")


def test_counts_during_an_outage_is_degraded_zeros() -> None:
    for fail_open in (True, False):
        limiter = SlidingWindowRateLimiter(redis.Redis(port=1, socket_connect_timeout=0.5),
                                           fail_open=fail_open, backend="module")
        started = time.monotonic()
        assert limiter.counts("a", 60) == WindowCounts(0, 0, 0, degraded=True)
        assert limiter.counts("a", 60) == WindowCounts(0, 0, 0, degraded=True)  # the circuit: at once
        assert time.monotonic() - started < 5


def test_async_counts_and_reset(redis_server: RedisServer, prefix: str) -> None:
    async def scenario() -> None:
        client = redis.asyncio.Redis(port=redis_server.port)
        cache = DenyCache()
        limiter = AsyncSlidingWindowRateLimiter(client, prefix=prefix, deny_cache=cache)
        await limiter.check("a", 1, 60, now=70)
        assert await limiter.counts("a", 60, now=75) == WindowCounts(0, 1, 15)
        assert not (await limiter.check("a", 1, 60, now=75)).allowed and len(cache) == 1
        await limiter.reset("a")
        assert len(cache) == 0 and await client.exists(limiter.key("a")) == 0
        assert (await limiter.check("a", 1, 60, now=75)).allowed
        assert await limiter.counts("a", 60, now=75) == WindowCounts(0, 1, 15)
        await client.aclose()

    asyncio.run(scenario())
