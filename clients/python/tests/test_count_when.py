"""Policy(count_when=...): count only failed or only successful requests, end to end over
real HTTP, on both middlewares (ASGI under uvicorn, WSGI under werkzeug), on every server
kind. The middleware CHECKs before the request and REFUNDs after it when the response's
status does not count; each test would fail if that refund were skipped (or made when
nothing was counted)."""

from __future__ import annotations

import contextlib
import sys
from typing import Any, Callable, Iterable, Iterator, Optional

import httpx
import pytest
import redis
from http_stacks import keys
from slidingwindow_testing import RedisServer
from slidingwindow_testing.http_server import serve_asgi, serve_wsgi
from slidingwindow import (
    AsyncSlidingWindowRateLimiter,
    SlidingWindowRateLimiter,
    connect,
    connect_async,
)
from slidingwindow.asgi import RateLimitMiddleware
from slidingwindow.http.policy import Policy, count_only_failures, count_only_successes
from slidingwindow.wsgi import RateLimitWSGIMiddleware

N = 3
DAY = 86400  # long windows: no test crosses a window's boundary, where counts would fade
RIGHT = {"X-Password": "right"}
WRONG = {"X-Password": "wrong"}


def _status(path: str, password: Optional[str]) -> int:
    if path == "/boom":
        raise RuntimeError("the app failed")
    return 200 if password == "right" else 401


async def login_asgi(scope: Any, receive: Any, send: Any) -> None:
    if scope["path"] == "/twice":  # a response started, then the app fails
        await send({"type": "http.response.start", "status": 401, "headers": []})
        raise RuntimeError("failed after the response started")
    password = dict(scope["headers"]).get(b"x-password", b"").decode()
    status = _status(scope["path"], password)
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": str(status).encode()})


