"""is_allowed answers exactly what the seed's class with the seed's Lua answers."""

from __future__ import annotations

import asyncio
import random
from typing import Callable

import pytest
import redis
import redis.asyncio
import seed_client
from slidingwindow_testing import RedisServer
from slidingwindow import AsyncSlidingWindowRateLimiter, SlidingWindowRateLimiter

# (limit, window) per simulated client, in ticks; limit 0 and a 1-tick window on purpose.
CLIENTS = [(0, 5), (1, 1), (2, 2), (3, 7), (5, 10), (10, 3), (20, 60), (100, 60), (7, 13)]
STEPS = [0, 0, 0, 0, 0, 0, 1, 1, 2, 3, 5, 8, 13, 30, 61, 125]
# Seconds per tick. The answers depend only on the ratios of `now` to the window, which
# the scale keeps exactly (the seed's divisions give the same doubles), while the keys'
# real-time TTLs (two windows, as the seed's EXPIRE) become hours: a stalled machine
# cannot expire a key mid-test on one side only, as 1-second windows did.
TICK = 3600


class FakeTime:
    now = 0

    def time(self) -> float:
        return float(self.now)


def sequence(seed: int, n: int) -> list[tuple[int, int]]:
    """(client index, now) pairs with non-decreasing now: the seed's own assumption."""
    rng = random.Random(seed)
    now = 1_700_000 + rng.randrange(1000)
    out = []
    for _ in range(n):
        now += rng.choice(STEPS)
        out.append((rng.randrange(len(CLIENTS)), now * TICK))
    return out


def compare(client: redis.Redis, seed_lua: str, prefix: str, monkeypatch: pytest.MonkeyPatch,
            ours: Callable[[str, int, int, int], tuple[bool, int]], n: int = 2500) -> None:
    clock = FakeTime()
    monkeypatch.setattr(seed_client, "time", clock)
    seed = seed_client.SlidingWindowRateLimiter(client, seed_lua)
    denied = 0
    for step, (i, now) in enumerate(sequence(len(prefix), n)):
        limit, window = CLIENTS[i][0], CLIENTS[i][1] * TICK
        clock.now = now
        expected = seed.is_allowed(f"{prefix}c{i}", limit, window)
        got = ours(f"c{i}", limit, window, now)
        assert got == expected, f"step {step}: client {i} at {now}"
        denied += not got[0]
    assert 0 < denied < n  # the sequence exercised both answers


def test_is_allowed_matches_seed(redis_server: RedisServer, seed_lua: str, prefix: str,
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    client = redis.Redis(port=redis_server.port)
    limiter = SlidingWindowRateLimiter(client, prefix=f"{prefix}mod:")
    try:
        compare(client, seed_lua, prefix, monkeypatch,
                lambda cid, limit, window, now: limiter.is_allowed(cid, limit, window, now=now))
    finally:
        client.close()


def test_async_is_allowed_matches_seed(redis_server: RedisServer, seed_lua: str, prefix: str,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    sync = redis.Redis(port=redis_server.port)
    loop = asyncio.new_event_loop()
    aclient = redis.asyncio.Redis(port=redis_server.port)
    limiter = AsyncSlidingWindowRateLimiter(aclient, prefix=f"{prefix}mod:")
    try:
        compare(sync, seed_lua, prefix, monkeypatch,
                lambda cid, limit, window, now: loop.run_until_complete(
                    limiter.is_allowed(cid, limit, window, now=now)), n=800)
    finally:
        loop.run_until_complete(aclient.aclose())
        loop.close()
        sync.close()


def test_keys_are_one_per_client(r: redis.Redis, prefix: str) -> None:
    limiter = SlidingWindowRateLimiter(r, prefix=prefix)
    for now in (1000, 1001, 1061, 1200):
        limiter.is_allowed("alice", 10, 60, now=now)
    assert r.keys(f"{prefix}*") == [f"{prefix}alice".encode()]
    assert 0 < r.ttl(f"{prefix}alice") <= 120  # two windows, as the seed's EXPIRE
