"""The deny cache (slidingwindow.core.deny_cache): refusals answered without Redis, exactly.

Exactness is checked against the server itself: every cached refusal is followed at once
by a PEEK with the same arguments sent straight to Redis, which must refuse too (with no
writer in between, a refusal later means a refusal at the cached instant: with no
traffic the estimate never grows). The instants include the last milliseconds before
each entry ends, reached by sleeping and then spinning on the client's clock."""

from __future__ import annotations

import asyncio
import random
import threading
import time
from typing import Any, Optional

import httpx
import pytest
import redis
import redis.asyncio
from slidingwindow_testing import RedisServer
from slidingwindow import AsyncSlidingWindowRateLimiter, MultiLimitResult, SlidingWindowRateLimiter
from slidingwindow.asgi import Policy, RateLimitMiddleware
from slidingwindow.core.deny_cache import DenyCache
from slidingwindow.wsgi import RateLimitWSGIMiddleware

SECONDS_LIMITS = [(10, 1), (100, 60)]
MS_LIMITS = [(10, 1000), (100, 60000)]


class Counting:
    """A redis client that counts the commands sent through it."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.calls: dict[Any, int] = {}
        self.lock = threading.Lock()

    def execute_command(self, *args: Any, **options: Any) -> Any:
        with self.lock:
            self.calls[args[0]] = self.calls.get(args[0], 0) + 1
            if len(args) > 1:
                self.calls[args[:2]] = self.calls.get(args[:2], 0) + 1
        return self.client.execute_command(*args, **options)

    def count(self, name: str, key: Optional[str] = None) -> int:
        return self.calls.get(name if key is None else (name, key), 0)


def check_calls(r: redis.Redis) -> int:
    stats = r.info("commandstats")
    return int(stats.get("cmdstat_slidingwindow.check", {}).get("calls", 0))


def entry_of(cache: DenyCache, key: str) -> Any:
    with cache._lock:
        held = cache._keys.get(key)
        return next(iter(held.values())) if held else None


def spin_until(deadline: float) -> None:
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return
        if left > 0.025:
            time.sleep(left - 0.02)


# --- exactness --------------------------------------------------------------------------

def _pressure(limiter: SlidingWindowRateLimiter, ids: list[str], limits: Any, ms: bool,
              stop: threading.Event) -> None:
    # The flood on other refused identities, through the same cache, for load.
    while not stop.is_set():
        for who in ids:
            limiter.check_limits(who, limits, ms=ms)


class Timed(Counting):
    """Sends every CHECK as MULTI / TIME / CHECK / TIME / EXEC, so the server instant of
    each decision is known (`decided[key]`: server ms before and after)."""

    def __init__(self, client: redis.Redis) -> None:
        super().__init__(client)
        self.decided: dict[str, tuple[float, float, Any]] = {}

    def execute_command(self, *args: Any, **options: Any) -> Any:
        if args[0] != "SLIDINGWINDOW.CHECK":
            return super().execute_command(*args, **options)
        with self.lock:
            self.calls[args[0]] = self.calls.get(args[0], 0) + 1
            self.calls[args[:2]] = self.calls.get(args[:2], 0) + 1
        pipe = self.client.pipeline(transaction=True)
        pipe.time()
        pipe.execute_command(*args)
        pipe.time()
        t1, reply, t2 = pipe.execute()
        self.decided[args[1]] = (_ms(t1), _ms(t2), reply)
        return reply


def _ms(t: tuple[int, int]) -> float:
    return t[0] * 1000 + t[1] / 1000


def _allowed_from(decided: tuple[float, float, Any], ms: bool) -> float:
    """The earliest server instant (ms) at which the refused request could be allowed: the
    CHECK ran at or after t1, so Redis refuses at least until t1 + retry_after (in the
    check's unit). A cached refusal must come before it, and a PEEK that allows after it."""
    t1, _, reply = decided
    retry = int(reply[4])
    return float(int(t1) + retry) if ms else float((int(t1) // 1000 + retry) * 1000)


# A run needs entries long enough to probe; on a loaded 2-core machine a run can see
# none (0 judged), so it is run again, up to three times (the `flaky` plugin).
@pytest.mark.flaky(max_runs=3)
@pytest.mark.parametrize("unit", ["seconds", "ms"])
@pytest.mark.parametrize("several", [False, True], ids=["one", "several"])
def test_cached_refusals_are_refused_by_redis(
    redis_server: RedisServer, r: redis.Redis, prefix: str, unit: str, several: bool,
    figures: list[str],
) -> None:
    """During a flood on refused identities, every cached refusal is checked against the
    server: a TIME sent before the cached answer must be before the instant Redis could
    allow, and a PEEK (with TIME, atomically) sent right after must refuse unless that
    instant has passed; many of the instants are in an entry's last milliseconds."""
    ms = unit == "ms"
    limits = (MS_LIMITS if ms else SECONDS_LIMITS)[: 2 if several else 1]
    timed = Timed(redis.Redis(port=redis_server.port))
    limiter = SlidingWindowRateLimiter(timed, prefix=prefix, deny_cache=True)
    cache = limiter.deny_cache
    assert cache is not None
    stop = threading.Event()
    others = [threading.Thread(target=_pressure, daemon=True,
                               args=(limiter, [f"o{i}-{j}" for j in range(3)], limits, ms, stop))
              for i in range(2)]
    for t in others:
        t.start()
    rng = random.Random(7)
    who, key = "me", limiter.key("me")
    deltas_ms = [0.3, 0.6, 1.0, 2.0, 3.0, 5.0, 10.0, 30.0]
    hits = confirmed = last_ms = entries = after_end = peeks_refused = 0
    coverage: list[float] = []
    end = time.monotonic() + (5.0 if ms else 7.0)

    def cached_check(target: Optional[float] = None) -> Optional[MultiLimitResult]:
        """One check through the cache (at `target`, when given), judged against the
        server; None when it went to Redis. `before`, a server instant no later than the
        cache's lookup: the lookup's client instant plus the clock offset's lower bound,
        from a TIME sent before the wait (no round trip between the target and the call)."""
        nonlocal hits, confirmed, peeks_refused
        sent = timed.count("SLIDINGWINDOW.CHECK", key)
        allowed_at = _allowed_from(timed.decided[key], ms)
        entry = entry_of(cache, key)
        lo = _ms(r.time()) - time.monotonic() * 1000  # server = client + off, off >= lo
        if target is not None:
            spin_until(target)
        before = time.monotonic() * 1000 + lo
        got = limiter.check_limits(who, limits, ms=ms)
        if timed.count("SLIDINGWINDOW.CHECK", key) != sent:
            return None
        nonlocal last_ms
        last_ms += entry is not None and entry.deadline - time.monotonic() < 0.005
        pipe = r.pipeline(transaction=True)
        pipe.time()
        pipe.execute_command("SLIDINGWINDOW.PEEK", key, *_limit_args(limits, ms), "DETAILS")
        after, peek = pipe.execute()
        hits += 1
        assert not got.allowed
        assert before < allowed_at, ("cached refusal after Redis could allow", got, before,
                                     allowed_at)
        confirmed += _ms(after) < allowed_at
        if int(peek[0]) == 0:
            peeks_refused += 1
            assert got.retry_after >= int(peek[4]) >= 1
            assert (got.summary.limit, got.summary.remaining) == (int(peek[2]), int(peek[3]))
        else:
            assert _ms(after) >= allowed_at, ("Redis allows before retry_after", peek)
        return got

    try:
        while time.monotonic() < end:
            got = cached_check() if key in timed.decided else None
            if got is not None:
                continue
            sent = timed.count("SLIDINGWINDOW.CHECK", key)
            got = limiter.check_limits(who, limits, ms=ms)
            if timed.count("SLIDINGWINDOW.CHECK", key) == sent:
                continue  # answered from the cache, judged above on the next round
            if got.allowed:
                continue
            entry = entry_of(cache, key)
            assert entry is not None and not entry.never
            left = entry.deadline - time.monotonic()
            if left <= 0:
                continue  # too short to use (e.g. retry_after 1 ms)
            entries += 1
            unit_s = 0.001 if ms else 1.0
            coverage.append(left / (got.retry_after * unit_s))
            # Some instant of the entry: often its last milliseconds.
            if rng.random() < 0.75:
                target = entry.deadline - rng.choice(deltas_ms) / 1000
            else:
                target = rng.uniform(time.monotonic(), entry.deadline)
            cached_check(target)
            # After the entry: the first request goes to Redis. Counted from before the
            # end: another thread of the flood may be the one that goes, and this request
            # then waits for its answer (one call at a time per key). (The probe may have
            # gone to Redis, past the end: then the entry is the refusal it brought back,
            # if any.)
            current = entry_of(cache, key)
            if current is None:
                continue
            sent = timed.count("SLIDINGWINDOW.CHECK", key)
            spin_until(current.deadline)
            limiter.check_limits(who, limits, ms=ms)
            assert timed.count("SLIDINGWINDOW.CHECK", key) >= sent + 1
            after_end += 1
    finally:
        stop.set()
        for t in others:
            t.join()
    mean = sum(coverage) / len(coverage) if coverage else 0.0
    figures.append(f"{hits} cached refusals judged ({confirmed} confirmed before the allowed "
                   f"instant by TIME, {peeks_refused} also refused by PEEK), {last_ms} in an "
                   f"entry's last 5 ms; {entries} entries covering {mean:.0%} of retry_after "
                   f"on average; {after_end} first calls after an end went to Redis")
    assert hits >= 1 and after_end >= 1


def _limit_args(limits: list[tuple[int, int]], ms: bool) -> list[Any]:
    (limit, window), more = limits[0], limits[1:]
    args: list[Any] = [limit, window]
    for extra in more:
        args += ["LIMIT", *extra]
    return args + (["MS"] if ms else [])


def test_explicit_now_is_exact_in_units(r: redis.Redis, prefix: str) -> None:
    counting = Counting(r)
    limiter = SlidingWindowRateLimiter(counting, prefix=prefix, deny_cache=True)
    for _ in range(3):
        assert limiter.check("a", 3, 10, now=1000).allowed
    refused = limiter.check("a", 3, 10, now=1001)
    assert not refused.allowed and refused.retry_after > 0
    calls = counting.count("SLIDINGWINDOW.CHECK")
    for now in range(1001, 1001 + refused.retry_after):
        got = limiter.check("a", 3, 10, now=now)
        assert got == limiter.peek("a", 3, 10, now=now) or (
            not got.allowed and got.retry_after == refused.retry_after - (now - 1001))
    assert counting.count("SLIDINGWINDOW.CHECK") == calls  # all answered locally
    assert limiter.check("a", 3, 10, now=1001 + refused.retry_after).allowed  # to Redis
    assert counting.count("SLIDINGWINDOW.CHECK") == calls + 1


def test_never_possible_is_cached(r: redis.Redis, prefix: str) -> None:
    counting = Counting(r)
    limiter = SlidingWindowRateLimiter(counting, prefix=prefix, deny_cache=True)
    first = limiter.check_limits("n", [(5, 10), (3, 60)], cost=4)
    assert (first.allowed, first.retry_after) == (False, -1)
    again = limiter.check_limits("n", [(5, 10), (3, 60)], cost=4)
    assert again == first and counting.count("SLIDINGWINDOW.CHECK") == 1
    more = limiter.check_limits("n", [(5, 10), (3, 60)], cost=9)  # another cost: Redis
    assert (more.allowed, more.retry_after, counting.count("SLIDINGWINDOW.CHECK")) == (False, -1, 2)
    assert limiter.check_limits("n", [(5, 10), (3, 60)], cost=1).allowed  # smaller cost


def test_only_the_same_cost_gets_the_cached_reply(r: redis.Redis, prefix: str) -> None:
    """A larger cost is refused as long, but Redis gives it a later retry_after: the
    smaller cost's cached reply would not be the one Redis sends."""
    counting = Counting(r)
    limiter = SlidingWindowRateLimiter(counting, prefix=prefix, deny_cache=True)
    lim = [(5, 10), (50, 60)]
    assert limiter.check_limits("c", lim, cost=4, now=500).allowed
    refused = limiter.check_limits("c", lim, cost=2, now=500)
    assert not refused.allowed
    assert limiter.check_limits("c", lim, cost=2, now=500) == refused  # cached
    assert counting.count("SLIDINGWINDOW.CHECK") == 2
    larger = limiter.check_limits("c", lim, cost=3, now=500)
    assert counting.count("SLIDINGWINDOW.CHECK") == 3  # to Redis
    assert not larger.allowed and larger.retry_after > refused.retry_after, (larger, refused)
    assert limiter.check_limits("c", lim, cost=3, now=500) == larger  # cached beside cost 2
    assert limiter.check_limits("c", lim, cost=2, now=500) == refused
    assert counting.count("SLIDINGWINDOW.CHECK") == 3


def test_refund_clears_and_peek_bypasses(r: redis.Redis, prefix: str) -> None:
    counting = Counting(r)
    limiter = SlidingWindowRateLimiter(counting, prefix=prefix, deny_cache=True)
    assert limiter.check("a", 1, 60).allowed
    assert not limiter.check("a", 1, 60).allowed
    assert not limiter.check("a", 1, 60).allowed  # cached
    assert counting.count("SLIDINGWINDOW.CHECK") == 2
    assert not limiter.peek("a", 1, 60).allowed
    assert counting.count("SLIDINGWINDOW.PEEK") == 1  # PEEK always asks Redis
    limiter.refund("a", 1, 60)
    assert len(limiter.deny_cache or []) == 0
    assert limiter.check("a", 1, 60).allowed  # straight to Redis, allowed again
    stats = limiter.deny_cache.stats() if limiter.deny_cache else None
    assert stats is not None and (stats.hits, stats.stored, stats.cleared) == (1, 1, 1)


def test_is_allowed_reads_the_cache(r: redis.Redis, prefix: str) -> None:
    counting = Counting(r)
    limiter = SlidingWindowRateLimiter(counting, prefix=prefix, deny_cache=True)
    assert limiter.check("a", 1, 60).allowed
    denied = limiter.check("a", 1, 60)
    assert limiter.is_allowed("a", 1, 60) == (False, denied.count)
    assert counting.count("SLIDINGWINDOW.CHECK") == 2


def test_off_by_default_and_bounded(r: redis.Redis, prefix: str) -> None:
    assert SlidingWindowRateLimiter(r).deny_cache is None
    cache = DenyCache(max_entries=3)
    limiter = SlidingWindowRateLimiter(r, prefix=prefix, deny_cache=cache)
    for who in "abcde":
        limiter.check(who, 0, 60)  # limit 0: never
    assert len(cache) == 3 and cache.stats().evicted == 2
    assert {k[len(prefix):] for k in cache._keys} == {"c", "d", "e"}  # least recent out


def test_async_limiter_uses_it(redis_server: RedisServer, prefix: str) -> None:
    async def main() -> None:
        client = redis.asyncio.Redis(port=redis_server.port)
        limiter = AsyncSlidingWindowRateLimiter(client, prefix=prefix, deny_cache=True)
        assert (await limiter.check("a", 1, 60)).allowed
        denied = await limiter.check("a", 1, 60)
        again = await limiter.check("a", 1, 60)
        assert not again.allowed and again.retry_after <= denied.retry_after
        assert limiter.deny_cache is not None and limiter.deny_cache.stats().hits == 1
        await limiter.refund("a", 1, 60)
        assert (await limiter.check("a", 1, 60)).allowed
        await client.aclose()

    asyncio.run(main())


# --- the middlewares ---------------------------------------------------------------------

def test_middlewares_on_by_default_shadow_bypasses(redis_server: RedisServer, prefix: str) -> None:
    sync = SlidingWindowRateLimiter(redis.Redis(port=redis_server.port), prefix=prefix)
    app = RateLimitWSGIMiddleware(lambda e, s: [], sync, {"/": Policy("p", 1, 60)})
    assert sync.deny_cache is not None
    shadow_limiter = SlidingWindowRateLimiter(redis.Redis(port=redis_server.port))
    RateLimitWSGIMiddleware(lambda e, s: [], shadow_limiter, {"/": Policy("p", 1, 60)},
                            shadow=True)
    assert shadow_limiter.deny_cache is None
    off = SlidingWindowRateLimiter(redis.Redis(port=redis_server.port))
    RateLimitWSGIMiddleware(lambda e, s: [], off, {"/": Policy("p", 1, 60)}, deny_cache=False)
    assert off.deny_cache is None
    assert app.limiter is sync

    async def hello(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"hi"})

    async def main() -> None:
        client = redis.asyncio.Redis(port=redis_server.port)
        counting = Counting(client)
        limiter = AsyncSlidingWindowRateLimiter(counting, prefix=prefix)  # type: ignore[arg-type]
        asgi = RateLimitMiddleware(hello, limiter, {"/": Policy("p", 2, 60)})
        transport = httpx.ASGITransport(app=asgi, client=("203.0.113.9", 1))
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as http:
            codes = [(await http.get("/x")).status_code for _ in range(6)]
            last = await http.get("/x")
        assert codes == [200, 200, 429, 429, 429, 429]
        assert last.headers["x-ratelimit-remaining"] == "0"
        assert int(last.headers["retry-after"]) >= 1
        assert counting.count("SLIDINGWINDOW.CHECK") == 3  # the first refusal only
        await client.aclose()

    asyncio.run(main())


# --- the flood ---------------------------------------------------------------------------

REQUESTS, THREADS, SPAN = 20_000, 20, 2.0


def _server_offset_ms(r: redis.Redis) -> float:
    best: Optional[tuple[float, float]] = None
    for _ in range(5):
        c1 = time.monotonic()
        sec, usec = r.time()
        c2 = time.monotonic()
        if best is None or c2 - c1 < best[0]:
            best = (c2 - c1, sec * 1000 + usec / 1000 - (c1 + c2) * 500)
    assert best is not None
    return best[1]


def _start_at(r: redis.Redis) -> float:
    """A client instant 100 ms after the server's next second begins."""
    off = _server_offset_ms(r)
    server_now = time.monotonic() * 1000 + off
    return ((server_now // 1000 + 1) * 1000 + 100 - off) / 1000


def _flood_sync(port: int, prefix: str, cached: bool) -> tuple[list[Any], int, Any, float]:
    r = redis.Redis(port=port)
    limiter = SlidingWindowRateLimiter(redis.Redis(port=port, max_connections=64),
                                       prefix=prefix, deny_cache=cached)
    per = REQUESTS // THREADS
    out: list[Any] = [None] * REQUESTS
    base = check_calls(r)
    start = _start_at(r)

    def worker(t: int) -> None:
        for i in range(per):
            slot = t + i * THREADS
            spin_until(start + SPAN * slot / REQUESTS)
            sent = time.monotonic()
            out[slot] = (limiter.check_limits("flood", SECONDS_LIMITS).allowed, sent,
                         time.monotonic())

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    calls = check_calls(r) - base
    off = _server_offset_ms(r)
    return out, calls, limiter.deny_cache.stats() if limiter.deny_cache else None, off


def _flood_async(port: int, prefix: str, cached: bool) -> tuple[list[Any], int, Any, float]:
    r = redis.Redis(port=port)
    out: list[Any] = [None] * REQUESTS
    base = check_calls(r)
    start = _start_at(r)

    async def main() -> Any:
        client = redis.asyncio.Redis(port=port, max_connections=64)
        limiter = AsyncSlidingWindowRateLimiter(client, prefix=prefix, deny_cache=cached)

        async def task(t: int) -> None:
            for i in range(REQUESTS // THREADS):
                slot = t + i * THREADS
                pause = start + SPAN * slot / REQUESTS - time.monotonic()
                if pause > 0:
                    await asyncio.sleep(pause)
                sent = time.monotonic()
                allowed = (await limiter.check_limits("flood", SECONDS_LIMITS)).allowed
                out[slot] = (allowed, sent, time.monotonic())

        await asyncio.gather(*(task(t) for t in range(THREADS)))
        await client.aclose()
        return limiter.deny_cache.stats() if limiter.deny_cache else None

    stats = asyncio.run(main())
    return out, check_calls(r) - base, stats, _server_offset_ms(r)


@pytest.mark.parametrize("kind", ["threads", "tasks"])
def test_flood_reaches_redis_once_per_interval(
    redis_server: RedisServer, prefix: str, kind: str, figures: list[str],
) -> None:
    flood = _flood_sync if kind == "threads" else _flood_async
    cached, calls_cached, stats, off_c = flood(redis_server.port, prefix + "c:", True)
    plain, calls_plain, _, off_p = flood(redis_server.port, prefix + "p:", False)
    assert calls_plain == REQUESTS  # without the cache: every request reaches Redis
    allowed_c = sum(a for a, _, _ in cached)
    allowed_p = sum(a for a, _, _ in plain)
    refused_calls = calls_cached - allowed_c
    # At most one refused call per cached interval: each refusal that reached Redis began
    # one. The intervals: those of the requests sent together before the first answer
    # came back (at most one per thread or task), then about one per server second, more
    # when the server clock's offset is known only loosely (an entry then ends a little
    # before the second does, and the next refusal's entry covers the rest).
    assert refused_calls <= stats.stored
    # The server seconds the flood touches: as planned, or more when a loaded machine
    # stretched it (each second can begin intervals of its own).
    took = max(d for _, _, d in cached) - min(t for _, t, _ in cached)
    seconds = int(max(SPAN, took)) + 1
    assert stats.stored <= THREADS + 25 * seconds, stats
    # Request for request: the same answer, except among the first requests of a server
    # second (which ten of them are allowed depends on the two runs' timing): the server
    # decided between the send and the answer, and that span began within the first
    # 300 ms of a second or crossed into the next.
    def near_start(sent_done: tuple[float, float], off: float) -> bool:
        sent, done = (t * 1000 + off for t in sent_done)
        return sent % 1000 < 300 or sent % 1000 > 995 or sent // 1000 != done // 1000

    differ = [i for i in range(REQUESTS) if cached[i][0] != plain[i][0]]
    unexplained = [i for i in differ
                   if not (near_start(cached[i][1:], off_c) or near_start(plain[i][1:], off_p))]
    lag_p = max(s for _, s, _ in plain) - min(s for _, s, _ in plain)
    figures.append(f"{kind}: Redis CHECK calls {calls_cached} with the cache (allowed "
                   f"{allowed_c}, refused {refused_calls}, entries stored {stats.stored}, "
                   f"hits {stats.hits}, waits {stats.waits}), {calls_plain} without "
                   f"(allowed {allowed_p}, sent over {lag_p:.2f}s); {len(differ)} answers "
                   f"differ, {len(unexplained)} outside a second's first 300 ms")
    assert not unexplained, unexplained[:10]
    assert allowed_c <= 10 * seconds and allowed_p <= 10 * (int(lag_p) + 2)


def test_outage_keeps_cached_refusals_then_empties(own_server: RedisServer, prefix: str) -> None:
    """A cached refusal is Redis's own answer: it holds while Redis is down and nobody
    has noticed yet; once a call finds the outage, the cache is emptied and bypassed
    (the circuit answers as without it), since the server may come back without counts."""
    limiter = SlidingWindowRateLimiter(redis.Redis(port=own_server.port, socket_timeout=0.5),
                                       prefix=prefix, deny_cache=True, probe_interval=0.2)
    assert limiter.check("a", 1, 60).allowed
    assert not limiter.check("a", 1, 60).allowed
    own_server.stop()
    assert not limiter.check("a", 1, 60).degraded  # from the cache
    assert limiter.check("b", 1, 60).degraded  # reaches the circuit: an outage
    got = limiter.check("a", 1, 60)
    assert got.degraded and got.allowed  # fail-open, as without the cache
    assert limiter.deny_cache is not None and len(limiter.deny_cache) == 0
