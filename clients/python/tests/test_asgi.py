"""The middleware under Starlette and FastAPI, against a real server (in-process HTTP)."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any, Awaitable, Callable

import httpx
import pytest
import redis.asyncio
from fastapi import FastAPI
from starlette.applications import Starlette
from starlette.authentication import AuthCredentials, AuthenticationBackend, SimpleUser
from starlette.middleware import Middleware
from starlette.middleware.authentication import AuthenticationMiddleware
from starlette.requests import HTTPConnection, Request
from starlette.responses import JSONResponse, PlainTextResponse
from starlette.routing import Route

from servers import RedisServer
from slidingwindow import AsyncSlidingWindowRateLimiter
from slidingwindow.asgi import Policy, RateLimitMiddleware, ScopeIdentity, by_ip, header_api_key

KEYS = {"k-alice", "k-bob"}
PEER = ("203.0.113.7", 5000)


def text(request: Request) -> PlainTextResponse:
    return PlainTextResponse(request.url.path)


def own_headers(request: Request) -> PlainTextResponse:
    return PlainTextResponse("mine", headers={"X-RateLimit-Limit": "app"})


def policies() -> dict[str, Policy | None]:
    return {
        "/api": Policy("api", 3, 60),
        "/api/login": Policy("login", 2, 60, identity=by_ip()),
        "/api/heavy": Policy("heavy", 10, 60, cost=4),
        "/health": None,
    }


def starlette_app(limiter: AsyncSlidingWindowRateLimiter) -> Starlette:
    routes = [Route(p, text) for p in ("/api/a", "/api/b", "/api/login", "/api/heavy",
                                       "/health", "/apix")]
    routes.append(Route("/api/own", own_headers))
    return Starlette(routes=routes, middleware=[Middleware(
        RateLimitMiddleware, limiter=limiter, policies=policies(),
        identity=ScopeIdentity(api_key=header_api_key("X-API-Key", KEYS.__contains__)),
    )])


Scenario = Callable[[httpx.AsyncClient, Any], Awaitable[None]]


def run(server: RedisServer, prefix: str, build: Callable[[AsyncSlidingWindowRateLimiter], Any],
        scenario: Scenario) -> None:
    async def main() -> None:
        client = redis.asyncio.Redis(port=server.port)
        app = build(AsyncSlidingWindowRateLimiter(client, prefix=prefix))
        transport = httpx.ASGITransport(app=app, client=PEER)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as http:
            await scenario(http, client)
        await client.aclose()

    asyncio.run(main())


def test_limits_routes_and_answers_429(redis_server: RedisServer, prefix: str) -> None:
    async def scenario(http: httpx.AsyncClient, client: Any) -> None:
        ok = await http.get("/api/a")
        assert ok.status_code == 200 and ok.text == "/api/a"
        assert ok.headers["x-ratelimit-limit"] == "3"
        assert ok.headers["x-ratelimit-remaining"] == "2"
        assert ok.headers["ratelimit-policy"] == '"api";q=3;w=60'
        assert ok.headers["ratelimit"].startswith('"api";r=2;t=')
        assert "retry-after" not in ok.headers
        # One counter for the whole prefix, per identity.
        assert (await http.get("/api/b")).status_code == 200
        assert (await http.get("/api/a")).status_code == 200
        denied = await http.get("/api/b")
        assert denied.status_code == 429
        assert denied.headers["content-type"] == "application/json"
        body = json.loads(denied.content)
        assert body["error"] == "rate_limited" and body["policy"] == "api"
        assert int(denied.headers["retry-after"]) == body["retry_after"] > 0
        assert denied.headers["x-ratelimit-remaining"] == "0"
        # Exempt and unmatched paths: no counting, no headers. "/apix" is not under "/api".
        for path in ("/health", "/apix"):
            r = await http.get(path)
            assert r.status_code == 200 and "x-ratelimit-limit" not in r.headers
        assert await client.keys(f"{prefix}*") == [f"{prefix}api:ip:203.0.113.7".encode()]

    run(redis_server, prefix, starlette_app, scenario)


def test_identity_per_key_and_per_policy(redis_server: RedisServer, prefix: str) -> None:
    async def scenario(http: httpx.AsyncClient, client: Any) -> None:
        codes = lambda rs: [r.status_code for r in rs]  # noqa: E731
        alice = [await http.get("/api/a", headers={"X-API-Key": "k-alice"}) for _ in range(4)]
        assert codes(alice) == [200, 200, 200, 429]
        # Another key, and anonymous callers, have counters of their own.
        assert (await http.get("/api/a", headers={"X-API-Key": "k-bob"})).status_code == 200
        assert (await http.get("/api/a")).status_code == 200
        # Invented keys are no identity: counted by address, so they cannot dodge it.
        fake = [await http.get("/api/a", headers={"X-API-Key": f"nope{i}"}) for i in range(3)]
        assert codes(fake) == [200, 200, 429]
        # The login policy counts by address whatever key is sent.
        login = [await http.get("/api/login", headers={"X-API-Key": k})
                 for k in ("k-alice", "k-bob", "k-alice")]
        assert codes(login) == [200, 200, 429]
        heavy = [await http.get("/api/heavy") for _ in range(3)]
        assert codes(heavy) == [200, 200, 429]  # cost 4 against 10
        assert heavy[0].headers["x-ratelimit-remaining"] == "6"

    run(redis_server, prefix, starlette_app, scenario)


def test_app_headers_win(redis_server: RedisServer, prefix: str) -> None:
    async def scenario(http: httpx.AsyncClient, client: Any) -> None:
        r = await http.get("/api/own")
        assert r.headers.get_list("x-ratelimit-limit") == ["app"]
        assert r.headers["x-ratelimit-remaining"] == "2"

    run(redis_server, prefix, starlette_app, scenario)


class TokenAuth(AuthenticationBackend):
    async def authenticate(self, conn: HTTPConnection) -> tuple[AuthCredentials, SimpleUser] | None:
        token = conn.headers.get("authorization", "")
        if token.startswith("Bearer user-"):
            return AuthCredentials(["authenticated"]), SimpleUser(token.removeprefix("Bearer "))
        return None


def test_fastapi_with_authenticated_users(redis_server: RedisServer, prefix: str) -> None:
    def build(limiter: AsyncSlidingWindowRateLimiter) -> FastAPI:
        app = FastAPI()

        @app.get("/api/items/{item}")
        async def item(item: int) -> dict[str, int]:
            return {"item": item}

        # add_middleware puts the last one outermost: authentication runs first.
        app.add_middleware(RateLimitMiddleware, limiter=limiter,
                           policies=[("/api", Policy("api", 2, 60))])
        app.add_middleware(AuthenticationMiddleware, backend=TokenAuth())
        return app

    async def scenario(http: httpx.AsyncClient, client: Any) -> None:
        auth = {"Authorization": "Bearer user-1"}
        assert [(await http.get("/api/items/1", headers=auth)).status_code
                for _ in range(3)] == [200, 200, 429]
        r = await http.get("/api/items/2")  # anonymous: by address, its own counter
        assert r.status_code == 200 and r.json() == {"item": 2}
        assert sorted(await client.keys(f"{prefix}*")) == [
            f"{prefix}api:ip:203.0.113.7".encode(), f"{prefix}api:user:user-1".encode()]

    run(redis_server, prefix, build, scenario)


def test_millisecond_window_in_real_time(redis_server: RedisServer, prefix: str) -> None:
    """Obeying Retry-After (rounded up from ms) with the server's own clock works."""

    def build(limiter: AsyncSlidingWindowRateLimiter) -> RateLimitMiddleware:
        app = Starlette(routes=[Route("/", lambda r: JSONResponse({}))])
        return RateLimitMiddleware(app, limiter, {"/": Policy("fast", 2, 400, ms=True)})

    async def scenario(http: httpx.AsyncClient, client: Any) -> None:
        codes = [(await http.get("/")).status_code for _ in range(3)]
        assert codes == [200, 200, 429]
        denied = await http.get("/")
        assert denied.headers["ratelimit-policy"] == '"fast";q=2;w=1'
        wait = int(denied.headers["retry-after"])
        assert wait == 1  # the module says <= 800 ms; whole seconds, rounded up
        await asyncio.sleep(wait)
        assert (await http.get("/")).status_code == 200

    started = time.monotonic()
    run(redis_server, prefix, build, scenario)
    assert time.monotonic() - started < 5


def test_policy_validation() -> None:
    app = Starlette()
    limiter = AsyncSlidingWindowRateLimiter(redis.asyncio.Redis())  # never used
    with pytest.raises(ValueError, match="two windows"):
        RateLimitMiddleware(app, limiter, {"/a": Policy("p", 5, 60), "/b": Policy("p", 5, 61)})
    RateLimitMiddleware(app, limiter, {"/a": Policy("p", 5, 60), "/b": Policy("p", 9, 60)})
    with pytest.raises(ValueError):
        Policy("bad", -1, 60)
    with pytest.raises(ValueError):
        Policy("caf\u00e9", 1, 60)
