"""Rate strings are judged in milliseconds, on real servers (the module, and a server with
the Functions library only), at a steady rate above the limit for 10 windows.

A 1-second window at 1-second resolution never slides (the previous second counts in full
until the next one begins), so "5/second" sent in seconds lets through about half of what
it says; sent in ms (what rate strings do now) it lets through L per W: at a steady rate r
above L per W for T >= 10 W, allowed within L*T/W +- (L + 1).

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
from slidingwindow.backend import Mode

L, W = 5, 1.0  # "5/second"
RATE = 3 * L / W  # requests per second: 3 x the limit
N = 150  # requests: T = N / RATE = 10 s = 10 W
T = N / RATE


def steady(calls: list[Callable[[], bool]], n: int, rate: float) -> list[int]:
    """Sends n rounds at `rate` rounds per second (each round: every call once, in turn);
    the allowed count of each call."""
    allowed = [0] * len(calls)
    start = time.monotonic()
    for i in range(n):
        pause = start + i / rate - time.monotonic()
        if pause > 0:
            time.sleep(pause)
        for j, call in enumerate(calls):
            allowed[j] += call()
    return allowed


def band(n: int = N) -> tuple[float, float]:
    expected = L * (n / RATE) / W
    return expected - (L + 1), expected + (L + 1)


@pytest.fixture(params=["redis7", "redis7-managed"])
def server(request: pytest.FixtureRequest) -> Iterator[RedisServer]:
    kind = {**KINDS, **LIBRARY_KINDS}[str(request.param)]
    s = RedisServer(kind=kind).start()
    yield s
    s.cleanup()


def test_a_rate_string_slides(server: RedisServer, figures: list[str]) -> None:
    limiter = SlidingWindowRateLimiter(redis.Redis(port=server.port), prefix="ms:")
    first = limiter.check_limits("k", "5/second")
    assert (first.ms, first.summary.window, first.limits[0].window) == (True, 1000, 1000)
    assert limiter.backend.mode is (Mode.MODULE if server.kind.module else Mode.FUNCTION)
    limiter.redis.delete("ms:k")
    (allowed,) = steady([lambda: limiter.check_limits("k", "5/second").allowed], N, RATE)
    low, high = band()
    figures.append(f"{server.kind.name}: '5/second' at {RATE:.0f}/s for {T:.0f} s: {allowed} "
                   f"of {N} allowed (band {low:.0f}-{high:.0f}; backend {limiter.backend.mode})")
    assert low <= allowed <= high


def test_old_and_new_clients_count_apart(figures: list[str]) -> None:
    """An old client ("5/second" sent in seconds, as rate strings were) and a new one (sent
    in ms) on one key, each at 3 x the rate: each counts its own window, so together they
    let through more than one limit would, and at most about 2 L per W."""
    s = RedisServer(kind=KINDS["redis7"]).start()
    try:
        client = redis.Redis(port=s.port)
        limiter = SlidingWindowRateLimiter(client, prefix="up:")
        old = steady([lambda: limiter.check_limits("k", [(L, 1)]).allowed,
                      lambda: limiter.check_limits("k", "5/second").allowed], N, RATE)
        counted = client.execute_command("SLIDINGWINDOW.COUNTS", "up:k", 1)
        counted_ms = client.execute_command("SLIDINGWINDOW.COUNTS", "up:k", 1000, "MS")
    finally:
        s.cleanup()
    seconds, ms = old
    low, high = band()
    figures.append(f"old (seconds) {seconds} + new (ms) {ms} = {seconds + ms} of {2 * N} "
                   f"allowed on one key at {RATE:.0f}/s each for {T:.0f} s; one limit: "
                   f"{low:.0f}-{high:.0f}; COUNTS s {counted}, ms {counted_ms}")
    assert low <= ms <= high  # the new client's window: as if alone
    assert seconds <= high  # the old one's: its own 1-second window, barely sliding
    assert seconds + ms > high  # together: more than one limit lets through
    assert seconds + ms <= 2 * high  # at most about 2 L per W
