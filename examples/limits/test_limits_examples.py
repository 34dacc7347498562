"""The flask-limiter and slowapi examples over real HTTP, on a server with the module:
429 at the configured limit, with each library's usual headers, and the counts kept by
SLIDINGWINDOW.CHECK in one module key per limit and client."""

from __future__ import annotations

import time
from contextlib import AbstractContextManager
from typing import Callable

import httpx
import pytest
import redis

import flask_app
import slowapi_app
from slidingwindow_testing import RedisServer
from slidingwindow_testing.http_server import serve_asgi, serve_wsgi

HOUR = 3600


def serve_flask(uri: str) -> AbstractContextManager[str]:
    return serve_wsgi(flask_app.create_app(uri))


def serve_slowapi(uri: str) -> AbstractContextManager[str]:
    return serve_asgi(slowapi_app.create_app(uri))


def clear_of_hour_boundary(client: redis.Redis, margin: int = 60) -> int:
    """Server time (s), at least `margin` s before the end of its hour: the bursts below
    stay in one window (epoch-aligned, by the server's clock), so no previous count
    weighs in."""
    now = int(client.time()[0])
    if HOUR - now % HOUR < margin:
        time.sleep(HOUR - now % HOUR + 1)
        now = int(client.time()[0])
    return now


@pytest.mark.parametrize("scheme", ["slidingwindow+redis", "redis"])
@pytest.mark.parametrize("serve", [serve_flask, serve_slowapi], ids=["flask-limiter", "slowapi"])
def test_429_at_the_limit_with_headers(redis_server: RedisServer, scheme: str,
                                       serve: Callable[[str], AbstractContextManager[str]]) -> None:
    """The same app on the module (`slidingwindow+redis://`) and, for comparison, on
    limits' own Redis storage (`redis://`): the scheme is the only difference."""
    uri = f"{scheme}://127.0.0.1:{redis_server.port}/0"
    client = redis.Redis(port=redis_server.port)
    with serve(uri) as url, httpx.Client(base_url=url, timeout=10) as http:
        now = clear_of_hour_boundary(client)
        # The module's windows start at multiples of the window (Unix time, server
        # clock); limits' own Redis windows start at a key's first hit.
        end_of_hour = now - now % HOUR + HOUR if scheme != "redis" else now + HOUR
        replies = [http.get("/hello") for _ in range(6)]
        assert [r.status_code for r in replies] == [200] * 5 + [429]
        for i, reply in enumerate(replies[:5]):
            assert reply.headers["X-RateLimit-Limit"] == "5"
            assert reply.headers["X-RateLimit-Remaining"] == str(4 - i)
        denied = replies[5]
        assert denied.headers["X-RateLimit-Limit"] == "5"
        assert denied.headers["X-RateLimit-Remaining"] == "0"
        # The count is back to 0 when the server's hour ends (no previous window here).
        # flask-limiter sends whole seconds, slowapi that time + 1 s, with decimals.
        reset = float(denied.headers["X-RateLimit-Reset"])
        assert end_of_hour - 1 <= reset < end_of_hour + 2
        retry_after = int(denied.headers["Retry-After"])
        assert end_of_hour - now - 5 <= retry_after <= end_of_hour - now + 1

        # cost=2 under a limit of 5: two calls fit, the third would make 6.
        assert [http.get("/report").status_code for _ in range(3)] == [200, 200, 429]
        assert {http.get("/health").status_code for _ in range(10)} == {200}

    keys = sorted(k.decode() for k in client.keys("*"))
    client.close()
    if scheme == "redis":  # "{key}" now, and "{key}/-1" too from its second window on
        assert len(keys) == 2 and all(k.startswith("LIMITS:{") for k in keys)
        return
    # The module holds each limit and client in one key of its own encoding (0xA1 first).
    client = redis.Redis(port=redis_server.port)
    assert len(keys) == 2 and all(k.startswith("LIMITS:slidingwindow/") for k in keys)
    assert all(client.get(k)[:1] == b"\xa1" for k in keys)
    hello = next(k for k in keys if "hello" in k)
    assert client.execute_command("SLIDINGWINDOW.PEEK", hello, 5, HOUR * 1000, "MS") == [0, 5]
    client.close()
