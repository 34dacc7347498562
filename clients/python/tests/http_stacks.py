"""One app behind either middleware, so the same HTTP tests run on ASGI and on WSGI.

- "asgi": RateLimitMiddleware + the asyncio limiter, driven in-process by httpx's
  ASGITransport with the socket peer 127.0.0.1;
- "wsgi": RateLimitWSGIMiddleware + the sync limiter, served by werkzeug's threaded WSGI
  server on a free loopback port, driven over real HTTP (the peer is 127.0.0.1 too).

The app answers every path with the path as text; `/api/own` sets X-RateLimit-Limit itself.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Iterable, Iterator, Optional

import httpx
import redis
from slidingwindow_testing import RedisServer
from slidingwindow_testing.http_server import serve_wsgi
from slidingwindow import (
    AsyncSlidingWindowRateLimiter,
    SlidingWindowRateLimiter,
    connect,
    connect_async,
)
from slidingwindow.asgi import RateLimitMiddleware
from slidingwindow.http.request_identity import IdentityFn
from slidingwindow.http.policy import Routes
from slidingwindow.wsgi import RateLimitWSGIMiddleware

STACKS = ["asgi", "wsgi"]
PEER = "127.0.0.1"


def _answer(path: str) -> tuple[list[tuple[str, str]], bytes]:
    headers = [("Content-Type", "text/plain")]
    if path == "/api/own":
        headers.append(("X-RateLimit-Limit", "app"))
    return headers, path.encode()


async def plain_asgi(scope: Any, receive: Any, send: Any) -> None:
    assert scope["type"] == "http"
    headers, body = _answer(scope["path"])
    await send({"type": "http.response.start", "status": 200,
                "headers": [(k.lower().encode(), v.encode()) for k, v in headers]})
    await send({"type": "http.response.body", "body": body})


def plain_wsgi(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
    headers, body = _answer(environ["PATH_INFO"])
    start_response("200 OK", headers)
    return [body]


@dataclass
class Stack:
    """A running app: `get` sends one request and returns the response; `run` runs a
    coroutine on the stack's loop (asgi), or returns a plain value (wsgi)."""

    name: str
    limiter: Any
    request: Callable[[str, str, Optional[dict[str, str]]], httpx.Response]
    run_on_loop: Callable[[Awaitable[Any]], Any]

    def get(self, path: str, headers: Optional[dict[str, str]] = None) -> httpx.Response:
        return self.request("GET", path, headers)

    def codes(self, path: str, n: int, headers: Optional[dict[str, str]] = None) -> list[int]:
        return [self.get(path, headers).status_code for _ in range(n)]

    def run(self, value: Any) -> Any:
        """For the limiter's calls: awaited on asgi, as is on wsgi."""
        return self.run_on_loop(value) if asyncio.iscoroutine(value) else value


@contextlib.contextmanager
def asgi_stack(port: int, prefix: str, policies: Routes, identity: Optional[IdentityFn],
               limiter_options: dict[str, Any], middleware_options: dict[str, Any],
               app: Any = plain_asgi) -> Iterator[Stack]:
    loop = asyncio.new_event_loop()
    client = connect_async(f"redis://127.0.0.1:{port}")
    limiter = AsyncSlidingWindowRateLimiter(client, prefix=prefix, **limiter_options)
    wrapped = RateLimitMiddleware(app, limiter, policies, identity, **middleware_options)
    http = httpx.AsyncClient(transport=httpx.ASGITransport(app=wrapped, client=(PEER, 5000)),
                             base_url="http://test")

    def request(method: str, path: str, headers: Optional[dict[str, str]]) -> httpx.Response:
        return loop.run_until_complete(http.request(method, path, headers=headers))

    try:
        yield Stack("asgi", limiter, request, loop.run_until_complete)
    finally:
        loop.run_until_complete(http.aclose())
        loop.run_until_complete(client.aclose())
        loop.close()


@contextlib.contextmanager
def wsgi_stack(port: int, prefix: str, policies: Routes, identity: Optional[IdentityFn],
               limiter_options: dict[str, Any], middleware_options: dict[str, Any],
               app: Any = plain_wsgi) -> Iterator[Stack]:
    client = connect(f"redis://127.0.0.1:{port}")
    limiter = SlidingWindowRateLimiter(client, prefix=prefix, **limiter_options)
    wrapped = RateLimitWSGIMiddleware(app, limiter, policies, identity, **middleware_options)
    with serve_wsgi(wrapped) as url, httpx.Client(base_url=url, timeout=10) as http:
        def request(method: str, path: str, headers: Optional[dict[str, str]]) -> httpx.Response:
            return http.request(method, path, headers=headers)

        try:
            yield Stack("wsgi", limiter, request, lambda value: value)
        finally:
            client.close()


def stack(name: str, server: RedisServer, prefix: str, policies: Routes,
          identity: Optional[IdentityFn] = None, *, app: Any = None,
          limiter: Optional[dict[str, Any]] = None,
          **middleware_options: Any) -> contextlib.AbstractContextManager[Stack]:
    """The app behind the `name` middleware, its limiter on `server`."""
    make = asgi_stack if name == "asgi" else wsgi_stack
    extra = {} if app is None else {"app": app}
    return make(server.port, prefix, policies, identity, limiter or {}, middleware_options,
                **extra)


def keys(server: RedisServer, prefix: str) -> list[str]:
    client = redis.Redis(port=server.port, decode_responses=True)
    try:
        return sorted(client.keys(f"{prefix}*"))
    finally:
        client.close()
