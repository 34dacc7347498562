"""Several limits in one command (LIMIT): the client's reading of the reply, policies with
several rates in both middlewares, and their headers (draft-11 lists)."""

from __future__ import annotations

import asyncio
import random
import re
from typing import Any, Callable

import pytest
import redis

from http_stacks import STACKS, keys, stack
from slidingwindow_testing import RedisServer
from slidingwindow import (
    AsyncSlidingWindowRateLimiter,
    Limit,
    MultiLimitResult,
    SlidingWindowRateLimiter,
)
from slidingwindow.http.middleware import Refusal
from slidingwindow.http.policy import Policy
from slidingwindow.core.rates import MAX_RATES


@pytest.fixture
def limiter(r: redis.Redis, prefix: str) -> SlidingWindowRateLimiter:
    return SlidingWindowRateLimiter(r, prefix=prefix)


def test_check_limits_reads_every_limit(limiter: SlidingWindowRateLimiter) -> None:
    """2 per 10 s and 3 per 60 s at t=100: the 10 s limit refuses the third request."""
    got = [limiter.check_limits("a", [(2, 10), (3, 60)], now=100) for _ in range(3)]
    assert [g.allowed for g in got] == [True, True, False]
    first, _, third = got
    assert [(r.window, r.limit, r.count, r.remaining) for r in first.limits] == [
        (10, 2, 1, 1), (60, 3, 1, 2)]
    assert first.governing == 0  # fewest remaining
    assert (third.retry_after, third.governing) == (11, 0)
    assert [(r.allowed, r.retry_after) for r in third.limits] == [(False, 11), (True, -1)]
    assert third.summary.reset_after == max(r.reset_after for r in third.limits)
    # The same answer from PEEK, which counts nothing; one key holds both windows.
    assert limiter.peek_limits("a", [Limit(2, 10), (3, 60)], now=100) == third
    assert limiter.check_limits("a", [(2, 10), (3, 60)], now=111).allowed  # exact retry
    # Only the 60 s limit remains in force for a call naming it alone: its 3 counts.
    assert not limiter.check("a", 3, 60, now=111).allowed


def test_never_possible_governs(limiter: SlidingWindowRateLimiter) -> None:
    never = limiter.check_limits("n", [(5, 10), (3, 60)], cost=4, now=0)
    assert (never.allowed, never.retry_after, never.governing) == (False, -1, 1)
    assert [r.allowed for r in never.limits] == [True, False]  # 4 fits in 5, never in 3


def test_one_limit_is_todays_reply(limiter: SlidingWindowRateLimiter) -> None:
    expected = limiter.peek("o", 3, 10, now=100)
    one = limiter.check_limits("o", [(3, 10)], now=100)
    assert one.limits == (one.summary,) and one.summary == expected


def readme_governing(got: MultiLimitResult) -> int:
    """The README's rule: when denied, the denying limit with the longest retry_after
    ("never" longest of all), when allowed the least remaining; ties to the first."""
    rows = got.limits
    if got.allowed:
        return min(range(len(rows)), key=lambda i: (rows[i].remaining, i))
    denying = [i for i, x in enumerate(rows) if not x.allowed]
    never = [i for i in denying if rows[i].retry_after < 0]
    return never[0] if never else min(denying, key=lambda i: (-rows[i].retry_after, i))


def test_module_takes_max_rates_limits_and_no_more(sw: Callable[..., Any], prefix: str) -> None:
    """rates.MAX_RATES is the module's MAX_LIMITS: 8 limits answer, a 9th is its ERR."""
    def call(n: int) -> Any:
        extra = [x for w in range(2, n + 1) for x in ("LIMIT", 10, w)]
        return sw("SLIDINGWINDOW.PEEK", f"{prefix}max", 10, 1, *extra)

    assert call(MAX_RATES)[0] == 1
    with pytest.raises(redis.ResponseError, match=f"at most {MAX_RATES} limits per call"):
        call(MAX_RATES + 1)


def test_summary_follows_the_governing_rule(limiter: SlidingWindowRateLimiter,
                                            sw: Callable[..., Any], prefix: str) -> None:
    """Random traffic, 1 to 4 limits: the limit the client reads as governing from the reply
    is the one the module's README rule picks (worked out here from the 7th element), the
    summary's count, limit and remaining are its, and every field matches the raw reply."""
    rng = random.Random(11)
    denied = 0
    for case in range(300):
        windows = rng.sample([1, 2, 5, 10, 30, 60, 3600], rng.randint(1, 4))
        pairs = [(rng.randint(0, 6), w) for w in windows]
        cost, now = rng.choice([1, 1, 2, 7]), 1000 + case // 3
        got = limiter.check_limits(f"k{case % 7}", pairs, cost=cost, now=now)
        raw = sw(
            "SLIDINGWINDOW.PEEK", f"{prefix}k{case % 7}", pairs[0][0], pairs[0][1], now,
            *[x for p in pairs[1:] for x in ("LIMIT", *p)], "COST", cost, "DETAILS")
        if got.allowed:  # PEEK sees the state after this request was counted
            continue
        denied += 1
        assert got == MultiLimitResult.from_reply(raw, windows, cost, False)
        assert got.governing == readme_governing(got)
        gov = got.governing_result
        assert (got.summary.count, got.summary.limit, got.summary.remaining) == (
            gov.count, gov.limit, gov.remaining)
        assert got.retry_after == gov.retry_after
        assert not gov.allowed and not all(x.allowed for x in got.limits)
    assert denied > 100


