"""One limit, the name every client uses (CONTRACT: `Limit`; `Rate` is its old alias)."""

from __future__ import annotations

from dataclasses import dataclass

# The module's MAX_LIMITS (crates/core/src/window.rs): limits per call, the positional one
# and each LIMIT.
MAX_LIMITS = 8


@dataclass(frozen=True)
class Limit:
    """`limit` requests per sliding `window`, in the call's unit (seconds, or milliseconds
    with `ms=True`; rate strings parse to milliseconds). It does not know its unit, so it
    prints as a dataclass: `rates.describe_ms` names a window in ms in words."""

    limit: int
    window: int
