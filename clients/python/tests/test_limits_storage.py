"""The `limits` storages of slidingwindow.limits_storage, on real servers with the module.

limits' own strategy tests run against them too (clients/python/limits_suite, `make
test`); these check what those cannot see: the commands and keys behind each call, the
edge cases of cost, errors, and many identities over a 3-master cluster.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Callable

import pytest
import redis
from limits import RateLimitItemPerHour, RateLimitItemPerSecond
from limits.aio.strategies import SlidingWindowCounterRateLimiter as AsyncSlidingWindow
from limits.errors import ConfigurationError, StorageError
from limits.storage import RedisStorage, storage_from_string
from limits.strategies import SlidingWindowCounterRateLimiter

from slidingwindow_testing import Kind, RedisClusterProcs, RedisServer
from slidingwindow.core.backend import Mode
from slidingwindow.storage.commands import native_uri
from slidingwindow.limits_storage import (
    AsyncSlidingWindowRedisClusterStorage,
    AsyncSlidingWindowRedisStorage,
    SlidingWindowRedisClusterStorage,
    SlidingWindowRedisStorage,
)

HOUR_MS = 3_600_000


def server_ms(r: redis.Redis) -> int:
    seconds, micros = r.time()
    return int(seconds) * 1000 + int(micros) // 1000


def clear_of_boundary(r: redis.Redis, window_ms: int, margin_ms: int = 30_000) -> int:
    """The server's time in ms, at least `margin_ms` before its current window ends."""
    now = server_ms(r)
    if window_ms - now % window_ms < margin_ms:
        time.sleep((window_ms - now % window_ms) / 1000 + 0.01)
        now = server_ms(r)
    return now


def test_uri_and_registration(redis_server: RedisServer) -> None:
    assert native_uri("slidingwindow+redis://h:1/0") == "redis://h:1/0"
    assert (native_uri("async+slidingwindow+redis+cluster://h:1,h:2")
            == "async+redis+cluster://h:1,h:2")
    with pytest.raises(ConfigurationError):
        native_uri("redis://h:1")
    port = redis_server.port
    for uri, cls in [
        (f"slidingwindow+redis://127.0.0.1:{port}/0", SlidingWindowRedisStorage),
        (f"async+slidingwindow+redis://127.0.0.1:{port}/0", AsyncSlidingWindowRedisStorage),
    ]:
        assert type(storage_from_string(uri)) is cls
    assert type(storage_from_string(f"redis://127.0.0.1:{port}")) is RedisStorage
    with pytest.raises(ConfigurationError, match="redispy or valkey"):
        storage_from_string(f"async+slidingwindow+redis://127.0.0.1:{port}",
                            implementation="coredis")


def test_hit_is_one_check_on_one_key(redis_server: RedisServer, r: redis.Redis,
                                     sw: Callable[..., Any], check_cmdstat: str) -> None:
    storage = storage_from_string(f"slidingwindow+redis://127.0.0.1:{redis_server.port}/0",
                                  key_prefix="one")
    limiter = SlidingWindowCounterRateLimiter(storage)
    item = RateLimitItemPerHour(3)
    clear_of_boundary(r, HOUR_MS)
    limiter.hit(item, "warm-up")  # the storage's first call finds what the server runs
    r.config_resetstat()
    assert [limiter.hit(item, "alice") for _ in range(4)] == [True, True, True, False]
    stats = r.info("commandstats")
    assert stats[check_cmdstat]["calls"] == 4
    # No limits' own Lua (its scripts use INCR); the library's own commands are counted.
    assert not any(name.startswith(("cmdstat_eval", "cmdstat_incr")) and name != check_cmdstat
                   for name in stats), stats
    (key,) = r.keys("one:*alice*")
    assert key == b"one:slidingwindow/" + item.key_for("alice").encode()
    # The module's own view of the key agrees with what limits was told.
    assert sw("SLIDINGWINDOW.PEEK", key, 3, HOUR_MS, "MS") == [0, 3]
    assert limiter.get_window_stats(item, "alice").remaining == 0
    limiter.clear(item, "alice")
    assert r.exists(key) == 0
    assert limiter.get_window_stats(item, "alice").remaining == 3


def test_cost_edge_cases(redis_server: RedisServer, r: redis.Redis) -> None:
    storage = SlidingWindowRedisStorage(f"slidingwindow+redis://127.0.0.1:{redis_server.port}/0",
                                        key_prefix="cost")
    clear_of_boundary(r, HOUR_MS)
    acquire = storage.acquire_sliding_window_entry
    assert acquire("k", 5, 3600, 5)
    # limits' cost 0: allowed while the estimate is <= limit, and counts nothing.
    assert acquire("k", 5, 3600, 0)
    assert not acquire("k", 4, 3600, 0)
    assert storage.get_sliding_window("k", 3600)[2] == 5
    # More than the limit can never be allowed: no command is sent, no key written.
    r.config_resetstat()
    assert not acquire("other", 5, 3600, 6)
    assert "cmdstat_slidingwindow.check" not in r.info("commandstats")
    assert r.exists("cost:slidingwindow/other") == 0
    with pytest.raises(ValueError):
        acquire("k", 5, 3600, -1)