def test_async_check_limits(redis_server: RedisServer, prefix: str,
                            limiter: SlidingWindowRateLimiter) -> None:
    async def scenario() -> list[MultiLimitResult]:
        client = redis.asyncio.Redis(port=redis_server.port)
        aio = AsyncSlidingWindowRateLimiter(client, prefix=f"{prefix}a:")
        got = [await aio.check_limits("x", "2/10 seconds;3/minute", now=100) for _ in range(3)]
        await client.aclose()
        return got

    sync = SlidingWindowRateLimiter(limiter.redis, prefix=f"{prefix}s:")
    assert asyncio.run(scenario()) == [
        sync.check_limits("x", "2/10 seconds;3/minute", now=100) for _ in range(3)]


def test_policy_with_several_rates() -> None:
    policy = Policy("api", rates="10/second;1000/hour")
    # A rate string's windows are in ms, and the policy says so (its calls send MS).
    assert policy.limits == ((10, 1000), (1000, 3_600_000)) and policy.ms
    assert (policy.limit, policy.window) == (10, 1000)
    assert policy.describe() == "10 per 1s and 1000 per 3600s"
    assert Policy("p", rates=[(10, 500), (100, 60_000)], ms=True).limits == (
        (10, 500), (100, 60_000))
    for bad in (dict(), dict(limit=5, window=60, rates="1/second"), dict(rates="lots"),
                dict(rates="1/second", ms=True), dict(limit=-1, window=60),
                dict(limit=5, window=60, cost=0)):
        with pytest.raises(ValueError):
            Policy("p", **bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        Policy("caf\u00e9", 1, 60)


ITEM = r'"api/(\d+)s";r=(\d+);t=(\d+)'


@pytest.mark.parametrize("stack_name", STACKS)
def test_middleware_with_several_rates(stack_name: str, redis_server: RedisServer,
                                       prefix: str, check_cmdstat: str) -> None:
    """2 per hour and 3 per day, one CHECK per request, one key; the headers list both."""
    refused: list[Refusal] = []
    admin = redis.Redis(port=redis_server.port, decode_responses=True)
    admin.config_resetstat()
    policy = Policy("api", rates="2/hour;3/day")
    with stack(stack_name, redis_server, prefix, {"/": policy}, on_refusal=refused.append) as app:
        responses = [app.get("/") for _ in range(3)]
    assert [r.status_code for r in responses] == [200, 200, 429]
    stats = admin.info("commandstats")[check_cmdstat]
    assert stats["calls"] == 3  # one command per request, whatever the number of rates
    assert keys(redis_server, prefix) == [f"{prefix}api:ip:127.0.0.1"]
    admin.close()

    first, _, denied = responses
    assert first.headers["ratelimit-policy"] == '"api/3600s";q=2;w=3600, "api/86400s";q=3;w=86400'
    items = re.fullmatch(f"{ITEM}, {ITEM}", first.headers["ratelimit"])
    assert items is not None and [items[1], items[2], items[4], items[5]] == [
        "3600", "1", "86400", "2"]
    # X-RateLimit-* speak for the governing limit: the hourly one, with 1 left of 2.
    assert (first.headers["x-ratelimit-limit"], first.headers["x-ratelimit-remaining"]) == (
        "2", "1")
    assert first.headers["x-ratelimit-reset"] == items[3]
    # Refused by the hourly limit: Retry-After is when every limit allows it again.
    (event,) = refused
    assert denied.headers["retry-after"] == str(event.result.retry_after_seconds)
    assert int(denied.headers["retry-after"]) > 0
    assert denied.json()["message"] == "Too many requests: 2 per 3600s and 3 per 86400s ('api')."
    assert [(r.window, r.ms, r.allowed) for r in event.results] == [
        (3_600_000, True, False), (86_400_000, True, True)]
    items = re.fullmatch(f"{ITEM}, {ITEM}", denied.headers["ratelimit"])
    assert items is not None and (items[2], items[3]) == ("0", denied.headers["retry-after"])
    assert items[5] == "1"  # the daily limit: 2 counted of 3
