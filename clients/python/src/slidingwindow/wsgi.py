"""Rate limiting as WSGI middleware (Flask, Django, or any WSGI app).

    from slidingwindow import SlidingWindowRateLimiter, connect
    from slidingwindow.wsgi import Policy, RateLimitWSGIMiddleware, ScopeIdentity

    app.wsgi_app = RateLimitWSGIMiddleware(          # Flask; Django: wrap `application`
        app.wsgi_app,
        limiter=SlidingWindowRateLimiter(connect("redis://127.0.0.1:6379")),
        policies={"/api": Policy("api", 100, 60), "/health": None},
        identity=ScopeIdentity(trusted_proxies=["10.0.0.0/8"]),
    )

The same policies, identities, headers, refusals and shadow mode as the ASGI middleware
(both are built on `slidingwindow.http.middleware`). Paths are matched against PATH_INFO, the
path inside the app. The identity function must be synchronous. A policy with
`count_when` is given back (REFUND) when `start_response`'s status does not count; an app
that raises when called counts as a 500.
"""

from __future__ import annotations

from http import HTTPStatus
from types import TracebackType
from typing import Any, Callable, Iterable, Optional, Union

from .http.middleware import MiddlewareBase, Refusal
from .http.request_identity import ScopeIdentity, by_ip, header_api_key
from .http.request import EnvironReader
from .core.limiter import SlidingWindowRateLimiter
from .http.policy import Policy, count_only_failures, count_only_successes

__all__ = [
    "Policy",
    "count_only_failures",
    "count_only_successes",
    "RateLimitWSGIMiddleware",
    "Refusal",
    "ScopeIdentity",
    "by_ip",
    "header_api_key",
]

Environ = dict[str, Any]
ExcInfo = Union[
    tuple[type[BaseException], BaseException, Optional[TracebackType]], tuple[None, None, None]
]
StartResponse = Callable[..., Callable[[bytes], object]]
WSGIApp = Callable[[Environ, StartResponse], Iterable[bytes]]


def _status(code: int) -> str:
    return f"{code} {HTTPStatus(code).phrase}"


class RateLimitWSGIMiddleware(MiddlewareBase[WSGIApp, SlidingWindowRateLimiter]):
    """WSGI middleware: limits the requests whose PATH_INFO matches a policy."""

    def __call__(self, environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        _, path = EnvironReader(environ).method_and_path()
        policy = self.guard.policy_for(path)
        if policy is None:
            return self.app(environ, start_response)
        who = self.guard.identity_for(policy)(environ)
        if not isinstance(who, str):
            raise TypeError(f"a WSGI identity function must return a str, got {who!r}")
        client_id = self.guard.client_id(policy, who)
        with self.cache_scope():
            result = self.limiter.check_limits(
                client_id, policy.limits, cost=policy.cost, ms=policy.ms)
        refusal, headers = self.guard.verdict(environ, policy, who, result)
        if refusal is not None:
            start_response(_status(refusal.status), refusal.headers)
            return [refusal.body]
        settled = False  # the response's status was seen: refunded or not, never twice

        def settle(status: int) -> None:
            nonlocal settled
            if settled:
                return
            settled = True
            if self.guard.refunds(policy, result, status):
                self.limiter.refund_limits(
                    client_id, policy.limits, cost=policy.cost, ms=policy.ms)

        def start_with_headers(
            status: str, response_headers: list[tuple[str, str]],
            exc_info: Optional[ExcInfo] = None,
        ) -> Callable[[bytes], object]:
            settle(_code(status))  # before anything is sent: the next request sees it
            present = {k.lower() for k, _ in response_headers}
            added = [h for h in headers if h[0].lower() not in present]  # the app's own win
            return start_response(status, list(response_headers) + added, exc_info)

        try:
            return self.app(environ, start_with_headers)
        except Exception:
            if not settled:  # no response started: the server answers 500
                settle(500)
            raise


def _code(status: str) -> int:
    """The code of a WSGI status line ("401 Unauthorized"); 500 if it has none."""
    try:
        return int(status.split(None, 1)[0])
    except (ValueError, IndexError):
        return 500
