"""One limit, the name every client uses (CONTRACT: `Limit`; `Rate` is its old alias)."""

from __future__ import annotations

from dataclasses import dataclass

# The module's MAX_LIMITS (src/window.rs): limits per call, the positional one and each LIMIT.
MAX_LIMITS = 8

_UNITS = (("day", 86400), ("hour", 3600), ("minute", 60), ("second", 1))


@dataclass(frozen=True)
class Limit:
    """`limit` requests per sliding `window`, in the call's unit (seconds, or milliseconds
    with `ms=True`)."""

    limit: int
    window: int

    def __str__(self) -> str:
        """As a rate string, the window read as seconds: `10 per second`, `100 per 5 minutes`."""
        for unit, seconds in _UNITS:
            if self.window % seconds == 0:
                n = self.window // seconds
                return f"{self.limit} per {unit}" if n == 1 else f"{self.limit} per {n} {unit}s"
        raise AssertionError("every window is a whole number of seconds")
