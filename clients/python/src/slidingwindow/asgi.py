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
headers added to its response. With a fail-closed limiter and Redis down: 503. With
`shadow=True` nothing is refused; would-be refusals are logged and passed to `on_refusal`.
A policy with `count_when` (e.g. `count_only_failures()`) gives an allowed request back
(REFUND) when its response status does not count; an app that raises counts as a 500.
"""

from __future__ import annotations

import inspect
from typing import Any, Awaitable, Callable, MutableMapping

from .core.aio import AsyncSlidingWindowRateLimiter
from .http.middleware import MiddlewareBase, Refusal
from .http.request_identity import ScopeIdentity, by_ip, header_api_key
from .http.policy import Policy, count_only_failures, count_only_successes

__all__ = [
    "Policy",
    "count_only_failures",
    "count_only_successes",
    "RateLimitMiddleware",
    "Refusal",
    "ScopeIdentity",
    "by_ip",
    "header_api_key",
]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def _encoded(headers: list[tuple[str, str]]) -> list[tuple[bytes, bytes]]:
    return [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers]


class RateLimitMiddleware(MiddlewareBase[ASGIApp, AsyncSlidingWindowRateLimiter]):
    """ASGI middleware: limits the HTTP requests whose path matches a policy."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        policy = self.guard.policy_for(scope["path"]) if scope["type"] == "http" else None
        if policy is None:
            await self.app(scope, receive, send)
            return
        who = self.guard.identity_for(policy)(scope)
        if inspect.isawaitable(who):
            who = await who
        client_id = self.guard.client_id(policy, who)
        with self.cache_scope():
            result = await self.limiter.check_limits(
                client_id, policy.limits, cost=policy.cost, ms=policy.ms)
        refusal, headers = self.guard.verdict(scope, policy, who, result)
        if refusal is not None:
            await send({"type": "http.response.start", "status": refusal.status,
                        "headers": _encoded(refusal.headers)})
            await send({"type": "http.response.body", "body": refusal.body})
            return
        extra = _encoded(headers)
        settled = False  # the response's status was seen: refunded or not, never twice

        async def settle(status: int) -> None:
            nonlocal settled
            if settled:
                return
            settled = True
            if self.guard.refunds(policy, result, status):
                await self.limiter.refund_limits(
                    client_id, policy.limits, cost=policy.cost, ms=policy.ms)

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                # Before the response goes out: the client's next request sees the refund.
                await settle(int(message["status"]))
                if extra:
                    present = {k.lower() for k, _ in message.get("headers", ())}
                    message["headers"] = list(message.get("headers", ())) + [
                        h for h in extra if h[0] not in present  # the app's own win
                    ]
            await send(message)

        try:
            await self.app(scope, receive, send_with_headers)
        except Exception:
            if not settled:  # no response started: the server answers 500
                await settle(500)
            raise
