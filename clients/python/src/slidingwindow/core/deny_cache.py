"""An exact local cache of refusals: denials that cost Redis nothing.

A refused CHECK's `retry_after` is the smallest time after which the same request, with
no other traffic, is allowed; other traffic only raises the counts. So until then the
same request (same key, same limits, the same or a larger cost) is refused, and a
client that remembers the refusal answers exactly what Redis would answer, without
asking it. `DenyCache` remembers, per key, limits and cost (a larger cost would get a
longer `retry_after` from Redis), the last refusal and the client instant before which
Redis cannot allow it, computed on the safe side:

* Redis decided at some instant between sending and receiving: the deadline is counted
  from the send (`t_send`), so it can only come early.
* Milliseconds (`MS`, server clock): the server's clock is an integer number of ms, so a
  refusal at ms `s` with `retry_after = r` is refused through `s + r - 1`; allowed from
  `s + r`. The entry refuses while `t < t_send + (r - 1) ms`.
* Seconds (server clock): the server floors its clock to seconds, so a `retry_after` of
  `r` means "from the start of second `S + r`", which can be as little as `r - 1`
  seconds and 1 ms away. Alone, that gives `t_send + (r - 1) s`, useless for `r = 1`.
  When the limiter knows the server clock's offset to its own (a `TIME` call, measured
  as an interval `[off_lo, off_hi]` from the call's send and receive instants, renewed
  every `clock_refresh` seconds), the second `S` is at least `floor((t_send + off_lo) /
  1000)` and the server reaches `(S + r) * 1000` no earlier than the client instant
  `(S + r) * 1000 - off_hi`: the entry lasts until the larger of the two bounds.
* Explicit `now` (the caller's clock): exact in units, `now0 <= now < now0 + r`.
* Both clocks are assumed to run at the same rate; `margin` (1 ms plus 500 ppm of the
  interval and of the offset's age) covers slewing. A server clock that jumps forward
  (a wall-clock step) can end a refusal early on the server: not covered.
* `cost > limit` (`retry_after = -1` on a refusal) is never allowed: cached without end.

What can make a cached refusal wrong, until its `retry_after` at the most: a REFUND, a
DEL or an eviction of the key by another process (a refund through the limiter that
owns the cache clears the key's entries at once), or writers of the same key whose
explicit `now` runs ahead of the server clock (time going backwards for the module).

A cached answer has the fields Redis would send: `retry_after` and `reset_after` counted
down by the whole units that have surely elapsed since the reply (so they are never
shorter than Redis's), per-limit `retry_after` turned to -1 once that limit alone surely
allows, `count` and `remaining` as refused (for cost 1, `remaining` is 0, as Redis says).

One call at a time per key and limits goes to Redis while nothing is cached for them (a
first call, or a refusal's entry has ended): the others wait for its answer (a single
flight), and are answered from it if it is a refusal. After an allowed answer that leaves
`remaining` quota, that many waiters (`remaining // cost`) go to Redis at once, the next
one leads a new flight and the rest wait for it: calls on a key far from its limit are not
held up, and a flood on one identity reaches Redis about `limit` + 1 times per cached
interval, not once per thread or task (the 20 threads' first requests would otherwise all
reach Redis before the first refusal is back). With `now` given (the caller's clock)
calls are never held.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, replace
from typing import Any, Awaitable, Callable, Iterator, Optional, Sequence, TypeVar, Union

from .commands import CHECK, REFUND
from .result import MultiLimitResult, RateLimitResult

T = TypeVar("T")
C = TypeVar("C")

DEFAULT_MAX_ENTRIES = 10_000
PPM = 500e-6  # clock rates may differ by this much (NTP slews at most 500 ppm)
MARGIN = 0.001  # seconds, taken off every deadline
WAIT_TIMEOUT = 5.0  # seconds a call waits for another call on the same key at the most
CLOCK_SAMPLES = 3  # TIME calls per measurement of the offset; the narrowest is kept
MAX_PER_KEY = 8  # entries (limit sets x costs x clock kinds) kept under one Redis key

_bypass: contextvars.ContextVar[bool] = contextvars.ContextVar("deny_cache_bypass",
                                                                default=False)


@contextlib.contextmanager
def bypass() -> Iterator[None]:
    """Calls made inside neither read nor fill a deny cache (shadow mode uses it)."""
    token = _bypass.set(True)
    try:
        yield
    finally:
        _bypass.reset(token)


@dataclass(frozen=True)
class Spec:
    """Where one CHECK (or REFUND) meets the cache, read from its argument vector."""

    key: str
    limits: tuple[tuple[int, int], ...]
    ms: bool
    now: Optional[int]
    cost: int
    details: bool
    refund: bool

    @property
    def slot(self) -> tuple[tuple[tuple[int, int], ...], bool, bool, int]:
        # The cost too: a larger cost is refused as long, but Redis answers it a longer
        # retry_after (and other counts), so only the same request gets the cached reply.
        return (self.limits, self.ms, self.now is None, self.cost)


def spec_for(command: str, key: str, limits: Sequence[tuple[int, int]], *, ms: bool,
             now: Optional[int], cost: int, details: bool) -> Optional[Spec]:
    """The Spec of a CHECK or REFUND, from the values its argument vector is built of
    (`_core`); None for anything else (PEEK bypasses the cache)."""
    if command != CHECK and command != REFUND:
        return None
    return Spec(key, tuple(limits), ms, None if now is None else int(now), cost, details,
                command == REFUND)


def _as_stored(answer: Any) -> Optional[MultiLimitResult]:
    if isinstance(answer, MultiLimitResult):
        return answer
    if isinstance(answer, RateLimitResult):
        return MultiLimitResult(answer, (answer,), 0)
    return None  # (allowed, count): no retry_after to remember it by


def _answer(spec: Spec, without_redis: Callable[[bool], Any], hit: MultiLimitResult) -> Any:
    """A cached refusal in the form the command answers."""
    if not spec.details:
        return (False, hit.summary.count)
    if isinstance(without_redis(False), MultiLimitResult):
        return hit
    return hit.summary


@dataclass
class _Entry:
    result: Optional[MultiLimitResult]  # None: no refusal yet (a first call's flight)
    never: bool
    deadline: float  # client monotonic seconds (server clock); units (explicit now)
    origin: float  # t_recv (server clock), or now0 (explicit now)
    flight: Any = None  # threading.Event or asyncio.Event: a call on its way to Redis
    waiters: int = 0
    tickets: int = 0  # waiters that may go to Redis at once (the quota an allowed call left)
    direct: int = 0  # calls on their way to Redis with a ticket


# What _enter gives a call that goes to Redis with a ticket (in the place of a flight).
_TICKET = object()


@dataclass
class DenyCacheStats:
    """What the cache answered, for metrics: `hits` answered without Redis, `misses`
    consulted and sent to Redis, `stored` refusals remembered, `expired` entries that
    ended, `cleared` by a refund or `forget`, `evicted` by the size bound, `waits` calls
    that waited for another call on the same key, `entries` held now."""

    hits: int = 0
    misses: int = 0
    stored: int = 0
    expired: int = 0
    cleared: int = 0
    evicted: int = 0
    waits: int = 0
    entries: int = 0

    def as_dict(self) -> dict[str, int]:
        return dict(self.__dict__)


@dataclass
class _Clock:
    """The server clock's offset to time.monotonic(), in ms: server = client + off,
    off within [lo, hi]; measured at `at` (monotonic seconds)."""

    lo: float
    hi: float
    at: float


def _elapsed_units(spec: Spec, entry: _Entry, t: float) -> int:
    """Whole units surely elapsed on the server since the refusal (a lower bound)."""
    if spec.now is not None:
        return max(0, spec.now - int(entry.origin))
    seconds = t - entry.origin
    return max(0, int(seconds * 1000 // 1) if spec.ms else int(seconds // 1))


def _count_down(result: MultiLimitResult, cost: int, e: int) -> MultiLimitResult:
    if e == 0:
        return result

    def one(r: RateLimitResult, summary: bool) -> RateLimitResult:
        retry = r.retry_after
        if retry > 0:
            retry = retry - e
            if retry <= 0:  # surely elapsed: this limit alone allows now
                retry = -1
        alone = r.allowed or (retry == -1 and cost <= r.limit)
        return replace(r, retry_after=retry, reset_after=max(0, r.reset_after - e),
                       allowed=False if summary else alone)

    limits = tuple(one(r, False) for r in result.limits)
    summary = one(result.summary, True)
    if summary.retry_after == -1 and result.summary.retry_after > 0:
        summary = replace(summary, retry_after=1)  # never reached: the entry ends first
    if len(limits) == 1:
        limits = (summary,)
    return MultiLimitResult(summary, limits, result.governing)


class DenyCache:
    """Refusals remembered until Redis could first allow the same request.

    max_entries: Redis keys held at the most, least recently used first out.
    clock_refresh: seconds between two measurements of the server clock's offset (one
        `TIME` call), which lets second-unit refusals last their whole interval; 0 never
        measures (then a seconds refusal lasts `retry_after - 1` seconds).

    Thread and task safe: one lock, held for dictionary operations only. `stats()` gives
    the counters (hits, entries, ...) to export to metrics.
    """

    def __init__(self, max_entries: int = DEFAULT_MAX_ENTRIES, *,
                 clock_refresh: float = 10.0) -> None:
        if max_entries < 1:
            raise ValueError("max_entries must be >= 1")
        self.max_entries = max_entries
        self.clock_refresh = clock_refresh
        self._lock = threading.Lock()
        self._keys: OrderedDict[str, dict[Any, _Entry]] = OrderedDict()
        self._stats = DenyCacheStats()
        self._clears = 0  # bumped by every forget: a call in flight across one stores nothing
        self._clock: Optional[_Clock] = None
        self._clock_busy = False

    # --- what users call -------------------------------------------------------------

    def stats(self) -> DenyCacheStats:
        with self._lock:
            self._stats.entries = sum(len(v) for v in self._keys.values())
            return replace(self._stats)

    def __bool__(self) -> bool:
        return True  # a cache is on even while empty

    def __len__(self) -> int:
        with self._lock:
            return sum(len(v) for v in self._keys.values())

    def forget(self, key: str) -> None:
        """Drops every refusal held for the Redis key `key` (e.g. after deleting it)."""
        with self._lock:
            self._clears += 1
            held = self._keys.pop(key, None)
            if held:
                self._stats.cleared += len(held)
                for entry in held.values():
                    _wake(entry)

    def clear(self) -> None:
        with self._lock:
            self._clears += 1
            for held in self._keys.values():
                for entry in held.values():
                    _wake(entry)
            self._keys.clear()

    # --- the limiters' hooks ---------------------------------------------------------

    def run_sync(self, spec: Spec, command: C, call: Callable[[C], T], client: Any) -> T:
        """`call(command)` through the cache (the sync limiter's `_run`)."""
        if spec.refund:
            self.forget(spec.key)
            try:
                return call(command)
            finally:
                self.forget(spec.key)
        while True:
            hit, lead, wait = self._enter(spec, threading.Event)
            if hit is not None:
                return _answer(spec, getattr(command, 'without_redis'), hit)  # type: ignore[no-any-return]
            if wait is None:
                break
            wait.wait(WAIT_TIMEOUT)
            self._left(spec)
        clears = self._clears
        t_send = time.monotonic()
        try:
            answer = call(command)
        except BaseException:
            self._done(spec, lead, None, clears, t_send, t_send)
            raise
        t_recv = time.monotonic()
        if self._wants_clock(spec, answer):
            self._measure_sync(client)
        self._done(spec, lead, answer, clears, t_send, t_recv)
        return answer

    async def run_async(self, spec: Spec, command: C, call: Callable[[C], Awaitable[T]],
                        client: Any) -> T:
        """`await call(command)` through the cache (the asyncio limiter's `_run`)."""
        if spec.refund:
            self.forget(spec.key)
            try:
                return await call(command)
            finally:
                self.forget(spec.key)
        while True:
            hit, lead, wait = self._enter(spec, asyncio.Event)
            if hit is not None:
                return _answer(spec, getattr(command, 'without_redis'), hit)  # type: ignore[no-any-return]
            if wait is None:
                break
            try:
                await asyncio.wait_for(wait.wait(), WAIT_TIMEOUT)
            except asyncio.TimeoutError:
                pass
            finally:
                self._left(spec)
        clears = self._clears
        t_send = time.monotonic()
        try:
            answer = await call(command)
        except BaseException:
            self._done(spec, lead, None, clears, t_send, t_send)
            raise
        t_recv = time.monotonic()
        if self._wants_clock(spec, answer):
            await self._measure_async(client)
        self._done(spec, lead, answer, clears, t_send, t_recv)
        return answer

    # --- inside ----------------------------------------------------------------------

    def _enter(self, spec: Spec, event: type[Any]
               ) -> tuple[Optional[MultiLimitResult], Any, Any]:
        """(a cached refusal to answer, or None; the flight this call leads, if any;
        a flight to wait for, if any)."""
        t = time.monotonic()
        with self._lock:
            held = self._keys.get(spec.key)
            entry = held.get(spec.slot) if held else None
            if entry is None:
                self._stats.misses += 1
                if spec.now is not None:
                    return None, None, None
                # The first call leads a flight; calls meanwhile wait for its answer.
                if held is None:
                    held = self._keys[spec.key] = {}
                elif len(held) >= MAX_PER_KEY:
                    _wake(held.pop(next(iter(held))))
                entry = held[spec.slot] = _Entry(None, False, float("-inf"), t, event())
                return None, entry.flight, None
            self._keys.move_to_end(spec.key)
            live = (entry.never or (
                spec.now is None and t < entry.deadline) or (
                spec.now is not None and entry.origin <= spec.now < entry.deadline))
            if live and entry.result is not None:
                self._stats.hits += 1
                e = _elapsed_units(spec, entry, t)
                return _count_down(entry.result, spec.cost, e), None, None
            if live or spec.now is not None:
                self._stats.misses += 1
                return None, None, None
            # Ended: what an allowed answer left goes at once, then one call at a time goes
            # to Redis; the others wait for its answer.
            if entry.tickets > 0:
                entry.tickets -= 1
                entry.direct += 1
                self._stats.misses += 1
                return None, _TICKET, None
            if entry.flight is not None and isinstance(entry.flight, event):
                entry.waiters += 1
                self._stats.waits += 1
                return None, None, entry.flight
            if entry.flight is None:
                if entry.deadline != float("-inf"):
                    self._stats.expired += 1
                    entry.deadline = float("-inf")
                entry.flight = event()
                self._stats.misses += 1
                return None, entry.flight, None
            self._stats.misses += 1
            return None, None, None

    def _left(self, spec: Spec) -> None:
        with self._lock:
            held = self._keys.get(spec.key)
            entry = held.get(spec.slot) if held else None
            if entry is not None and entry.waiters > 0:
                entry.waiters -= 1

    def _wants_clock(self, spec: Spec, answer: Any) -> bool:
        if spec.ms or spec.now is not None or not spec.details or self.clock_refresh <= 0:
            return False
        if getattr(answer, "allowed", True) or getattr(answer, "degraded", False):
            return False
        with self._lock:
            if self._clock_busy:
                return False
            fresh = self._clock is not None and (
                time.monotonic() - self._clock.at < self.clock_refresh)
            if not fresh:
                self._clock_busy = True
            return not fresh

    def _measure_sync(self, client: Any) -> None:
        try:
            if not _is_cluster(client):
                for _ in range(CLOCK_SAMPLES):
                    c1 = time.monotonic()
                    reply = client.execute_command("TIME")
                    self._set_clock(reply, c1, time.monotonic())
        except Exception:
            pass  # no offset: the deadline falls back to retry_after - 1 seconds
        finally:
            self._clock_busy = False

    async def _measure_async(self, client: Any) -> None:
        try:
            if not _is_cluster(client):
                for _ in range(CLOCK_SAMPLES):
                    c1 = time.monotonic()
                    reply = await client.execute_command("TIME")
                    self._set_clock(reply, c1, time.monotonic())
        except Exception:
            pass
        finally:
            self._clock_busy = False

    def _set_clock(self, reply: Sequence[Any], c1: float, c2: float) -> None:
        server_ms = int(reply[0]) * 1000 + int(reply[1]) / 1000
        clock = _Clock(server_ms - c2 * 1000, server_ms - c1 * 1000, c2)
        with self._lock:
            old = self._clock
            # Keep the narrower of the two while the old one is young.
            if old is None or (clock.hi - clock.lo) <= (old.hi - old.lo) or (
                    c2 - old.at >= self.clock_refresh):
                self._clock = clock

    def _deadline(self, spec: Spec, result: MultiLimitResult, t_send: float) -> float:
        r = result.retry_after
        if spec.now is not None:
            return float(spec.now + r)
        if spec.ms:
            span = (r - 1) / 1000
            return t_send + span - MARGIN - PPM * span
        span = float(r - 1)
        best = t_send + span - MARGIN - PPM * span
        clock = self._clock
        if clock is not None:
            age = t_send - clock.at
            second = (t_send * 1000 + clock.lo) // 1000
            end = ((second + r) * 1000 - clock.hi) / 1000  # client monotonic seconds
            span = end - t_send
            candidate = end - MARGIN - PPM * (span + abs(age))
            best = max(best, candidate)
        return best

    def _done(self, spec: Spec, lead: Any, answer: Any, clears: int,
              t_send: float, t_recv: float) -> None:
        stored = None if answer is None else _as_stored(answer)
        with self._lock:
            held = self._keys.get(spec.key)
            entry = held.get(spec.slot) if held else None
            if lead is _TICKET:
                lead = None
                if entry is not None and entry.direct > 0:
                    entry.direct -= 1
            if lead is not None and entry is not None and entry.flight is lead:
                entry.flight = None
            refused = (stored is not None and not stored.allowed and not stored.degraded
                       and clears == self._clears)
            if refused and stored is not None:
                never = stored.retry_after < 0
                deadline = float("inf") if never else self._deadline(spec, stored, t_send)
                origin = float(spec.now) if spec.now is not None else t_recv
                fresh = _Entry(stored, never, deadline, origin)
                if entry is not None:
                    fresh.waiters = entry.waiters
                    fresh.flight = entry.flight
                    fresh.direct = entry.direct
                if held is None:
                    held = self._keys[spec.key] = {}
                elif spec.slot not in held and len(held) >= MAX_PER_KEY:
                    held.pop(next(iter(held)))
                held[spec.slot] = fresh
                self._keys.move_to_end(spec.key)
                self._stats.stored += 1
                while len(self._keys) > self.max_entries:
                    _, dropped = self._keys.popitem(last=False)
                    self._stats.evicted += len(dropped)
                    for gone in dropped.values():
                        _wake(gone)
            elif entry is not None and held is not None and entry.deadline == float("-inf"):
                over = answer is None or stored is None or stored.degraded or entry.waiters == 0
                if lead is not None and not over and stored is not None:
                    # Allowed with calls waiting: as many as the quota left go at once (less
                    # those on their way already).
                    left = stored.summary.remaining // spec.cost - entry.direct
                    entry.tickets = max(0, min(entry.waiters, left))
                if over and entry.flight is None and entry.direct == 0:
                    # Allowed with nobody waiting, failed or degraded: nothing to remember.
                    del held[spec.slot]
                    if not held:
                        del self._keys[spec.key]
        if lead is not None:
            lead.set()


def _wake(entry: _Entry) -> None:
    if entry.flight is not None:
        entry.flight.set()
        entry.flight = None


def _is_cluster(client: Any) -> bool:
    # A cluster's TIME goes to some node, whose clock need not be the key's node's.
    return hasattr(client, "nodes_manager")


DenyCacheArg = Union[bool, DenyCache, None]


def make(deny_cache: DenyCacheArg) -> Optional[DenyCache]:
    """The limiter's `deny_cache` argument: False/None off, True a default cache."""
    if isinstance(deny_cache, DenyCache):
        return deny_cache
    return DenyCache() if deny_cache else None


def attach(limiter: Any, deny_cache: DenyCacheArg) -> None:
    """What a middleware's `deny_cache` does to its limiter: True gives it a default cache
    unless it has one, a DenyCache sets that one, False leaves the limiter as it is (the
    middleware's own calls then bypass any cache)."""
    if isinstance(deny_cache, DenyCache):
        limiter.deny_cache = deny_cache
    elif deny_cache and getattr(limiter, "deny_cache", None) is None:
        limiter.deny_cache = DenyCache()


def applies(cache: Optional[DenyCache], spec: Optional[Spec], circuit: Any) -> Optional[Spec]:
    """The limiters' hook: the call's Spec when `cache` is to see it, else None. During an
    outage the cache is emptied and bypassed: the circuit answers as without it, and a
    server that comes back may have lost its counts."""
    if cache is None or _bypass.get():
        return None
    if circuit.down:
        cache.clear()
        return None
    return spec
