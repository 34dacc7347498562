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
