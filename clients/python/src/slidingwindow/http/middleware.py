"""What the ASGI and WSGI middlewares share: which policy and identity, and what a
decision becomes (a refusal to send, or headers to add)."""

from __future__ import annotations

import contextlib
import json
import logging
from dataclasses import dataclass
from typing import Any, Callable, ContextManager, Generic, Optional, TypeVar

from ..core import deny_cache as deny

from .headers import limits_headers
from .request_identity import IdentityFn, ScopeIdentity
from .request import Request, read
from .policy import Policy, Routes, RouteTable
from ..core.result import MultiLimitResult, RateLimitResult

SHADOW_LOGGER = logging.getLogger("slidingwindow.shadow")


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
        self.routes = RouteTable(policies)
        self.identity: IdentityFn = identity or ScopeIdentity()
        self.shadow = shadow
        self.on_refusal = on_refusal
        self.logger = logger or SHADOW_LOGGER

    def policy_for(self, path: str) -> Optional[Policy]:
        return self.routes.policy_for(path)

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
        method, path = read(request).method_and_path()
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

    def refunds(self, policy: Policy, decision: MultiLimitResult, status: int) -> bool:
        """Whether the request `decision` let through is to be given back now that its
        response has `status`: only with a `count_when` that says it does not count, and
        only when the CHECK was allowed and reached Redis (so it counted; a refused
        request let through in shadow mode counted nothing, nor did a degraded one).
        The middlewares ask this once per request. A `count_when` that raises is logged
        and the request counts."""
        if policy.count_when is None or not decision.allowed or decision.degraded:
            return False
        try:
            return not policy.count_when(status)
        except Exception:
            self.logger.exception("rate limiter: count_when of %r raised", policy.name)
            return False

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
    """The constructor both middlewares share; see `Guard` for `shadow` and `on_refusal`.

    deny_cache: True (default) gives the limiter a default `DenyCache` unless it has one
        (refusals answered without Redis until Redis could allow them: see
        `slidingwindow.core.deny_cache`); a `DenyCache` sets that one on the limiter; False
        leaves the limiter as it is and this middleware's calls bypass any cache. Shadow
        mode always bypasses it.
    """

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
        deny_cache: deny.DenyCacheArg = True,
    ) -> None:
        self.app = app
        self.limiter = limiter
        self.guard = Guard(policies, identity, shadow, on_refusal, logger)
        if deny_cache and not shadow:
            deny.attach(limiter, deny_cache)
        self._bypass = shadow or not deny_cache

    def cache_scope(self) -> ContextManager[None]:
        """Around the middleware's CHECK: bypasses the deny cache when it is not to be used."""
        return deny.bypass() if self._bypass else contextlib.nullcontext()

    def policy_for(self, path: str) -> Optional[Policy]:
        return self.guard.policy_for(path)
