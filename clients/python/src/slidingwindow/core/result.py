"""What one SLIDINGWINDOW.CHECK or PEEK answered, as a value."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence


def ceil_div(n: int, d: int) -> int:
    return -(-n // d)


@dataclass(frozen=True)
class RateLimitResult:
    """One decision. Times are in the request's unit: seconds, or milliseconds when `ms`.

    `degraded` is True when Redis could not be asked (see fail-open): the result then
    says only `allowed`, and its counters are placeholders (count 0, remaining = limit,
    retry_after -1, reset_after 0) that the header helpers leave out.
    """

    allowed: bool
    count: int
    limit: int
    remaining: int
    retry_after: int
    reset_after: int
    window: int
    ms: bool = False
    degraded: bool = False

    @classmethod
    def from_reply(cls, reply: Sequence[Any], window: int, ms: bool) -> RateLimitResult:
        """From a DETAILS reply: [allowed, count, limit, remaining, retry_after, reset_after]."""
        if len(reply) != 6:
            raise ValueError(f"expected a 6-element DETAILS reply, got {reply!r}")
        allowed, count, limit, remaining, retry_after, reset_after = (int(v) for v in reply)
        return cls(bool(allowed), count, limit, remaining, retry_after, reset_after, window, ms)

    @classmethod
    def unavailable(cls, allowed: bool, limit: int, window: int, ms: bool) -> RateLimitResult:
        """The placeholder result of a fail-open (allowed) or fail-closed (denied) call."""
        remaining = limit if allowed else 0
        return cls(allowed, 0, limit, remaining, -1, 0, window, ms, degraded=True)

    def _to_seconds(self, units: int) -> int:
        # Rounded up: a client told to wait this long is never early.
        return ceil_div(units, 1000) if self.ms else units

    @property
    def retry_after_seconds(self) -> int | None:
        """Whole seconds after which the same request is allowed; None when allowed now
        or never possible (cost > limit)."""
        return None if self.retry_after < 0 else self._to_seconds(self.retry_after)

    @property
    def reset_after_seconds(self) -> int:
        """Whole seconds until the estimate is back to 0 (the full limit is available)."""
        return self._to_seconds(self.reset_after)

    @property
    def window_seconds(self) -> int:
        """The window in whole seconds, at least 1 (as RateLimit-Policy's `w` needs)."""
        return max(1, self._to_seconds(self.window))


@dataclass(frozen=True)
class MultiLimitResult:
    """One decision on several limits at once (all must allow; then each counts).

    `summary` is the reply's head: allowed, the governing limit's count, limit and
    remaining, `retry_after` (-1 when allowed; else when every limit allows the same
    request, or -1 if one never can) and `reset_after` (until every window is empty).
    `limits` has each limit's own result in call order (`allowed` there: that limit alone
    would allow it). `governing` indexes the limit the summary speaks for, read from the
    reply (the module picks it: when denied, the denying one with the longest wait,
    "never" longest; else the one with the fewest remaining; ties to the first).
    """

    summary: RateLimitResult
    limits: tuple[RateLimitResult, ...]
    governing: int

    @property
    def allowed(self) -> bool:
        return self.summary.allowed

    @property
    def degraded(self) -> bool:
        return self.summary.degraded

    @property
    def ms(self) -> bool:
        return self.summary.ms

    @property
    def retry_after(self) -> int:
        return self.summary.retry_after

    @property
    def governing_result(self) -> RateLimitResult:
        return self.limits[self.governing]

    @classmethod
    def from_reply(
        cls, reply: Sequence[Any], windows: Sequence[int], cost: int, ms: bool
    ) -> MultiLimitResult:
        """From a DETAILS reply: 6 elements for one limit, a 7th (one array per limit,
        `[window, limit, count, remaining, retry_after, reset_after]`) for several."""
        if len(windows) == 1:
            single = RateLimitResult.from_reply(reply, windows[0], ms)
            return cls(single, (single,), 0)
        if len(reply) != 7 or len(reply[6]) != len(windows):
            raise ValueError(f"expected a 7-element DETAILS reply for {len(windows)} limits, "
                             f"got {reply!r}")
        allowed, count, limit, remaining, retry_after, reset_after = (int(v) for v in reply[:6])
        limits = tuple(_one_limit(item, allowed == 1, cost, ms) for item in reply[6])
        governing = _governing(reply)
        summary = RateLimitResult(allowed == 1, count, limit, remaining, retry_after,
                                  reset_after, limits[governing].window, ms)
        return cls(summary, limits, governing)

    @classmethod
    def unavailable(
        cls, allowed: bool, rates: Sequence[tuple[int, int]], ms: bool
    ) -> MultiLimitResult:
        """The placeholder of a call answered without Redis (see RateLimitResult)."""
        limits = tuple(RateLimitResult.unavailable(allowed, limit, window, ms)
                       for limit, window in rates)
        return cls(limits[0], limits, 0)


def _one_limit(item: Sequence[Any], allowed: bool, cost: int, ms: bool) -> RateLimitResult:
    """One limit of the 7th element. Its `retry_after` is -1 when that limit alone allows
    the request, and also when it never can (cost > limit): the module's README."""
    window, limit, count, remaining, retry_after, reset_after = (int(v) for v in item)
    alone = allowed or (retry_after == -1 and cost <= limit)
    return RateLimitResult(alone, count, limit, remaining, retry_after, reset_after, window, ms)


def _governing(reply: Sequence[Any]) -> int:
    """The limit the summary speaks for, as the module names it: the first whose limit,
    count, remaining and retry_after are the summary's (a tie in all four is a tie in the
    module's own rule, which also goes to the first)."""
    head = [int(v) for v in (reply[2], reply[1], reply[3], reply[4])]
    for i, item in enumerate(reply[6]):
        if [int(v) for v in item[1:5]] == head:
            return i
    raise ValueError(f"no limit in the DETAILS reply matches its summary: {reply!r}")


@dataclass(frozen=True)
class WindowCounts:
    """What SLIDINGWINDOW.COUNTS answers for one window of a key: the counts in force
    (`previous`, `current`) and the units elapsed in the current window. `degraded`: Redis
    could not be asked, and the three are 0."""

    previous: int
    current: int
    elapsed: int
    degraded: bool = False

    @classmethod
    def from_reply(cls, reply: Sequence[Any]) -> WindowCounts:
        """From COUNTS' reply: [previous, current, elapsed]."""
        if len(reply) != 3:
            raise ValueError(f"expected a 3-element COUNTS reply, got {reply!r}")
        previous, current, elapsed = (int(v) for v in reply)
        return cls(previous, current, elapsed)

    @classmethod
    def unavailable(cls) -> WindowCounts:
        """The placeholder of a COUNTS answered without Redis (fail-open and fail-closed alike)."""
        return cls(0, 0, 0, degraded=True)
