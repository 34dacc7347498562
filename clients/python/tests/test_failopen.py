"""Fail-open and fail-closed through the circuit: the hook, the answers, the middlewares.

(The outage scenarios with redis-py's default clients are in test_outage.py, the error
replies that count as outages in test_outage_replies.py.)
"""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import Iterator

import pytest
import redis
from http_stacks import STACKS, stack
from slidingwindow_testing import DEFAULT_KIND, RedisServer, wait_until
from slidingwindow import (
    AsyncSlidingWindowRateLimiter,
    SlidingWindowRateLimiter,
    connect,
    connect_async,
)
from slidingwindow.http.policy import Policy

PROBE = 0.2


@pytest.fixture
def lone() -> Iterator[RedisServer]:
    """A server these client-side tests may stop (one kind: they test the client)."""
    server = RedisServer(kind=DEFAULT_KIND).start()
    yield server
    server.cleanup()


def warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.name == "slidingwindow" and r.levelno == logging.WARNING]


def test_fail_closed_denies_at_once(lone: RedisServer) -> None:
    errors: list[BaseException] = []
    limiter = SlidingWindowRateLimiter(connect(lone.url), fail_open=False,
                                       on_error=errors.append, probe_interval=PROBE)
    assert limiter.is_allowed("c", 5, 60) == (True, 1)
    lone.stop()
    assert limiter.is_allowed("c", 5, 60) == (False, 0)
    assert len(errors) == 1 and isinstance(errors[0], redis.ConnectionError)
    # 16 threads at once: all refused, none of them sent anything (no new error).
    barrier = threading.Barrier(16)
    got: list[tuple[bool, int]] = []

    def call() -> None:
        barrier.wait()
        got.append(limiter.is_allowed("c", 5, 60))

    threads = [threading.Thread(target=call) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert got == [(False, 0)] * 16
    result = limiter.check("c", 5, 60)
    assert (result.allowed, result.degraded) == (False, True)
    # wait() does not wait for Redis to come back: denied at once.
    assert limiter.wait("c", 5, 60, timeout=30).degraded
    lone.start()
    wait_until("the circuit to close", lambda: not limiter.check("c", 5, 60).degraded)
    # The failed call and each failed probe called the hook (every probe but the last,
    # which got the answer); calls answered without Redis did not.
    assert len(errors) == 1 + (limiter.circuit.probes - 1)


def test_async_fail_closed_denies_at_once(lone: RedisServer) -> None:
    async def scenario() -> None:
        client = connect_async(lone.url)
        limiter = AsyncSlidingWindowRateLimiter(client, fail_open=False, probe_interval=PROBE)
        assert await limiter.is_allowed("c", 5, 60) == (True, 1)
        lone.stop()
        got = await asyncio.gather(*(limiter.is_allowed("c", 5, 60) for _ in range(16)))
        assert got == [(False, 0)] * 16
        assert (await limiter.check("c", 5, 60)).degraded
        lone.start()
        while (await limiter.check("c", 5, 60)).degraded:
            await asyncio.sleep(0.01)
        # The check that saw the recovery, then this one: the probe (a PEEK) counted nothing,
        # the request it was started by was denied without Redis.
        assert await limiter.is_allowed("c", 5, 60) == (True, 2)
        await client.aclose()

    asyncio.run(scenario())


def test_broken_hook_does_not_break_requests(lone: RedisServer,
                                             caplog: pytest.LogCaptureFixture) -> None:
    def hook(exc: BaseException) -> None:
        raise RuntimeError("the hook is broken")

    limiter = SlidingWindowRateLimiter(connect(lone.url), on_error=hook, probe_interval=PROBE)
    lone.stop()
    assert [limiter.is_allowed("w")[0] for _ in range(5)] == [True] * 5
    assert len(warnings(caplog)) == 1
    assert sum("hook raised" in r.getMessage() for r in caplog.records) == 1


@pytest.mark.parametrize("fail_open, during", [(True, 200), (False, 503)])
@pytest.mark.parametrize("stack_name", STACKS)
def test_middleware_during_an_outage(stack_name: str, fail_open: bool, during: int,
                                     lone: RedisServer, prefix: str,
                                     caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="slidingwindow")
    options = {"fail_open": fail_open, "probe_interval": PROBE}
    # Without the deny cache: with it, the refused identity's 429 is answered from the
    # cache until its entry ends (Redis's own answer), outage or not (test_deny_cache.py).
    with stack(stack_name, lone, prefix, {"/": Policy("all", 2, 60)},
               limiter=options, deny_cache=False) as app:
        assert app.codes("/", 3) == [200, 200, 429]
        lone.stop()
        responses = [app.get("/") for _ in range(6)]
        assert [r.status_code for r in responses] == [during] * 6
        assert all("x-ratelimit-limit" not in r.headers for r in responses)
        if not fail_open:
            assert responses[0].json()["error"] == "rate_limiter_unavailable"
        lone.start()  # empty: limiting starts afresh once a probe gets an answer
        wait_until("limiting to resume", lambda: "x-ratelimit-limit" in app.get("/").headers)
        # Counted afresh: the one that saw it, then these (the probe, a PEEK, counted nothing).
        assert [app.get("/").status_code for _ in range(2)] == [200, 429]
    assert len(warnings(caplog)) == 2  # the outage, the recovery
