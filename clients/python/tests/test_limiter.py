"""check / peek against a real server: details, cost, milliseconds, errors, cluster."""

from __future__ import annotations

import pytest
import redis
import redis.cluster

from slidingwindow_testing import Kind, RedisClusterProcs, RedisServer
from slidingwindow import RateLimitResult, SlidingWindowRateLimiter, connect


@pytest.fixture
def limiter(r: redis.Redis, prefix: str) -> SlidingWindowRateLimiter:
    return SlidingWindowRateLimiter(r, prefix=prefix)


def test_check_details(limiter: SlidingWindowRateLimiter) -> None:
    got = [limiter.check("a", 3, 10, now=100) for _ in range(4)]
    assert [g.allowed for g in got] == [True, True, True, False]
    assert [g.count for g in got] == [1, 2, 3, 3]
    assert [g.remaining for g in got] == [2, 1, 0, 0]
    assert got[3] == RateLimitResult(False, 3, 3, 0, 11, 17, 10, False)
    # Retry-After is exact: denied one second earlier, allowed then.
    assert not limiter.peek("a", 3, 10, now=110).allowed
    assert limiter.check("a", 3, 10, now=111).allowed


def test_peek_changes_nothing(r: redis.Redis, limiter: SlidingWindowRateLimiter,
                              prefix: str) -> None:
    assert limiter.peek("p", 1, 60, now=5).allowed
    assert r.exists(f"{prefix}p") == 0
    limiter.check("p", 1, 60, now=5)
    before = r.get(f"{prefix}p")
    assert limiter.peek("p", 1, 60, now=6) == limiter.check("p", 1, 60, now=6)
    assert r.get(f"{prefix}p") == before  # the denied check changed nothing either


def test_cost_and_milliseconds(limiter: SlidingWindowRateLimiter) -> None:
    first = limiter.check("m", 10, 1500, cost=4, ms=True, now=30_000)
    assert (first.allowed, first.count, first.remaining, first.ms) == (True, 4, 6, True)
    assert limiter.check("m", 10, 1500, cost=6, ms=True, now=30_001).allowed
    denied = limiter.check("m", 10, 1500, cost=1, ms=True, now=30_002)
    assert not denied.allowed and denied.retry_after > 0
    assert not limiter.peek("m", 10, 1500, ms=True, now=30_002 + denied.retry_after - 1).allowed
    assert limiter.peek("m", 10, 1500, ms=True, now=30_002 + denied.retry_after).allowed
    # A cost above the limit can never pass: no retry time.
    never = limiter.check("m2", 3, 60, cost=4, now=0)
    assert (never.allowed, never.retry_after, never.retry_after_seconds) == (False, -1, None)


def test_server_clock_by_default(limiter: SlidingWindowRateLimiter) -> None:
    # An hour-long window: the answers only change if a call stalls across the hour.
    assert limiter.is_allowed("clock", 2, 3600) == (True, 1)
    assert limiter.is_allowed("clock", 2, 3600) == (True, 2)
    assert limiter.is_allowed("clock", 2, 3600) == (False, 2)
    assert limiter.check("clock-ms", 1, 250, ms=True).allowed


def test_request_errors_are_raised_even_fail_open(r: redis.Redis, prefix: str) -> None:
    calls: list[BaseException] = []
    limiter = SlidingWindowRateLimiter(r, prefix=prefix, on_error=calls.append)
    r.rpush(f"{prefix}list", "x")
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        limiter.is_allowed("list", 10, 60)
    with pytest.raises(redis.ResponseError, match="limit must be an integer"):
        limiter.check("x", -1, 60)
    with pytest.raises(redis.ResponseError, match="window must be an integer"):
        limiter.peek("x", 1, 0)
    with pytest.raises(TypeError):
        limiter.check("x", "10", 60)  # type: ignore[arg-type]
    assert calls == [] and not limiter.circuit.down  # none of these is an outage


def test_missing_module_is_an_error_not_an_outage(server_kind: Kind) -> None:
    """backend="module" where the module is not loaded: its error, raised; the default
    backend runs the library there instead."""
    server = RedisServer(kind=server_kind, module=False).start()
    plain = redis.Redis(port=server.port)
    limiter = SlidingWindowRateLimiter(plain, backend="module")
    try:
        with pytest.raises(redis.ResponseError, match="unknown command"):
            limiter.is_allowed("x")
        assert not limiter.circuit.down
        assert SlidingWindowRateLimiter(plain).is_allowed("x") == (True, 1)
    finally:
        plain.close()
        server.cleanup()


def test_cluster(cluster: RedisClusterProcs, prefix: str) -> None:
    client = connect(cluster.url, cluster=True)
    assert isinstance(client, redis.cluster.RedisCluster)
    limiter = SlidingWindowRateLimiter(client, prefix=prefix)
    ids = [f"user-{i}" for i in range(30)]
    for cid in ids:
        assert [limiter.is_allowed(cid, 2, 60, now=1000)[0] for _ in range(3)] == [
            True, True, False]
        assert limiter.peek(cid, 2, 60, now=1000).remaining == 0
    # Every key lives on the node owning its slot, spread over all three masters.
    found = 0
    for node in cluster.nodes:
        direct = redis.Redis(port=node.port)
        keys = direct.keys(f"{prefix}*")
        direct.close()
        assert keys, f"no key on node {node.port}"
        for key in keys:
            assert client.get_node_from_key(key).port == node.port
        found += len(keys)
    assert found == len(ids)
    client.close()


def test_threads_share_one_limit(redis_server: RedisServer, prefix: str) -> None:
    """16 threads through a pool of 4 connections: exactly `limit` requests pass."""
    from concurrent.futures import ThreadPoolExecutor

    client = connect(redis_server.url, max_connections=4)
    limiter = SlidingWindowRateLimiter(client, prefix=prefix)
    with ThreadPoolExecutor(16) as pool:
        answers = list(pool.map(lambda _: limiter.is_allowed("t", 30, 60, now=9), range(120)))
    assert sum(allowed for allowed, _ in answers) == 30
    assert sorted(count for allowed, count in answers if allowed) == list(range(1, 31))
    client.close()
