"""Outages with the user's own redis-py client at its default settings: the server stopped
(connection refused) or frozen (SIGSTOP; the user's socket_timeout applies), for
redis.Redis, redis.asyncio.Redis and both RedisClusters.

Each scenario checks what issue 9 asks and reports the figures it measured:
- 1,000 sequential calls cost at most the first failed call plus 1 s, all fail-open;
- 16 threads (or tasks) calling at once while a probe is in flight are answered without
  waiting on it (the probe is still in flight when they have all returned);
- after the server is back, limiting resumes within one probe interval (+1 s of margin);
- one warning for the outage and one line for the recovery.

They stop or freeze the server, so what they measure is the client: they run on one
server kind (Redis 7.0). The outage replies that depend on the server (LOADING, READONLY,
MASTERDOWN, CLUSTERDOWN, OOM, auth) are tested on all four in test_outage_replies.py.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from typing import Any, Callable, Iterator, Optional

import pytest
import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.cluster
from slidingwindow_testing import DEFAULT_KIND, RedisClusterProcs, RedisServer
from slidingwindow import AsyncSlidingWindowRateLimiter, SlidingWindowRateLimiter

INTERVAL = 1.0  # the default probe interval
FROZEN_TIMEOUT = 0.5  # the user's socket_timeout in the frozen scenarios
LIMIT, WINDOW = 100_000, 3600  # never denies here: every answer shows degraded or not


class Target:
    """What a scenario breaks: a lone server, or the cluster node owning the key."""

    def __init__(self, node: RedisServer, cluster: Optional[RedisClusterProcs] = None) -> None:
        self.node = node
        self.cluster = cluster
        self.broken: Optional[str] = None

    def down(self, mode: str) -> None:
        self.broken = mode
        if mode == "stopped":
            self.node.stop()
        else:
            self.node.pause()

    def up(self) -> None:
        """Back, and answering (a cluster: every node says cluster_state:ok)."""
        if self.broken == "stopped":
            self.node.start()
        elif self.broken == "frozen":
            self.node.resume()
        self.broken = None
        if self.cluster is not None:
            self.cluster.wait_ok(timeout=60)


@pytest.fixture
def lone() -> Iterator[RedisServer]:
    server = RedisServer(kind=DEFAULT_KIND).start()
    yield server
    server.cleanup()  # SIGCONT first if a test left it frozen


@pytest.fixture
def own_cluster() -> Iterator[RedisClusterProcs]:
    procs = RedisClusterProcs(DEFAULT_KIND).start()
    yield procs
    procs.cleanup()


def key_on(cluster: RedisClusterProcs, node: RedisServer) -> str:
    """A client id whose key (prefix "rate:") lives on `node`."""
    probe = redis.cluster.RedisCluster(host="127.0.0.1", port=node.port)
    try:
        for i in range(1000):
            if probe.get_node_from_key(f"rate:c{i}").port == node.port:
                return f"c{i}"
    finally:
        probe.close()
    raise AssertionError("no key on that node")


def lines(caplog: pytest.LogCaptureFixture, text: str) -> int:
    return sum(text in r.getMessage() for r in caplog.records if r.name == "slidingwindow")


def timeouts(mode: str) -> dict[str, float]:
    return {"socket_timeout": FROZEN_TIMEOUT} if mode == "frozen" else {}


def sync_client(kind: str, port: int, mode: str) -> Any:
    if kind == "cluster":
        return redis.cluster.RedisCluster(host="127.0.0.1", port=port, **timeouts(mode))
    return redis.Redis(port=port, **timeouts(mode))


def async_client(kind: str, port: int, mode: str) -> Any:
    if kind == "cluster":
        return redis.asyncio.cluster.RedisCluster(host="127.0.0.1", port=port, **timeouts(mode))
    return redis.asyncio.Redis(port=port, **timeouts(mode))


def target_for(kind: str, request: pytest.FixtureRequest) -> tuple[Target, str, int]:
    """(what to break, the client id, the port the client is seeded with)."""
    if kind == "cluster":
        procs: RedisClusterProcs = request.getfixturevalue("own_cluster")
        node = procs.nodes[1]
        return Target(node, procs), key_on(procs, node), procs.nodes[0].port
    server: RedisServer = request.getfixturevalue("lone")
    return Target(server), "c", server.port


def measured_recovery(check: Callable[[], bool], target: Target) -> float:
    """Seconds from the server answering again until a call is answered by it."""
    target.up()
    healed = time.monotonic()
    while not check():
        assert time.monotonic() - healed < INTERVAL + 10, "limiting never resumed"
        time.sleep(0.005)
    return time.monotonic() - healed


@pytest.mark.parametrize("mode", ["stopped", "frozen"])
@pytest.mark.parametrize("kind", ["redis", "cluster"])
def test_sync_outage_with_default_client(kind: str, mode: str, request: pytest.FixtureRequest,
                                         caplog: pytest.LogCaptureFixture,
                                         figures: list[str]) -> None:
    caplog.set_level(logging.INFO, logger="slidingwindow")
    target, cid, port = target_for(kind, request)
    client = sync_client(kind, port, mode)
    limiter = SlidingWindowRateLimiter(client)
    circuit = limiter.circuit
    try:
        assert limiter.is_allowed(cid, LIMIT, WINDOW) == (True, 1)
        target.down(mode)
        started = time.monotonic()
        answers = [limiter.is_allowed(cid, LIMIT, WINDOW)]
        first = time.monotonic() - started
        answers += [limiter.is_allowed(cid, LIMIT, WINDOW) for _ in range(999)]
        total = time.monotonic() - started
        assert answers == [(True, 0)] * 1000
        assert total <= first + 1.0
        figures.append(f"first failed call {first:.2f}s, 1,000 calls {total:.2f}s in all "
                       f"(the other 999: {(total - first) * 1000:.0f} ms)")

        # A probe in flight (frozen: it hangs for the socket timeout), then 16 at once.
        probes = circuit.probes
        while circuit.probes == probes:
            assert limiter.check(cid, LIMIT, WINDOW).degraded
            time.sleep(0.01)
        barrier = threading.Barrier(16)
        got: list[tuple[bool, int]] = []
        took: list[float] = []

        def call() -> None:
            barrier.wait()
            started = time.monotonic()
            got.append(limiter.is_allowed(cid, LIMIT, WINDOW))
            took.append(time.monotonic() - started)

        threads = [threading.Thread(target=call) for _ in range(16)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert got == [(True, 0)] * 16
        assert circuit.probes == probes + 1  # no second probe within the interval
        if mode == "frozen":
            assert circuit.probing  # still in flight: none of the 16 waited on it
        figures.append(f"16 threads during a probe: slowest call {max(took) * 1e6:.0f} µs")

        recovery = measured_recovery(
            lambda: not limiter.check(cid, LIMIT, WINDOW).degraded, target)
        assert recovery <= INTERVAL + 1.0
        figures.append(f"limiting resumed {recovery:.2f}s after the server was back")
        assert limiter.is_allowed(cid, LIMIT, WINDOW)[1] >= 2  # counting again
        assert lines(caplog, "Redis unavailable") == 1
        assert lines(caplog, "reachable again") == 1
    finally:
        target.up()
        client.close()


@pytest.mark.parametrize("mode", ["stopped", "frozen"])
@pytest.mark.parametrize("kind", ["redis", "cluster"])
def test_async_outage_with_default_client(kind: str, mode: str, request: pytest.FixtureRequest,
                                          caplog: pytest.LogCaptureFixture,
                                          figures: list[str]) -> None:
    caplog.set_level(logging.INFO, logger="slidingwindow")
    target, cid, port = target_for(kind, request)

    async def scenario() -> None:
        client = async_client(kind, port, mode)
        limiter = AsyncSlidingWindowRateLimiter(client)
        circuit = limiter.circuit
        assert await limiter.is_allowed(cid, LIMIT, WINDOW) == (True, 1)
        target.down(mode)
        started = time.monotonic()
        answers = [await limiter.is_allowed(cid, LIMIT, WINDOW)]
        first = time.monotonic() - started
        answers += [await limiter.is_allowed(cid, LIMIT, WINDOW) for _ in range(999)]
        total = time.monotonic() - started
        assert answers == [(True, 0)] * 1000
        assert total <= first + 1.0
        figures.append(f"first failed call {first:.2f}s, 1,000 calls {total:.2f}s in all "
                       f"(the other 999: {(total - first) * 1000:.0f} ms)")

        probes = circuit.probes
        while circuit.probes == probes:
            assert (await limiter.check(cid, LIMIT, WINDOW)).degraded
            await asyncio.sleep(0.01)
        await asyncio.sleep(0)  # the probe task starts and awaits the server
        started = time.monotonic()
        got = await asyncio.gather(*(limiter.is_allowed(cid, LIMIT, WINDOW)
                                     for _ in range(16)))
        took = time.monotonic() - started
        assert got == [(True, 0)] * 16
        assert circuit.probes == probes + 1
        if mode == "frozen":
            assert circuit.probing
        figures.append(f"16 tasks during a probe: all answered in {took * 1e6:.0f} µs")

        # The server comes back in a thread while this loop keeps serving calls.
        healed: list[float] = []
        heal = threading.Thread(target=lambda: (target.up(), healed.append(time.monotonic())))
        heal.start()
        while (await limiter.check(cid, LIMIT, WINDOW)).degraded:
            await asyncio.sleep(0.005)
        answered = time.monotonic()
        heal.join()
        # A probe may get its answer before up() has seen the server ready: that is 0.
        recovery = max(0.0, answered - healed[0])
        assert recovery <= INTERVAL + 1.0
        figures.append(f"limiting resumed {recovery:.2f}s after the server was back")
        assert lines(caplog, "Redis unavailable") == 1
        assert lines(caplog, "reachable again") == 1
        await client.aclose()

    try:
        asyncio.run(scenario())
    finally:
        target.up()