def login_wsgi(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
    if environ["PATH_INFO"] == "/twice":  # PEP 3333: a second start_response, exc_info
        start_response("401 Unauthorized", [("Content-Type", "text/plain")])
        try:
            raise RuntimeError("failed before the body")
        except RuntimeError:
            start_response("403 Forbidden", [("Content-Type", "text/plain")], sys.exc_info())
        return [b"403"]
    status = _status(environ["PATH_INFO"], environ.get("HTTP_X_PASSWORD"))
    start_response("200 OK" if status == 200 else "401 Unauthorized",
                   [("Content-Type", "text/plain")])
    return [str(status).encode()]


@contextlib.contextmanager
def served(name: str, server: RedisServer, prefix: str, policy: Policy,
           **options: Any) -> Iterator[httpx.Client]:
    """The login app behind the `name` middleware, over real HTTP; its paths share
    `policy` (one counter)."""
    routes = [("/login", policy), ("/boom", policy), ("/twice", policy)]
    url = f"redis://127.0.0.1:{server.port}"
    if name == "asgi":
        # The asyncio client connects on uvicorn's loop, at its first request.
        limiter: Any = AsyncSlidingWindowRateLimiter(connect_async(url), prefix=prefix)
        app: Any = RateLimitMiddleware(login_asgi, limiter, routes, **options)
        serve = serve_asgi
    else:
        limiter = SlidingWindowRateLimiter(connect(url), prefix=prefix)
        app = RateLimitWSGIMiddleware(login_wsgi, limiter, routes, **options)
        serve = serve_wsgi
    with serve(app) as base, httpx.Client(base_url=base, timeout=10) as http:
        yield http


def codes(http: httpx.Client, n: int, headers: dict[str, str], path: str = "/login") -> list[int]:
    return [http.get(path, headers=headers).status_code for _ in range(n)]


def held(server: RedisServer, prefix: str, window: int = DAY) -> int:
    """What the policy's one key holds in `window` (PEEK's count of a 1-unit request, -1)."""
    [key] = keys(server, prefix)
    client = redis.Redis(port=server.port)
    try:
        return SlidingWindowRateLimiter(client, prefix="").peek(key, 10**6, window).count - 1
    finally:
        client.close()


@pytest.fixture(params=["asgi", "wsgi"])
def stack_name(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def test_count_only_failures(stack_name: str, redis_server: RedisServer, prefix: str) -> None:
    """Failed logins limited, successful ones free."""
    policy = Policy("login", N, DAY, count_when=count_only_failures())
    with served(stack_name, redis_server, prefix, policy) as http:
        assert codes(http, 3 * N, RIGHT) == [200] * (3 * N)  # each one given back
        assert held(redis_server, prefix) == 0
        assert codes(http, N, WRONG) == [401] * N  # these count
        assert held(redis_server, prefix) == N
        assert codes(http, 1, WRONG) == [429]
        assert codes(http, 1, RIGHT) == [429]  # the limit holds for everyone then


def test_count_only_successes(stack_name: str, redis_server: RedisServer, prefix: str) -> None:
    policy = Policy("login", N, DAY, count_when=count_only_successes())
    with served(stack_name, redis_server, prefix, policy) as http:
        assert codes(http, 3 * N, WRONG) == [401] * (3 * N)
        assert held(redis_server, prefix) == 0
        assert codes(http, N, RIGHT) == [200] * N
        assert codes(http, 1, RIGHT) == [429]
        assert codes(http, 1, WRONG) == [429]
        assert held(redis_server, prefix) == N


def test_an_app_that_raises_counts_as_500(stack_name: str, redis_server: RedisServer,
                                          prefix: str) -> None:
    policy = Policy("login", N, DAY, count_when=count_only_successes())
    with served(stack_name, redis_server, prefix, policy) as http:
        assert codes(http, 3 * N, {}, "/boom") == [500] * (3 * N)  # given back
        assert held(redis_server, prefix) == 0
    failures = Policy("login", N, DAY, count_when=count_only_failures())
    with served(stack_name, redis_server, prefix, failures) as http:
        assert codes(http, N, {}, "/boom") == [500] * N  # counted
        assert codes(http, 1, RIGHT) == [429]


def test_never_given_back_twice(stack_name: str, redis_server: RedisServer,
                                prefix: str) -> None:
    """Two statuses seen for one request (WSGI: start_response again with exc_info; ASGI:
    the app raises after its response started): one refund at most."""
    policy = Policy("login", N, DAY, count_when=count_only_successes())
    with served(stack_name, redis_server, prefix, policy) as http:
        assert codes(http, N - 1, RIGHT) == [200] * (N - 1)
        try:
            http.get("/twice")  # counted, then given back once
        except httpx.RemoteProtocolError:  # ASGI: the server cuts the started response
            assert stack_name == "asgi"
        assert held(redis_server, prefix) == N - 1
        assert codes(http, 1, RIGHT) + codes(http, 1, RIGHT) == [200, 429]


def test_shadow_gives_back_only_what_counted(stack_name: str, redis_server: RedisServer,
                                             prefix: str) -> None:
    """In shadow mode a refused request goes on but counted nothing: its response is
    never refunded, whatever count_when says."""
    policy = Policy("login", N, DAY, count_when=count_only_failures())
    with served(stack_name, redis_server, prefix, policy, shadow=True) as http:
        assert codes(http, N, WRONG) == [401] * N
        assert codes(http, 2 * N, RIGHT) == [200] * (2 * N)  # would be 429: not counted
        assert held(redis_server, prefix) == N  # so nothing was given back either
        assert codes(http, N, WRONG) == [401] * N
        assert held(redis_server, prefix) == N


def test_without_count_when_everything_counts(stack_name: str, redis_server: RedisServer,
                                              prefix: str) -> None:
    with served(stack_name, redis_server, prefix, Policy("login", N, DAY)) as http:
        assert codes(http, N + 1, RIGHT) == [200] * N + [429]


def test_count_when_with_several_rates(stack_name: str, redis_server: RedisServer,
                                       prefix: str) -> None:
    policy = Policy("login", rates=[(N, DAY), (10 * N, 7 * DAY)], count_when=count_only_failures())
    with served(stack_name, redis_server, prefix, policy) as http:
        assert codes(http, 3 * N, RIGHT) == [200] * (3 * N)
        assert held(redis_server, prefix) == 0 and held(redis_server, prefix, 7 * DAY) == 0
        assert codes(http, N, WRONG) == [401] * N
        assert held(redis_server, prefix, 7 * DAY) == N
        assert codes(http, 1, WRONG) == [429]


def test_policy_count_when() -> None:
    assert count_only_failures()(401) and not count_only_failures()(200)
    assert count_only_successes()(302) and not count_only_successes()(500)
    a = Policy("login", 5, 60, count_when=count_only_failures())
    assert a == Policy("login", 5, 60, count_when=count_only_failures())
    assert a != Policy("login", 5, 60) and a.count_when is count_only_failures()
    assert "count_when" in repr(a) and "count_when" not in repr(Policy("x", 1, 1))
    with pytest.raises(TypeError):
        Policy("login", 5, 60, count_when=401)  # type: ignore[arg-type]
