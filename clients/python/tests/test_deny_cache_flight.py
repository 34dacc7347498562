"""The deny cache's single flight (slidingwindow.core.deny_cache): concurrent calls on one key
and limits with nothing cached wait for one call's answer instead of all reaching Redis,
and an allowed answer lets as many waiters go at once as it left quota. Counted on the
server (INFO commandstats), against real servers; bounded by count."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import redis
import redis.asyncio
from slidingwindow_testing import RedisServer
from slidingwindow import AsyncSlidingWindowRateLimiter, SlidingWindowRateLimiter

REQUESTS, WORKERS = 2000, 20
LIMIT, WINDOW = 5, 10  # the example gateway's "api" policy: 5 per 10 s


def check_calls(r: redis.Redis) -> int:
    stats = r.info("commandstats")
    return int(stats.get("cmdstat_slidingwindow.check", {}).get("calls", 0))


def test_thread_flood_reaches_redis_at_most_10_times(
        redis_server: RedisServer, r: redis.Redis, prefix: str, figures: list[str]) -> None:
    limiter = SlidingWindowRateLimiter(redis.Redis(port=redis_server.port, max_connections=64),
                                       prefix=prefix, deny_cache=True)
    allowed = [0] * WORKERS
    start = threading.Barrier(WORKERS)
    base = check_calls(r)
    began = time.monotonic()

    def worker(i: int) -> None:
        start.wait()
        for _ in range(REQUESTS // WORKERS):
            allowed[i] += limiter.check("flood", LIMIT, WINDOW).allowed

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(WORKERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    calls, took = check_calls(r) - base, time.monotonic() - began
    assert limiter.deny_cache is not None
    figures.append(f"threads: {REQUESTS} checks over {WORKERS} threads in {took:.2f}s: "
                   f"{calls} CHECK calls, {sum(allowed)} allowed, {limiter.deny_cache.stats()}")
    assert took < WINDOW  # one window: its 5 and a refusal, then the cached refusal
    assert sum(allowed) == LIMIT
    assert calls <= 10


def test_asyncio_flood_reaches_redis_at_most_10_times(
        redis_server: RedisServer, r: redis.Redis, prefix: str, figures: list[str]) -> None:
    async def main() -> tuple[int, float, Any]:
        client = redis.asyncio.Redis(port=redis_server.port, max_connections=64)
        limiter = AsyncSlidingWindowRateLimiter(client, prefix=prefix, deny_cache=True)
        began = time.monotonic()

        async def task() -> int:
            n = 0
            for _ in range(REQUESTS // WORKERS):
                n += (await limiter.check("flood", LIMIT, WINDOW)).allowed
            return n

        got = await asyncio.gather(*(task() for _ in range(WORKERS)))
        took = time.monotonic() - began
        await client.aclose()
        assert limiter.deny_cache is not None
        return sum(got), took, limiter.deny_cache.stats()

    base = check_calls(r)
    allowed, took, stats = asyncio.run(main())
    calls = check_calls(r) - base
    figures.append(f"tasks: {REQUESTS} checks over {WORKERS} tasks in {took:.2f}s: "
                   f"{calls} CHECK calls, {allowed} allowed, {stats}")
    assert took < WINDOW
    assert allowed == LIMIT
    assert calls <= 10


class Slow:
    """A real client whose CHECKs take 20 ms longer (a slow link), counting how many are
    on their way at once."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client
        self.lock = threading.Lock()
        self.in_flight = self.most = 0

    def execute_command(self, *args: Any, **options: Any) -> Any:
        if args[0] != "SLIDINGWINDOW.CHECK":
            return self.client.execute_command(*args, **options)
        with self.lock:
            self.in_flight += 1
            self.most = max(self.most, self.in_flight)
        try:
            time.sleep(0.02)
            return self.client.execute_command(*args, **options)
        finally:
            with self.lock:
                self.in_flight -= 1


def test_calls_far_from_the_limit_are_not_held_one_at_a_time(
        redis_server: RedisServer, r: redis.Redis, prefix: str) -> None:
    """20 concurrent calls on a key with 1000 of quota: the first leads, the others wait
    for it, and its answer (999 left) lets all of them go at once: not 20 round trips in
    a row."""
    slow = Slow(redis.Redis(port=redis_server.port, max_connections=64))
    limiter = SlidingWindowRateLimiter(slow, prefix=prefix, deny_cache=True)
    start = threading.Barrier(WORKERS)
    results: list[bool] = []

    def worker() -> None:
        start.wait()
        results.append(limiter.check("roomy", 1000, 60).allowed)

    began = time.monotonic()
    threads = [threading.Thread(target=worker) for _ in range(WORKERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    took = time.monotonic() - began
    assert results == [True] * WORKERS
    assert int(r.execute_command("SLIDINGWINDOW.PEEK", limiter.key("roomy"), 1000, 60)[1]) == (
        WORKERS + 1)  # PEEK's count includes the request it asks about
    assert slow.most >= WORKERS // 2, slow.most
    assert took < WORKERS * 0.02  # one at a time would take 20 x 20 ms at least
    assert limiter.deny_cache is not None and len(limiter.deny_cache) == 0  # nothing left


def test_waiters_near_the_limit_go_one_at_a_time(
        redis_server: RedisServer, r: redis.Redis, prefix: str) -> None:
    """20 concurrent calls on a key with 3 of quota: 3 allowed, one refusal from Redis, and
    every other call answered from it: 4 CHECKs, not 20."""
    slow = Slow(redis.Redis(port=redis_server.port, max_connections=64))
    limiter = SlidingWindowRateLimiter(slow, prefix=prefix, deny_cache=True)
    start = threading.Barrier(WORKERS)
    results: list[bool] = []
    base = check_calls(r)

    def worker() -> None:
        start.wait()
        results.append(limiter.check("tight", 3, 60).allowed)

    threads = [threading.Thread(target=worker) for _ in range(WORKERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == [False] * (WORKERS - 3) + [True] * 3
    assert check_calls(r) - base <= 5  # 3 allowed, a refusal, at most one more in a race
