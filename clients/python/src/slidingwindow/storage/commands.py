"""What the `limits` storages send to the module and how they read its replies.

Shared by the sync and the asyncio storages (`slidingwindow.limits_storage`): the same
commands go through `redis.Redis`, `redis.cluster.RedisCluster` and their asyncio twins.
"""

from __future__ import annotations

from typing import Any, Optional, Union

from limits.errors import ConfigurationError

from ..core.commands import CHECK, COUNTS, PEEK

SCHEME_TAG = "slidingwindow"
# One key per limit and identity, apart from the keys limits' fixed and moving windows
# write for the same item (a CHECK on those would be WRONGTYPE).
KEY_TAG = "slidingwindow/"

Arg = Union[str, int]


def native_uri(uri: str) -> str:
    """`slidingwindow+redis://h:6379/0` -> `redis://h:6379/0` (also `async+`, `+cluster`):
    the URI limits' own Redis storage understands."""
    scheme, sep, rest = uri.partition("://")
    parts = scheme.split("+")
    if not sep or SCHEME_TAG not in parts:
        raise ConfigurationError(f"not a {SCHEME_TAG} storage uri: {uri}")
    parts.remove(SCHEME_TAG)
    return "+".join(parts) + sep + rest


def window_ms(expiry: float) -> int:
    """limits' expiry (seconds) as the module's window in milliseconds."""
    ms = round(expiry * 1000)
    if ms < 1:
        raise ValueError(f"the window must be at least 1 ms, not {expiry} s")
    return ms


def acquire_command(key: str, limit: int, expiry: float, amount: int) -> Optional[list[Arg]]:
    """The one command that decides and counts a hit; None when no call is needed
    (`amount > limit` can never be allowed, as in limits' own storages)."""
    if amount < 0:
        raise ValueError(f"cost must be 0 or more, not {amount}")
    if amount > limit:
        return None
    if amount == 0:
        # limits allows a cost of 0 while the estimate is <= limit and counts nothing.
        # The module's COST is 1 or more, so ask PEEK whether 1 more fits under limit + 1.
        return [PEEK, key, limit + 1, window_ms(expiry), "MS"]
    return [CHECK, key, limit, window_ms(expiry), "COST", amount, "MS"]


def counts_command(key: str, expiry: float) -> list[Arg]:
    return [COUNTS, key, window_ms(expiry), "MS"]


def allowed(reply: Any) -> bool:
    """CHECK and PEEK answer `[allowed, count]`."""
    return int(reply[0]) == 1


def sliding_window(reply: Any, expiry: float) -> tuple[int, float, int, float]:
    """COUNTS' `[previous, current, elapsed ms]` as limits' `get_sliding_window` tuple
    `(previous count, previous ttl, current count, current ttl)`, TTLs in seconds.

    The module's windows start at multiples of the window since the Unix epoch, as the
    windows of limits' memory and memcached storages do, and their TTLs are derived the
    same way: the previous count weighs for the rest of the current window; the current
    count becomes the previous one when the current window ends and is gone a window
    later.
    """
    previous, current, elapsed = (int(x) for x in reply)
    left = (window_ms(expiry) - elapsed) / 1000
    return previous, (left if previous else 0.0), current, left + expiry
