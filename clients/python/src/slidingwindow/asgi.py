"""Rate limiting as pure ASGI middleware (Starlette, FastAPI, or any ASGI app).

    app.add_middleware(
        RateLimitMiddleware,
        limiter=AsyncSlidingWindowRateLimiter(connect_async("redis://127.0.0.1:6379")),
        policies=[("/api/login", Policy("login", 5, 60)), ("/api", Policy("api", 100, 60)),
                  ("/health", None)],
        identity=ScopeIdentity(trusted_proxies=["10.0.0.0/8"]),
    )

The longest matching path prefix picks the policy (None: not limited). A denied request
gets 429 with the rate-limit headers and a JSON body; an allowed one goes on with the
headers added to its response. With a fail-closed limiter and Redis down: 503.
"""

from __future__ import annotations

import inspect
import json
from dataclasses import dataclass
from typing import (
    Any,
    Awaitable,
    Callable,
    Iterable,
    Mapping,
    MutableMapping,
    Optional,
    Sequence,
    Union,
)

from .aio import AsyncSlidingWindowRateLimiter
from .headers import rate_limit_headers, sf_string
from .identity import NetworkLike, TrustedProxies, client_identity
from .result import RateLimitResult

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]
IdentityFn = Callable[[Scope], Union[str, Awaitable[str]]]
ApiKeyFn = Callable[[Scope], Optional[str]]


@dataclass(frozen=True)
class Policy:
    """`limit` requests (of weight `cost`) per sliding `window` seconds (ms if `ms`).

    `name` appears in RateLimit-Policy and in the Redis key, so two policies never share
    a counter. `identity`, when set, replaces the middleware's for this policy (e.g. a
    login route counted by IP even for callers holding an API key).
    """

    name: str
    limit: int
    window: int
    ms: bool = False
    cost: int = 1
    identity: Optional[IdentityFn] = None

    def __post_init__(self) -> None:
        sf_string(self.name)  # raises on a name the headers could not carry
        if self.limit < 0 or self.window < 1 or self.cost < 1:
            raise ValueError(f"policy {self.name!r}: need limit >= 0, window >= 1, cost >= 1")


def header_values(scope: Scope, name: bytes) -> list[str]:
    """Every value of header `name` (lower case), in order."""
    return [v.decode("latin-1") for k, v in scope.get("headers", ()) if k.lower() == name]


def header_api_key(header: str, is_valid: Callable[[str], bool]) -> ApiKeyFn:
    """An API-key reader for ScopeIdentity: the header's value if `is_valid` says so.

    Only a key the app accepts becomes an identity; an unknown key is counted by address,
    so a client cannot dodge its limit by inventing keys.
    """
    name = header.lower().encode("latin-1")

    def read(scope: Scope) -> Optional[str]:
        values = header_values(scope, name)
        return values[0] if len(values) == 1 and is_valid(values[0]) else None

    return read


def scope_user_id(scope: Scope) -> Optional[str]:
    """The authenticated user Starlette's AuthenticationMiddleware put in the scope."""
    user = scope.get("user")
    if user is None or not getattr(user, "is_authenticated", False):
        return None
    for attribute in ("identity", "display_name"):
        try:
            value = getattr(user, attribute)
        except NotImplementedError:  # starlette's BaseUser.identity
            continue
        if value:
            return str(value)
    return None


class ScopeIdentity:
    """The default identity: `key:<api key>` when `api_key` returns one, `user:<id>` for
    an authenticated scope user (unless `users=False`), else `ip:<client address>`
    (see identity.client_ip for how X-Forwarded-For and `trusted_proxies` are used)."""

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

    def __call__(self, scope: Scope) -> str:
        client = scope.get("client")
        return client_identity(
            api_key=self.api_key(scope) if self.api_key else None,
            user_id=scope_user_id(scope) if self.users else None,
            forwarded_for=header_values(scope, b"x-forwarded-for"),
            peer=client[0] if client else None,
            trusted_proxies=self.trusted,
            ipv6_prefix=self.ipv6_prefix,
        )