def test_counts_and_ttls_from_the_module(redis_server: RedisServer, r: redis.Redis,
                                        sw: Callable[..., Any]) -> None:
    """get_sliding_window: previous and current counts as the module holds them, TTLs
    derived from the time elapsed in the server's current window."""
    storage = SlidingWindowRedisStorage(f"slidingwindow+redis://127.0.0.1:{redis_server.port}/0",
                                        key_prefix="c")
    key = "c:slidingwindow/k"
    before = clear_of_boundary(r, HOUR_MS)
    # 4 counted one window ago (explicit `now`), then 2 in the current window.
    sw("SLIDINGWINDOW.CHECK", key, 10, HOUR_MS, before - HOUR_MS, "COST", 4, "MS")
    sw("SLIDINGWINDOW.CHECK", key, 10, HOUR_MS, "COST", 2, "MS")
    previous, previous_ttl, current, current_ttl = storage.get_sliding_window("k", 3600)
    after = server_ms(r)
    assert (previous, current) == (4, 2)
    left_max, left_min = (HOUR_MS - before % HOUR_MS) / 1000, (HOUR_MS - after % HOUR_MS) / 1000
    assert left_min <= previous_ttl <= left_max
    assert current_ttl == previous_ttl + 3600
    # An empty key: no previous weight, current TTL still counted to the next window's end.
    assert storage.get_sliding_window("none", 3600)[:3] == (0, 0.0, 0)


def test_errors_are_limits_errors(redis_server: RedisServer, r: redis.Redis) -> None:
    uri = f"slidingwindow+redis://127.0.0.1:{redis_server.port}/0"
    r.rpush("w:slidingwindow/list", 1)
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        SlidingWindowRedisStorage(uri, key_prefix="w").acquire_sliding_window_entry("list", 5, 60)
    wrapped = SlidingWindowRedisStorage(uri, key_prefix="w", wrap_exceptions=True)
    with pytest.raises(StorageError):
        wrapped.get_sliding_window("list", 60)


def test_async_storage(redis_server: RedisServer, r: redis.Redis) -> None:
    storage = storage_from_string(
        f"async+slidingwindow+redis://127.0.0.1:{redis_server.port}/0", key_prefix="a")
    limiter = AsyncSlidingWindow(storage)
    item = RateLimitItemPerHour(2)
    clear_of_boundary(r, HOUR_MS)

    async def scenario() -> None:
        assert [await limiter.hit(item, "x") for _ in range(3)] == [True, True, False]
        assert (await limiter.get_window_stats(item, "x")).remaining == 0
        assert not await limiter.test(item, "x")
        await limiter.clear(item, "x")
        assert await limiter.test(item, "x")

    asyncio.run(scenario())
    assert r.keys("a:*") == []


def test_cluster_many_identities(cluster: RedisClusterProcs) -> None:
    """200 identities over 3 masters, sync and asyncio: each gets exactly its limit, its
    key lands wherever its slot is (no hash tag, no CROSSSLOT), all masters hold some."""
    nodes = ",".join(f"127.0.0.1:{n.port}" for n in cluster.nodes)
    sync = storage_from_string(f"slidingwindow+redis+cluster://{nodes}", key_prefix="cs")
    assert isinstance(sync, SlidingWindowRedisClusterStorage)
    item = RateLimitItemPerSecond(3, 3600)
    limiter = SlidingWindowCounterRateLimiter(sync)
    clear_of_boundary(redis.Redis(port=cluster.nodes[0].port), HOUR_MS)
    for i in range(200):
        assert [limiter.hit(item, f"id{i}") for _ in range(4)] == [True] * 3 + [False]
        assert limiter.get_window_stats(item, f"id{i}").remaining == 0
    held = [len(redis.Redis(port=n.port).keys("cs:*")) for n in cluster.nodes]
    assert sum(held) == 200 and all(h > 20 for h in held)

    storage = storage_from_string(f"async+slidingwindow+redis+cluster://{nodes}",
                                  key_prefix="ca")
    assert isinstance(storage, AsyncSlidingWindowRedisClusterStorage)
    alimiter = AsyncSlidingWindow(storage)

    async def scenario() -> None:
        for i in range(50):
            got = [await alimiter.hit(item, f"id{i}") for _ in range(4)]
            assert got == [True] * 3 + [False]
            assert (await alimiter.get_window_stats(item, f"id{i}")).remaining == 0

    asyncio.run(scenario())
    assert sum(len(redis.Redis(port=n.port).keys("ca:*")) for n in cluster.nodes) == 50


def test_backend_option(redis_server: RedisServer, server_kind: Kind) -> None:
    """`backend=` reaches the storage through limits' own options (flask-limiter's
    storage_options): "module" refuses the library; the default runs what the server has."""
    uri = f"slidingwindow+redis://127.0.0.1:{redis_server.port}/0"
    auto = storage_from_string(uri, key_prefix="b")
    assert auto.acquire_sliding_window_entry("k", 5, 60)
    assert auto.backend.mode is (Mode.MODULE if server_kind.module else
                                 Mode.EVAL if server_kind.name == "redis62" else Mode.FUNCTION)
    forced = storage_from_string(uri, key_prefix="b", backend="module")
    if server_kind.module:
        assert forced.acquire_sliding_window_entry("k", 5, 60)
        assert forced.get_sliding_window("k", 60)[2] == 2
    else:
        with pytest.raises(redis.ResponseError, match="unknown command"):
            forced.acquire_sliding_window_entry("k", 5, 60)
    with pytest.raises(ValueError, match="backend="):
        storage_from_string(uri, backend="nope")
