"""Headers from real decisions: exact values, and a client obeying them is never early."""

from __future__ import annotations

import random
import re

import pytest
import redis

from slidingwindow import RateLimitResult, SlidingWindowRateLimiter, rate_limit_headers
from slidingwindow.http.headers import policy_header, sf_string


@pytest.fixture
def limiter(r: redis.Redis, prefix: str) -> SlidingWindowRateLimiter:
    return SlidingWindowRateLimiter(r, prefix=prefix)


def test_exact_headers_seconds(limiter: SlidingWindowRateLimiter) -> None:
    allowed = limiter.check("h", 3, 10, now=100)
    assert rate_limit_headers(allowed, "api") == {
        "X-RateLimit-Limit": "3",
        "X-RateLimit-Remaining": "2",
        "X-RateLimit-Reset": "11",
        "RateLimit-Policy": '"api";q=3;w=10',
        "RateLimit": '"api";r=2;t=11',
    }
    limiter.check("h", 3, 10, now=100)
    limiter.check("h", 3, 10, now=100)
    denied = limiter.check("h", 3, 10, now=104)
    assert rate_limit_headers(denied, "api") == {
        "X-RateLimit-Limit": "3",
        "X-RateLimit-Remaining": "0",
        "X-RateLimit-Reset": "13",
        "RateLimit-Policy": '"api";q=3;w=10',
        "RateLimit": '"api";r=0;t=7',
        "Retry-After": "7",
    }


def test_exact_headers_milliseconds_round_up(limiter: SlidingWindowRateLimiter) -> None:
    limiter.check("ms", 2, 1000, cost=2, ms=True, now=5000)
    denied = limiter.check("ms", 2, 1000, ms=True, now=5001)
    assert (denied.retry_after, denied.reset_after) == (1000, 1500)
    h = rate_limit_headers(denied, "burst")
    assert (h["Retry-After"], h["X-RateLimit-Reset"]) == ("1", "2")  # 1000 ms, 1500 ms -> up
    assert h["RateLimit-Policy"] == '"burst";q=2;w=1'
    sub_second = limiter.check("ms2", 5, 250, ms=True, now=0)
    assert rate_limit_headers(sub_second)["RateLimit-Policy"] == '"default";q=5;w=1'


def estimate(peeked: RateLimitResult) -> int:
    """The estimate before a cost-1 request: count includes the request only if allowed."""
    return peeked.count - 1 if peeked.allowed else peeked.count


@pytest.mark.parametrize("ms", [False, True])
def test_waiting_retry_after_is_enough_and_one_second_less_is_not(
        limiter: SlidingWindowRateLimiter, ms: bool) -> None:
    """For random traffic: a client retrying Retry-After seconds after a 429 is allowed,
    one retrying a second earlier is not; at X-RateLimit-Reset the quota is whole again."""
    rng = random.Random(7 + ms)
    unit = 1000 if ms else 1  # units per second
    checked = 0
    for case in range(150):
        limit, cost = rng.randint(1, 12), rng.choice([1, 1, 1, 2, 3])
        window = rng.choice([1, 2, 5, 10, 60]) * unit + (rng.randrange(unit) if ms else 0)
        key, now = f"c{case}", rng.randrange(10**6) * unit
        for _ in range(rng.randint(limit, 3 * limit)):
            now += rng.choice([0, 0, 1, unit // 3 + 1, window // 4])
            result = limiter.check(key, limit, window, cost=cost, ms=ms, now=now)
            if result.allowed or result.retry_after < 0:
                continue
            h = rate_limit_headers(result)
            wait = int(h["Retry-After"]) * unit
            assert limiter.peek(key, limit, window, cost=cost, ms=ms, now=now + wait).allowed
            if wait >= unit:
                assert not limiter.peek(key, limit, window, cost=cost, ms=ms,
                                        now=now + wait - unit).allowed
            reset = int(h["X-RateLimit-Reset"]) * unit
            assert estimate(limiter.peek(key, limit, window, ms=ms, now=now + reset)) == 0
            if reset >= unit:
                assert estimate(limiter.peek(key, limit, window, ms=ms, now=now + reset - unit)) > 0
            checked += 1
    assert checked > 100


def test_draft_field_syntax() -> None:
    assert policy_header("per-minute", 100, 60) == '"per-minute";q=100;w=60'
    assert sf_string('a"b\\c') == '"a\\"b\\\\c"'
    with pytest.raises(ValueError):
        sf_string("caf\u00e9")
    result = RateLimitResult(True, 58, 100, 42, -1, 18, 60)
    assert rate_limit_headers(result, "name")["RateLimit"] == '"name";r=42;t=18'
    assert re.fullmatch(r'"[^"]*";q=\d+;w=\d+', rate_limit_headers(result)["RateLimit-Policy"])


def test_degraded_results_carry_no_headers() -> None:
    assert rate_limit_headers(RateLimitResult.unavailable(True, 10, 60, False)) == {}
    assert rate_limit_headers(RateLimitResult.unavailable(False, 10, 60, False)) == {}
