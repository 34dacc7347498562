"""Policies (how many requests per window, under which name) and the routes that pick one."""

from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence, Union

from ._core import Limits, as_pairs
from .headers import sf_string
from .http_identity import IdentityFn


class Policy:
    """`limit` requests (of weight `cost`) per sliding `window` seconds (ms if `ms`), or
    several rates at once: `Policy("api", rates="10/second;1000/hour")` (or Rates, or
    (limit, window) pairs), checked in one command, all or nothing.

    `name` appears in RateLimit-Policy and in the Redis key, so two policies never share
    a counter. `identity`, when set, replaces the middleware's for this policy (e.g. a
    login route counted by IP even for callers holding an API key). Read-only.
    """

    __slots__ = ("_name", "_limits", "_ms", "_cost", "_identity")

    def __init__(self, name: str, limit: Optional[int] = None, window: Optional[int] = None,
                 ms: bool = False, cost: int = 1, identity: Optional[IdentityFn] = None,
                 rates: Optional[Limits] = None) -> None:
        sf_string(name)  # raises on a name the headers could not carry
        given = limit is not None or window is not None
        if (rates is None) != given:
            raise ValueError(f"policy {name!r}: give limit and window, or rates")
        if rates is not None:
            pairs = as_pairs(rates, ms)
        elif limit is None or window is None:
            raise ValueError(f"policy {name!r}: give limit and window, or rates")
        else:
            pairs = [(limit, window)]
        for each_limit, each_window in pairs:
            if each_limit < 0 or each_window < 1:
                raise ValueError(f"policy {name!r}: need limit >= 0 and window >= 1")
        if cost < 1:
            raise ValueError(f"policy {name!r}: need cost >= 1")
        self._name, self._limits, self._ms = name, tuple(pairs), ms
        self._cost, self._identity = cost, identity

    @property
    def name(self) -> str:
        return self._name

    @property
    def ms(self) -> bool:
        return self._ms

    @property
    def cost(self) -> int:
        return self._cost

    @property
    def identity(self) -> Optional[IdentityFn]:
        return self._identity

    @property
    def limits(self) -> tuple[tuple[int, int], ...]:
        """(limit, window) of every rate, in order."""
        return self._limits

    @property
    def limit(self) -> int:
        """The first rate's limit."""
        return self._limits[0][0]

    @property
    def window(self) -> int:
        """The first rate's window."""
        return self._limits[0][1]

    def _key(self) -> tuple[Any, ...]:
        return (self._name, self._limits, self._ms, self._cost)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Policy) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return f"Policy({self._name!r}, limits={self._limits!r}, ms={self._ms}, cost={self._cost})"

    def describe(self) -> str:
        unit = "ms" if self.ms else "s"
        return " and ".join(f"{limit} per {window}{unit}" for limit, window in self.limits)


Routes = Union[Mapping[str, Optional[Policy]], Sequence[tuple[str, Optional[Policy]]]]


class RouteTable:
    """The longest matching path prefix picks the policy (None: not limited)."""

    def __init__(self, routes: Routes) -> None:
        items = list(routes.items()) if isinstance(routes, Mapping) else list(routes)
        self.routes = sorted(items, key=lambda item: len(item[0].rstrip("/")), reverse=True)

    def policy_for(self, path: str) -> Optional[Policy]:
        for prefix, policy in self.routes:
            if _matches(prefix, path):
                return policy
        return None


def _matches(prefix: str, path: str) -> bool:
    # On segment boundaries: "/api" covers "/api" and "/api/x", not "/apix".
    base = prefix.rstrip("/")
    return base == "" or path == base or path.startswith(base + "/")
