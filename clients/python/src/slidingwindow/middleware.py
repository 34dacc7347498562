"""What the ASGI and WSGI middlewares share: policies, routes, identity, and the verdict.

A request is an ASGI scope or a WSGI environ; the few things read from it (a header, the
peer address, the authenticated user, method and path) are read here for both, so both
middlewares count the same identities and send the same headers.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from typing import (
    Any,
    Awaitable,
    Callable,
    Generic,
    Iterable,
    Mapping,
    MutableMapping,
    Optional,
    Sequence,
    TypeVar,
    Union,
)

from ._core import Limits, as_pairs
from .headers import limits_headers, sf_string
from .identity import NetworkLike, TrustedProxies, client_identity
from .result import MultiLimitResult, RateLimitResult

# An ASGI scope or a WSGI environ.
Request = MutableMapping[str, Any]
IdentityFn = Callable[[Request], Union[str, Awaitable[str]]]
ApiKeyFn = Callable[[Request], Optional[str]]
SHADOW_LOGGER = logging.getLogger("slidingwindow.shadow")


@dataclass(frozen=True)
class Policy:
    """`limit` requests (of weight `cost`) per sliding `window` seconds (ms if `ms`), or
    several rates at once: `Policy("api", rates="10/second;1000/hour")` (or Rates, or
    (limit, window) pairs), checked in one command, all or nothing.

    `name` appears in RateLimit-Policy and in the Redis key, so two policies never share
    a counter. `identity`, when set, replaces the middleware's for this policy (e.g. a
    login route counted by IP even for callers holding an API key).
    """

    name: str
    limit: int = -1
    window: int = 0
    ms: bool = False
    cost: int = 1
    identity: Optional[IdentityFn] = field(default=None, compare=False)
    rates: Optional[Limits] = field(default=None, repr=False)
    limits: tuple[tuple[int, int], ...] = field(init=False, default=())

    def __post_init__(self) -> None:
        sf_string(self.name)  # raises on a name the headers could not carry
        given = (self.limit, self.window) != (-1, 0)
        if (self.rates is None) == (not given):
            raise ValueError(f"policy {self.name!r}: give limit and window, or rates")
        pairs = as_pairs(self.rates, self.ms) if self.rates is not None else [
            (self.limit, self.window)]
        for limit, window in pairs:
            if limit < 0 or window < 1:
                raise ValueError(f"policy {self.name!r}: need limit >= 0 and window >= 1")
        if self.cost < 1:
            raise ValueError(f"policy {self.name!r}: need cost >= 1")
        object.__setattr__(self, "limits", tuple(pairs))
        object.__setattr__(self, "limit", pairs[0][0])
        object.__setattr__(self, "window", pairs[0][1])

    def describe(self) -> str:
        unit = "ms" if self.ms else "s"
        return " and ".join(f"{limit} per {window}{unit}" for limit, window in self.limits)


def is_wsgi(request: Request) -> bool:
    return "wsgi.version" in request


def header_values(request: Request, name: bytes) -> list[str]:
    """Every value of header `name` (lower case), in order. A WSGI server joins repeated
    lines into one value with commas (PEP 3333), which is how it comes back here."""
    if is_wsgi(request):
        key = "HTTP_" + name.decode("latin-1").upper().replace("-", "_")
        value = request.get(key)
        return [value] if value is not None else []
    return [v.decode("latin-1") for k, v in request.get("headers", ()) if k.lower() == name]


def request_line(request: Request) -> tuple[str, str]:
    """(method, path): for WSGI, PATH_INFO is the path inside the app, as routes see it."""
    if is_wsgi(request):
        return str(request.get("REQUEST_METHOD", "GET")), str(request.get("PATH_INFO", "") or "/")
    return str(request.get("method", "GET")), str(request["path"])


def peer_address(request: Request) -> Optional[str]:
    if is_wsgi(request):
        addr = request.get("REMOTE_ADDR")
        return str(addr) if addr else None
    client = request.get("client")
    return str(client[0]) if client else None


def request_user(request: Request) -> Optional[str]:
    """The authenticated user: Starlette's AuthenticationMiddleware puts it in the scope;
    in WSGI, REMOTE_USER (set by the server or an auth middleware)."""
    if is_wsgi(request):
        user = request.get("REMOTE_USER")
        return str(user) if user else None
    scope_user = request.get("user")
    if scope_user is None or not getattr(scope_user, "is_authenticated", False):
        return None
    for attribute in ("identity", "display_name"):
        try:
            value = getattr(scope_user, attribute)
        except NotImplementedError:  # starlette's BaseUser.identity
            continue
        if value:
            return str(value)
    return None


def header_api_key(header: str, is_valid: Callable[[str], bool]) -> ApiKeyFn:
    """An API-key reader for ScopeIdentity: the header's value if `is_valid` says so.

    Only a key the app accepts becomes an identity; an unknown key is counted by address,
    so a client cannot dodge its limit by inventing keys.
    """
    name = header.lower().encode("latin-1")

    def read(request: Request) -> Optional[str]:
        values = header_values(request, name)
        return values[0] if len(values) == 1 and is_valid(values[0]) else None

    return read


class ScopeIdentity:
    """The default identity, for ASGI scopes and WSGI environs alike: `key:<api key>` when
    `api_key` returns one, `user:<id>` for an authenticated user (unless `users=False`),
    else `ip:<client address>` (see identity.client_ip for how X-Forwarded-For and
    `trusted_proxies` are used)."""

    def __init__(
        self,
        trusted_proxies: Iterable[NetworkLike] = (),
        *,
        api_key: Optional[ApiKeyFn] = None,
        ipv6_prefix: int = 64,
        users: bool = True,
    ) -> None:
        self.trusted = TrustedProxies(trusted_proxies)
        self.api_key = api_key
        self.ipv6_prefix = ipv6_prefix
        self.users = users

    def __call__(self, request: Request) -> str:
        return client_identity(
            api_key=self.api_key(request) if self.api_key else None,
            user_id=request_user(request) if self.users else None,
            forwarded_for=header_values(request, b"x-forwarded-for"),
            peer=peer_address(request),
            trusted_proxies=self.trusted,
            ipv6_prefix=self.ipv6_prefix,
        )


RequestIdentity = ScopeIdentity


def by_ip(trusted_proxies: Iterable[NetworkLike] = (), ipv6_prefix: int = 64) -> ScopeIdentity:
    """An identity by client address only, ignoring API keys and users (for a login route)."""
    return ScopeIdentity(trusted_proxies, ipv6_prefix=ipv6_prefix, users=False)


Routes = Union[Mapping[str, Optional[Policy]], Sequence[tuple[str, Optional[Policy]]]]


def _matches(prefix: str, path: str) -> bool:
    # On segment boundaries: "/api" covers "/api" and "/api/x", not "/apix".
    base = prefix.rstrip("/")
    return base == "" or path == base or path.startswith(base + "/")


@dataclass(frozen=True)
class Refusal:
    """A request refused (or, in shadow mode, let through that would have been refused).
    `result` is the decision's summary (the governing limit's numbers; see
    MultiLimitResult), `results` each limit's; `result.degraded` means Redis was
    unavailable with a fail-closed limiter (a 503)."""

    policy: Policy
    identity: str
    method: str
    path: str
    result: RateLimitResult
    shadow: bool
    results: tuple[RateLimitResult, ...] = ()


RefusalHook = Callable[[Refusal], None]


@dataclass(frozen=True)
class Response:
    status: int
    headers: list[tuple[str, str]]
    body: bytes


class Guard:
    """The HTTP-independent part of a middleware: which policy, which identity, and what
    a decision becomes (a refusal to send, or headers to add).

    shadow: never refuse; each would-be refusal goes to `on_refusal` and to a WARNING line
        on the "slidingwindow.shadow" logger. Counting and headers are as when enforcing
        (a refused CHECK counts nothing, so the counts are exactly the enforcing ones).
    on_refusal: called with a `Refusal` for every refusal, enforced or shadow.
    """

    def __init__(
        self,
        policies: Routes,
        identity: Optional[IdentityFn],
        shadow: bool = False,
        on_refusal: Optional[RefusalHook] = None,
        logger: Optional[logging.Logger] = None,
    ) -> None:
        items = list(policies.items()) if isinstance(policies, Mapping) else list(policies)
        self.routes = sorted(items, key=lambda item: len(item[0].rstrip("/")), reverse=True)
        self.identity: IdentityFn = identity or ScopeIdentity()
        self.shadow = shadow
        self.on_refusal = on_refusal
        self.logger = logger or SHADOW_LOGGER

    def policy_for(self, path: str) -> Optional[Policy]:
        for prefix, policy in self.routes:
            if _matches(prefix, path):
                return policy
        return None

    def identity_for(self, policy: Policy) -> IdentityFn:
        return policy.identity or self.identity

    @staticmethod
    def client_id(policy: Policy, who: str) -> str:
        return f"{policy.name}:{who}"

    def verdict(
        self, request: Request, policy: Policy, who: str, decision: MultiLimitResult
    ) -> tuple[Optional[Response], list[tuple[str, str]]]:
        """(the refusal to send, or None to go on; headers to add to the app's response)."""
        headers = list(limits_headers(decision, policy.name).items())
        result = decision.summary
        if result.allowed:
            return None, headers
        method, path = request_line(request)
        event = Refusal(policy, who, method, path, result, self.shadow, decision.limits)
        if self.on_refusal is not None:
            try:
                self.on_refusal(event)
            except Exception:  # a broken hook must not break the request
                self.logger.exception("rate limiter: on_refusal hook raised")
        if not self.shadow:
            return refusal_response(policy, result, headers), headers
        self._log_shadow(event)
        # Retry-After belongs to a refusal; the request goes on, so it is left out.
        return None, [(k, v) for k, v in headers if k != "Retry-After"]

    def _log_shadow(self, event: Refusal) -> None:
        if event.result.degraded:
            why = "rate limiter unavailable, fail-closed: 503"
        else:
            why = f"429, retry after {event.result.retry_after_seconds}s"
        self.logger.warning(
            "shadow: would refuse %s %s for %s under %r (%s; %s)",
            event.method, event.path, event.identity, event.policy.name,
            event.policy.describe(), why,
        )


def refusal_response(
    policy: Policy, result: RateLimitResult, headers: list[tuple[str, str]]
) -> Response:
    """429 with the headers and a JSON body; 503 when Redis was unavailable (fail-closed)."""
    if result.degraded:
        status = 503
        body: dict[str, Any] = {
            "error": "rate_limiter_unavailable",
            "message": "The rate limiter is unavailable; try again later.",
        }
    else:
        status = 429
        body = {
            "error": "rate_limited",
            "message": f"Too many requests: {policy.describe()} ({policy.name!r}).",
            "policy": policy.name,
            "limit": result.limit,
            "retry_after": result.retry_after_seconds,
        }
    payload = json.dumps(body).encode()
    return Response(status, [
        ("Content-Type", "application/json"),
        ("Content-Length", str(len(payload))),
        *headers,
    ], payload)


AppT = TypeVar("AppT")
LimiterT = TypeVar("LimiterT")


class MiddlewareBase(Generic[AppT, LimiterT]):
    """The constructor both middlewares share; see `Guard` for `shadow` and `on_refusal`."""

    def __init__(
        self,
        app: AppT,
        limiter: LimiterT,
        policies: Routes,
        identity: Optional[IdentityFn] = None,
        *,
        shadow: bool = False,
        on_refusal: Optional[RefusalHook] = None,
        logger: Optional[logging.Logger] = None,
    ) -> None:
        self.app = app
        self.limiter = limiter
        self.guard = Guard(policies, identity, shadow, on_refusal, logger)

    def policy_for(self, path: str) -> Optional[Policy]:
        return self.guard.policy_for(path)
