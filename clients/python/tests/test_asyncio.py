"""The asyncio twin with redis.asyncio: same answers, atomic under concurrency, cluster."""

from __future__ import annotations

import asyncio

import pytest
import redis
import redis.asyncio
import redis.asyncio.cluster

from slidingwindow_testing import RedisClusterProcs, RedisServer
from slidingwindow import (
    AsyncSlidingWindowRateLimiter,
    RateLimitResult,
    SlidingWindowRateLimiter,
    connect_async,
)


def test_same_answers_as_sync(redis_server: RedisServer, r: redis.Redis, prefix: str) -> None:
    sync = SlidingWindowRateLimiter(r, prefix=f"{prefix}s:")

    async def scenario() -> None:
        client = redis.asyncio.Redis(port=redis_server.port)
        limiter = AsyncSlidingWindowRateLimiter(client, prefix=f"{prefix}a:")
        for now in (100, 100, 100, 100, 104, 111, 111):
            for ms in (False, True):
                at, window = (now * 1000, 10_000) if ms else (now, 10)
                assert await limiter.peek("x", 5, window, cost=2, ms=ms, now=at) == sync.peek(
                    "x", 5, window, cost=2, ms=ms, now=at)
                assert await limiter.check("x", 5, window, cost=2, ms=ms, now=at) == sync.check(
                    "x", 5, window, cost=2, ms=ms, now=at)
            assert await limiter.is_allowed("y", 2, 10, now=now) == sync.is_allowed("y", 2, 10,
                                                                                     now=now)
        with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
            await client.rpush(f"{prefix}a:l", 1)
            await limiter.check("l", 1, 1)
        await client.aclose()

    asyncio.run(scenario())


def test_concurrent_checks_are_atomic(redis_server: RedisServer, prefix: str) -> None:
    """200 concurrent checks through a pool of 8 connections: exactly `limit` pass. The
    pool makes requests wait for a connection; a non-blocking pool would raise
    MaxConnectionsError, which fail-open would count as allowed."""

    async def scenario() -> list[RateLimitResult]:
        client = connect_async(redis_server.url, max_connections=8)
        limiter = AsyncSlidingWindowRateLimiter(client, prefix=prefix)
        results = await asyncio.gather(*(limiter.check("hot", 25, 60, now=50)
                                         for _ in range(200)))
        await client.aclose()
        return results

    results = asyncio.run(scenario())
    assert sum(r.allowed for r in results) == 25
    assert sorted(r.count for r in results if r.allowed) == list(range(1, 26))


def test_async_cluster(cluster: RedisClusterProcs, prefix: str) -> None:
    async def scenario() -> None:
        client = connect_async(cluster.url, cluster=True)
        assert isinstance(client, redis.asyncio.cluster.RedisCluster)
        limiter = AsyncSlidingWindowRateLimiter(client, prefix=prefix)
        for i in range(20):
            got = [await limiter.is_allowed(f"u{i}", 2, 60, now=7) for _ in range(3)]
            assert got == [(True, 1), (True, 2), (False, 2)]
            assert (await limiter.peek(f"u{i}", 2, 60, now=67)).retry_after == -1
        await client.aclose()

    asyncio.run(scenario())
