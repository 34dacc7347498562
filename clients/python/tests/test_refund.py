"""refund() and refund_limits(): SLIDINGWINDOW.REFUND through both limiters, on every
server kind. Each reply is compared with a PEEK right after; each test also shows the
count given back (so a refund that did nothing would fail it)."""

from __future__ import annotations

import asyncio
from typing import Iterator

import pytest
import redis
import redis.asyncio
from slidingwindow_testing import DEFAULT_KIND, RedisServer
from slidingwindow_testing.cluster import RedisClusterProcs
from slidingwindow import (
    AsyncSlidingWindowRateLimiter,
    MultiLimitResult,
    RateLimitResult,
    SlidingWindowRateLimiter,
    connect,
    connect_async,
)


@pytest.fixture
def limiter(r: redis.Redis, prefix: str) -> SlidingWindowRateLimiter:
    return SlidingWindowRateLimiter(r, prefix=prefix)


def test_refund_gives_back_and_answers_peek(limiter: SlidingWindowRateLimiter) -> None:
    assert [limiter.check("a", 3, 60, now=100).allowed for _ in range(4)] == [
        True, True, True, False]
    back = limiter.refund("a", 3, 60, now=100)
    assert isinstance(back, RateLimitResult)
    assert back == limiter.peek("a", 3, 60, now=100)
    # 2 held after the refund; PEEK's count includes the request it asks about: 3.
    assert (back.allowed, back.count, back.remaining) == (True, 3, 0)
    assert limiter.check("a", 3, 60, now=100).allowed  # the refunded unit is usable again
    assert not limiter.check("a", 3, 60, now=100).allowed


def test_refund_cost_ms_and_floor(limiter: SlidingWindowRateLimiter, r: redis.Redis) -> None:
    assert limiter.check("c", 10, 1000, cost=4, ms=True, now=5000).count == 4
    back = limiter.refund("c", 10, 1000, cost=3, ms=True, now=5000)
    assert back == limiter.peek("c", 10, 1000, cost=3, ms=True, now=5000)
    assert (back.count, back.ms) == (1 + 3, True)
    assert limiter.peek("c", 10, 1000, ms=True, now=5000).count == 1 + 1  # 1 held
    # Never below 0: a refund larger than what is held leaves 0.
    back = limiter.refund("c", 10, 1000, cost=9, ms=True, now=5000)
    assert back == limiter.peek("c", 10, 1000, cost=9, ms=True, now=5000)
    assert limiter.peek("c", 10, 1000, ms=True, now=5000).count == 0 + 1
    # A key that does not exist: nothing given back, nothing written.
    assert limiter.refund("none", 10, 60, now=5) == limiter.peek("none", 10, 60, now=5)
    assert r.exists(limiter.key("none")) == 0


def test_refund_limits(limiter: SlidingWindowRateLimiter) -> None:
    rates = "2/10 seconds;3/minute"
    got = [limiter.check_limits("m", rates, now=100) for _ in range(3)]
    assert [g.allowed for g in got] == [True, True, False]
    back = limiter.refund_limits("m", rates, now=100)
    assert isinstance(back, MultiLimitResult)
    assert back == limiter.peek_limits("m", rates, now=100)
    # A rate string is in ms (now too): 2 per 10,000 ms and 3 per 60,000 ms at 100 ms.
    assert [(x.window, x.count) for x in back.limits] == [(10_000, 2), (60_000, 2)]  # 1 held + 1
    assert back.allowed
    # Pairs and a cost, as check_limits takes them.
    assert limiter.check_limits("p", [(5, 10), (9, 60)], cost=2, now=7).allowed
    back = limiter.refund_limits("p", [(5, 10), (9, 60)], cost=2, now=7)
    assert back == limiter.peek_limits("p", [(5, 10), (9, 60)], cost=2, now=7)
    assert [x.count for x in back.limits] == [0 + 2, 0 + 2]  # none held, plus this cost


def test_refund_keeps_expiry(limiter: SlidingWindowRateLimiter, r: redis.Redis) -> None:
    limiter.check("e", 5, 60)
    ttl = r.pttl(limiter.key("e"))
    assert ttl > 0
    limiter.refund("e", 5, 60)
    assert 0 < r.pttl(limiter.key("e")) <= ttl


def test_async_refund(redis_server: RedisServer, prefix: str) -> None:
    async def scenario() -> None:
        client = redis.asyncio.Redis(port=redis_server.port)
        limiter = AsyncSlidingWindowRateLimiter(client, prefix=prefix)
        try:
            for _ in range(3):
                assert (await limiter.check("a", 3, 60, now=100)).allowed
            back = await limiter.refund("a", 3, 60, now=100)
            assert back == await limiter.peek("a", 3, 60, now=100)
            assert back.count == 2 + 1
            rates = [(2, 10), (4, 60)]
            for _ in range(2):
                assert (await limiter.check_limits("m", rates, now=100)).allowed
            multi = await limiter.refund_limits("m", rates, now=100)
            assert multi == await limiter.peek_limits("m", rates, now=100)
            assert [x.count for x in multi.limits] == [2, 2]  # 1 held + this request
            assert (await limiter.check_limits("m", rates, now=100)).allowed
            assert not (await limiter.check_limits("m", rates, now=100)).allowed
        finally:
            await client.aclose()

    asyncio.run(scenario())


def test_refund_on_a_cluster(cluster: RedisClusterProcs, prefix: str) -> None:
    client = connect(cluster.url, cluster=True)
    try:
        limiter = SlidingWindowRateLimiter(client, prefix=prefix)
        for i in range(20):  # keys on every node
            assert limiter.check_limits(f"k{i}", "1/minute;5/hour", now=10).allowed
            back = limiter.refund_limits(f"k{i}", "1/minute;5/hour", now=10)
            assert back == limiter.peek_limits(f"k{i}", "1/minute;5/hour", now=10)
            assert limiter.check_limits(f"k{i}", "1/minute;5/hour", now=10).allowed
    finally:
        client.close()


# -- outages: a refund never raises there, gives nothing back, and probes with PEEK ---

@pytest.fixture
def lone() -> Iterator[RedisServer]:
    server = RedisServer(kind=DEFAULT_KIND).start()
    yield server
    server.cleanup()


@pytest.mark.parametrize("fail_open", [True, False])
def test_refund_during_an_outage(lone: RedisServer, fail_open: bool) -> None:
    errors: list[BaseException] = []
    limiter = SlidingWindowRateLimiter(connect(lone.url), fail_open=fail_open,
                                       on_error=errors.append, probe_interval=60)
    assert limiter.check("o", 5, 60).allowed
    lone.stop()
    back = limiter.refund("o", 5, 60)
    assert back == RateLimitResult.unavailable(fail_open, 5, 60, False)
    assert back.degraded and len(errors) == 1
    multi = limiter.refund_limits("o", "5/minute;50/hour")  # answered at once, no call
    assert multi.degraded and multi.allowed is fail_open and len(errors) == 1


def test_async_refund_during_an_outage(lone: RedisServer) -> None:
    async def scenario() -> None:
        limiter = AsyncSlidingWindowRateLimiter(connect_async(lone.url), probe_interval=60)
        assert (await limiter.check("o", 5, 60)).allowed
        lone.stop()
        back = await limiter.refund("o", 5, 60)
        assert back.degraded and back.allowed
        assert (await limiter.refund_limits("o", [(5, 60), (9, 600)])).degraded

    asyncio.run(scenario())


