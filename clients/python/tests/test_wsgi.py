"""What only the WSGI middleware has: REMOTE_USER as the authenticated user, paths inside a
mounted app (PATH_INFO), sync identity functions. The tests both middlewares share are in
test_middleware.py; the Flask example runs under `flask run` in examples/gateway."""

from __future__ import annotations

from typing import Any, Callable, Iterable

import httpx
import pytest
import redis
from werkzeug.middleware.dispatcher import DispatcherMiddleware

from http_stacks import keys, plain_wsgi
from slidingwindow_testing import RedisServer
from slidingwindow_testing.http_server import serve_wsgi
from slidingwindow import SlidingWindowRateLimiter, connect
from slidingwindow.wsgi import Policy, RateLimitWSGIMiddleware


def bearer_users(app: Callable[..., Iterable[bytes]]) -> Callable[..., Iterable[bytes]]:
    """An authentication middleware as WSGI has them: it sets REMOTE_USER."""

    def wrapped(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        token = environ.get("HTTP_AUTHORIZATION", "")
        if token.startswith("Bearer user-"):
            environ["REMOTE_USER"] = token.removeprefix("Bearer ")
        return app(environ, start_response)

    return wrapped


def test_remote_user_is_the_identity(redis_server: RedisServer, prefix: str) -> None:
    limiter = SlidingWindowRateLimiter(connect(redis_server.url), prefix=prefix)
    app = bearer_users(RateLimitWSGIMiddleware(plain_wsgi, limiter, {"/": Policy("all", 2, 60)}))
    with serve_wsgi(app) as url, httpx.Client(base_url=url) as http:
        auth = {"Authorization": "Bearer user-1"}
        assert [http.get("/x", headers=auth).status_code for _ in range(3)] == [200, 200, 429]
        assert http.get("/x").status_code == 200  # anonymous: by address, its own counter
    assert keys(redis_server, prefix) == [f"{prefix}all:ip:127.0.0.1", f"{prefix}all:user:user-1"]


def test_paths_are_matched_inside_a_mounted_app(redis_server: RedisServer, prefix: str) -> None:
    """Mounted at /v1, the app's own "/api" policy covers /v1/api/..., as its routes do."""
    limiter = SlidingWindowRateLimiter(connect(redis_server.url), prefix=prefix)
    inner = RateLimitWSGIMiddleware(plain_wsgi, limiter, {"/api": Policy("api", 1, 60)})
    app = DispatcherMiddleware(plain_wsgi, {"/v1": inner})
    with serve_wsgi(app) as url, httpx.Client(base_url=url) as http:
        assert [http.get("/v1/api/a").status_code for _ in range(2)] == [200, 429]
        assert http.get("/v1/other").headers.get("x-ratelimit-limit") is None
        assert http.get("/api/a").status_code == 200  # outside the mount: not this app


def test_identity_must_return_a_string() -> None:
    """An async identity function (fine for ASGI) returns no str here: said at once."""
    limiter = SlidingWindowRateLimiter(redis.Redis())  # never reached
    app = RateLimitWSGIMiddleware(plain_wsgi, limiter, {"/": Policy("all", 2, 60)},
                                  lambda request: 42)  # type: ignore[arg-type, return-value]
    environ = {"wsgi.version": (1, 0), "REQUEST_METHOD": "GET", "PATH_INFO": "/x",
               "REMOTE_ADDR": "127.0.0.1"}
    with pytest.raises(TypeError, match="must return a str, got 42"):
        app(environ, lambda status, headers, exc_info=None: lambda data: None)
