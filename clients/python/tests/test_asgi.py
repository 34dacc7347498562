"""What only the ASGI middleware has: Starlette's authenticated users under FastAPI. The
tests both middlewares share are in test_middleware.py."""

from __future__ import annotations

import asyncio
from typing import Any, Awaitable, Callable

import httpx
import redis.asyncio
from fastapi import FastAPI
from slidingwindow_testing import RedisServer
from slidingwindow import AsyncSlidingWindowRateLimiter
from slidingwindow.asgi import Policy, RateLimitMiddleware
from starlette.authentication import AuthCredentials, AuthenticationBackend, SimpleUser
from starlette.middleware.authentication import AuthenticationMiddleware
from starlette.requests import HTTPConnection

PEER = ("203.0.113.7", 5000)


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
