"""Policies (how many requests per window, under which name) and the routes that pick one."""

from __future__ import annotations

from typing import Any, Callable, Mapping, Optional, Sequence, Union

from ..core.base import Limits, as_pairs
from .headers import sf_string
from .request_identity import IdentityFn


# Whether a response with this HTTP status counts against the limit (see Policy.count_when).
CountWhen = Callable[[int], bool]


def is_failure(status: int) -> bool:
    """A 4xx or 5xx response."""
    return status >= 400


def is_success(status: int) -> bool:
    """Any response below 400 (1xx, 2xx, 3xx)."""
    return status < 400


def count_only_failures() -> CountWhen:
    """For `Policy(count_when=...)`: only 4xx and 5xx responses count (failed logins
    limited, successful ones free; express-rate-limit's skipSuccessfulRequests)."""
    return is_failure


def count_only_successes() -> CountWhen:
    """For `Policy(count_when=...)`: only responses below 400 count (e.g. a quota of
    resources created, failed attempts free; express-rate-limit's skipFailedRequests)."""
    return is_success


class Policy:
    """`limit` requests (of weight `cost`) per sliding `window` seconds (ms if `ms`), or
    several rates at once: `Policy("api", rates="10/second;1000/hour")` (or Rates, or
    (limit, window) pairs), checked in one command, all or nothing. A rate string's
    windows are in ms (`policy.ms` is then True, `limits` in ms): it is sent with MS.

    `name` appears in RateLimit-Policy and in the Redis key, so two policies never share
    a counter. `identity`, when set, replaces the middleware's for this policy (e.g. a
    login route counted by IP even for callers holding an API key).

    `count_when(status)`, when set, decides after the response whether the request
    counts: the middleware CHECKs before the request as always (a refused one gets its
    429 and counts nothing), and when the allowed request's response status makes
    `count_when` false, REFUNDs it once with the CHECK's arguments, before the response
    goes out. `count_only_failures()` and `count_only_successes()` are the usual two.
    Read-only.
    """

    __slots__ = ("_name", "_limits", "_ms", "_cost", "_identity", "_count_when")

    def __init__(self, name: str, limit: Optional[int] = None, window: Optional[int] = None,
                 ms: bool = False, cost: int = 1, identity: Optional[IdentityFn] = None,
                 rates: Optional[Limits] = None,
                 count_when: Optional[CountWhen] = None) -> None:
        sf_string(name)  # raises on a name the headers could not carry
        given = limit is not None or window is not None
        if (rates is None) != given:
            raise ValueError(f"policy {name!r}: give limit and window, or rates")
        if rates is not None:
            pairs, ms = as_pairs(rates, ms)
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
        if count_when is not None and not callable(count_when):
            raise TypeError(f"policy {name!r}: count_when must be callable(status) -> bool")
        self._count_when = count_when

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
    def count_when(self) -> Optional[CountWhen]:
        """None: every allowed request counts. Else whether a response status counts."""
        return self._count_when

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
        return (self._name, self._limits, self._ms, self._cost, self._count_when)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Policy) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        extra = "" if self._count_when is None else f", count_when={self._count_when!r}"
        return (f"Policy({self._name!r}, limits={self._limits!r}, ms={self._ms}, "
                f"cost={self._cost}{extra})")

    def describe(self) -> str:
        """`10 per 1s and 1000 per 3600s`; `5 per 500ms`: ms windows of whole seconds (a
        rate string's) in seconds, as before rate strings were sent in ms."""
        return " and ".join(f"{limit} per {_window_words(window, self.ms)}"
                            for limit, window in self.limits)


def _window_words(window: int, ms: bool) -> str:
    if ms and window % 1000 == 0:
        return f"{window // 1000}s"
    return f"{window}{'ms' if ms else 's'}"


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