def by_ip(trusted_proxies: Iterable[NetworkLike] = (), ipv6_prefix: int = 64) -> ScopeIdentity:
    """An identity by client address only, ignoring API keys and users (for a login route)."""
    return ScopeIdentity(trusted_proxies, ipv6_prefix=ipv6_prefix, users=False)


Routes = Union[Mapping[str, Optional[Policy]], Sequence[tuple[str, Optional[Policy]]]]


def _matches(prefix: str, path: str) -> bool:
    # On segment boundaries: "/api" covers "/api" and "/api/x", not "/apix".
    base = prefix.rstrip("/")
    return base == "" or path == base or path.startswith(base + "/")


def _check_names(items: Sequence[tuple[str, Optional[Policy]]]) -> None:
    """One name, one window: the name is part of the Redis key, and the module starts a
    key afresh when it is checked with another window, so two windows sharing a key
    would keep resetting each other and limit nothing."""
    windows: dict[str, tuple[int, bool]] = {}
    for _, policy in items:
        if policy is None:
            continue
        seen = windows.setdefault(policy.name, (policy.window, policy.ms))
        if seen != (policy.window, policy.ms):
            raise ValueError(f"policy name {policy.name!r} is used with two windows")


class RateLimitMiddleware:
    def __init__(
        self,
        app: ASGIApp,
        limiter: AsyncSlidingWindowRateLimiter,
        policies: Routes,
        identity: Optional[IdentityFn] = None,
    ) -> None:
        self.app = app
        self.limiter = limiter
        items = list(policies.items()) if isinstance(policies, Mapping) else list(policies)
        _check_names(items)
        self.routes = sorted(items, key=lambda item: len(item[0].rstrip("/")), reverse=True)
        self.identity: IdentityFn = identity or ScopeIdentity()

    def policy_for(self, path: str) -> Optional[Policy]:
        for prefix, policy in self.routes:
            if _matches(prefix, path):
                return policy
        return None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        policy = self.policy_for(scope["path"]) if scope["type"] == "http" else None
        if policy is None:
            await self.app(scope, receive, send)
            return
        who = (policy.identity or self.identity)(scope)
        if inspect.isawaitable(who):
            who = await who
        result = await self.limiter.check(
            f"{policy.name}:{who}", policy.limit, policy.window, cost=policy.cost, ms=policy.ms
        )
        if not result.allowed:
            await self.deny(policy, result, send)
            return
        extra = [
            (k.lower().encode("latin-1"), v.encode("latin-1"))
            for k, v in rate_limit_headers(result, policy.name).items()
        ]

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start" and extra:
                present = {k.lower() for k, _ in message.get("headers", ())}
                message["headers"] = list(message.get("headers", ())) + [
                    h for h in extra if h[0] not in present  # the app's own win
                ]
            await send(message)

        await self.app(scope, receive, send_with_headers)

    async def deny(self, policy: Policy, result: RateLimitResult, send: Send) -> None:
        if result.degraded:  # fail-closed and Redis unavailable
            status = 503
            body: dict[str, Any] = {
                "error": "rate_limiter_unavailable",
                "message": "The rate limiter is unavailable; try again later.",
            }
        else:
            status = 429
            unit = "ms" if policy.ms else "s"
            body = {
                "error": "rate_limited",
                "message": f"Too many requests: {policy.limit} per {policy.window}{unit} "
                f"({policy.name!r}).",
                "policy": policy.name,
                "limit": result.limit,
                "retry_after": result.retry_after_seconds,
            }
        payload = json.dumps(body).encode()
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(payload)).encode()),
        ] + [
            (k.lower().encode("latin-1"), v.encode("latin-1"))
            for k, v in rate_limit_headers(result, policy.name).items()
        ]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": payload})
