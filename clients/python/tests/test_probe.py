"""The probe an outage starts only looks: every CHECK, seed call and REFUND probes with
PEEK, as the Go and Node clients do (conformance/README.md, "Outages"). A request answered
without Redis is never counted, or given back, behind its caller's back.

Each case stops a real server, lets one call start a probe, brings the server back empty
and reads what it was sent (INFO commandstats), on every module server kind."""

from __future__ import annotations

import asyncio
import time
from typing import Any, Callable, Iterator

import pytest
from slidingwindow_testing import Kind, RedisServer
from slidingwindow_testing.waiting import wait_until
from slidingwindow import AsyncSlidingWindowRateLimiter, SlidingWindowRateLimiter, connect
from slidingwindow import connect_async

INTERVAL = 0.2  # the probe interval here

CALLS: dict[str, Callable[[Any], Any]] = {
    "check": lambda limiter: limiter.check("p", 5, 60),
    "is_allowed": lambda limiter: limiter.is_allowed("p", 5, 60),
    "refund": lambda limiter: limiter.refund("p", 5, 60),
    "check_limits": lambda limiter: limiter.check_limits("p", "5/minute;50/hour"),
}


@pytest.fixture
def lone(server_kind: Kind) -> Iterator[RedisServer]:
    server = RedisServer(kind=server_kind).start()
    yield server
    server.cleanup()


def sent_after_restart(server: RedisServer) -> dict[str, int]:
    stats = server.commandstats()
    return {name: calls for name, (calls, _) in stats.items() if name.startswith("slidingwindow.")}


@pytest.mark.parametrize("call", list(CALLS))
def test_every_probe_is_a_peek(lone: RedisServer, call: str) -> None:
    limiter = SlidingWindowRateLimiter(connect(lone.url), probe_interval=INTERVAL)
    send = CALLS[call]
    assert limiter.check("p", 5, 60).allowed
    lone.stop()
    send(limiter)  # fails: opens the circuit
    assert limiter.circuit.down
    lone.start()  # empty, its command statistics at zero
    time.sleep(INTERVAL * 1.5)
    send(limiter)  # answered without Redis; starts the probe
    wait_until("the probe to end", lambda: not limiter.circuit.probing)
    assert not limiter.circuit.down, "the probe reached the server"
    assert sent_after_restart(lone) == {"slidingwindow.peek": 1}
    assert lone.r.exists("rate:p") == 0  # nothing counted


def test_an_async_probe_is_a_peek(lone: RedisServer) -> None:
    async def scenario() -> None:
        client = connect_async(lone.url)
        limiter = AsyncSlidingWindowRateLimiter(client, probe_interval=INTERVAL)
        assert (await limiter.check("p", 5, 60)).allowed
        lone.stop()
        assert (await limiter.check("p", 5, 60)).degraded
        lone.start()
        await asyncio.sleep(INTERVAL * 1.5)
        assert (await limiter.check("p", 5, 60)).degraded  # starts the probe
        deadline = time.monotonic() + 20
        while limiter.circuit.probing and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        assert not limiter.circuit.down
        await client.aclose()

    asyncio.run(scenario())
    assert sent_after_restart(lone) == {"slidingwindow.peek": 1}
    assert lone.r.exists("rate:p") == 0
