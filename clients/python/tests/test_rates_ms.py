"""Rate strings are judged in milliseconds, on real servers (the module, and a server with the
Functions library only), at a steady rate above the limit for 10 windows.

A 1-second window at 1-second resolution never slides (the previous second counts in full
until the next one begins), so "5/second" sent in seconds lets through about half of what
it says; sent in ms (what rate strings do now) it lets through L per W: at a steady rate r
above L per W for T >= 10 W, allowed within L*T/W +- (L + 1).

Each is run twice: on the server's clock, in real time (10 s; the machine is shared, so a
run whose calls stalled is tried again, up to 3 times), and with the same schedule passed
as `now` (exact, and the seconds client beside it, as rate strings were sent before).

And the rolling upgrade: a window in ms is another window than the same length in seconds
(the key's windows are named by unit), so an old client sending "5/second" in seconds and a
new one sending it in ms on the same key count apart: together at most about 2 L per W."""

from __future__ import annotations

import time
from typing import Callable, Iterator

import pytest
import redis
from slidingwindow_testing import RedisServer
from slidingwindow_testing.kinds import KINDS, LIBRARY_KINDS
from slidingwindow import SlidingWindowRateLimiter
from slidingwindow.http.headers import limits_headers, rate_limit_headers
from slidingwindow.core.backend import Mode

L, W = 5, 1000  # "5/second": W in ms
RATE = 3 * L / W  # requests per ms: 3 x the limit (15 per second)
N = 150  # requests: T = N / RATE = 10 s = 10 W
T = N / RATE
LOW, HIGH = L * T / W - (L + 1), L * T / W + (L + 1)
START = 1_800_000_000_000  # an explicit `now` in ms: 2027-01-15, a whole second


def in_real_time(call: Callable[[], bool]) -> tuple[int, float]:
    """N calls at RATE, paced on the client's clock; (allowed, the longest gap in ms)."""
    allowed, gap, last = 0, 0.0, None
    start = time.monotonic()
    for i in range(N):
        pause = start + i / RATE / 1000 - time.monotonic()
        if pause > 0:
            time.sleep(pause)
        sent = time.monotonic()
        gap = max(gap, 0.0 if last is None else (sent - last) * 1000)
        last = sent
        allowed += call()
    return allowed, gap


def scheduled(calls: list[Callable[[int], bool]]) -> list[int]:
    """N rounds at RATE on a schedule passed as `now` (ms); each round every call once."""
    allowed = [0] * len(calls)
    for i in range(N):
        now = START + round(i / RATE)
        for j, call in enumerate(calls):
            allowed[j] += call(now)
    return allowed


@pytest.fixture(params=["redis7", "redis7-managed"])
def server(request: pytest.FixtureRequest) -> Iterator[RedisServer]:
    kind = {**KINDS, **LIBRARY_KINDS}[str(request.param)]
    s = RedisServer(kind=kind).start()
    yield s
    s.cleanup()


def test_a_rate_string_slides_on_the_server_clock(server: RedisServer,
                                                  figures: list[str]) -> None:
    limiter = SlidingWindowRateLimiter(redis.Redis(port=server.port), prefix="ms:")
    first = limiter.check_limits("probe", "5/second")
    assert (first.ms, first.summary.window, first.limits[0].window) == (True, 1000, 1000)
    assert limiter.backend.mode is (Mode.MODULE if server.kind.module else Mode.FUNCTION)
    runs = []
    for attempt in range(3):
        allowed, gap = in_real_time(
            lambda: limiter.check_limits(f"k{attempt}", "5/second").allowed)
        runs.append(f"{allowed} (longest gap {gap:.0f} ms)")
        if LOW <= allowed <= HIGH:
            break
    figures.append(f"{server.kind.name} ({limiter.backend.mode}): '5/second' at 15/s for "
                   f"{T / 1000:.0f} s, server clock: {', then '.join(runs)} of {N} allowed "
                   f"(band {LOW:.0f}-{HIGH:.0f})")
    assert LOW <= allowed <= HIGH, runs


def test_a_rate_string_slides_and_seconds_did_not(server: RedisServer,
                                                   figures: list[str]) -> None:
    """The same schedule as `now`: the rate string (ms) in the band; the same limit sent in
    seconds, as rate strings were before (`now` floored to seconds, as the server's clock
    is), far below it."""
    limiter = SlidingWindowRateLimiter(redis.Redis(port=server.port), prefix="ms:")
    ms, seconds = scheduled([
        lambda now: limiter.check_limits("ms", "5/second", now=now).allowed,
        lambda now: limiter.check_limits("s", [(L, 1)], now=now // 1000).allowed,
    ])
    figures.append(f"{server.kind.name}: '5/second' at 15/s for {T / 1000:.0f} s as `now`: "
                   f"{ms} of {N} allowed in ms, {seconds} in seconds (band {LOW:.0f}-{HIGH:.0f})")
    assert LOW <= ms <= HIGH
    assert seconds < LOW  # the old seconds behaviour fails the band


def test_old_and_new_clients_count_apart(figures: list[str]) -> None:
    """An old client ("5/second" sent in seconds, as rate strings were) and a new one (sent
    in ms) on one key, each at 3 x the rate: each counts its own window, so together they
    let through more than one limit would, and at most about 2 L per W."""
    s = RedisServer(kind=KINDS["redis7"]).start()
    try:
        client = redis.Redis(port=s.port)
        limiter = SlidingWindowRateLimiter(client, prefix="up:")
        seconds, ms = scheduled([
            lambda now: limiter.check_limits("k", [(L, 1)], now=now // 1000).allowed,
            lambda now: limiter.check_limits("k", "5/second", now=now).allowed,
        ])
        end = START + round(N / RATE)
        counted = client.execute_command("SLIDINGWINDOW.COUNTS", "up:k", 1, end // 1000)
        counted_ms = client.execute_command("SLIDINGWINDOW.COUNTS", "up:k", 1000, end, "MS")
    finally:
        s.cleanup()
    figures.append(f"old (seconds) {seconds} + new (ms) {ms} = {seconds + ms} of {2 * N} "
                   f"allowed on one key at 15/s each for {T / 1000:.0f} s; one limit: "
                   f"{LOW:.0f}-{HIGH:.0f}; COUNTS s {counted}, ms {counted_ms}")
    assert LOW <= ms <= HIGH  # the new client's window: as if alone
    assert seconds <= HIGH  # the old one's: its own 1-second window, barely sliding
    assert seconds + ms > HIGH  # together: more than one limit lets through
    assert seconds + ms <= 2 * HIGH  # at most about 2 L per W


def test_headers_of_a_rate_string_speak_seconds(server: RedisServer) -> None:
    """A rate string's ms windows in the headers: names and `w` in whole seconds, as before
    rate strings were sent in ms, and Retry-After rounded up from the ms retry_after."""
    limiter = SlidingWindowRateLimiter(redis.Redis(port=server.port), prefix="h:")
    for _ in range(10):
        assert limiter.check_limits("k", "10/second;1000/hour", now=START + 100).allowed
    refused = limiter.check_limits("k", "10/second;1000/hour", now=START + 100)
    assert not refused.allowed and refused.ms and 0 < refused.retry_after < 1000
    headers = limits_headers(refused, "api")
    assert headers["RateLimit-Policy"] == '"api/1s";q=10;w=1, "api/3600s";q=1000;w=3600'
    assert headers["Retry-After"] == "1"  # retry_after in ms (< 1000), never early
    one = limiter.check_limits("one", "5/minute", now=START)
    assert rate_limit_headers(one.summary, "api")["RateLimit-Policy"] == '"api";q=5;w=60'
