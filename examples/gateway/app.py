"""A small API behind the slidingwindow rate-limit middleware.

    uvicorn app:app --app-dir examples/gateway --host 127.0.0.1 --port 8000 --no-proxy-headers

Configured by environment variables:
    REDIS_URL        redis://127.0.0.1:6379/0 (a Redis or Valkey with the module loaded)
    REDIS_CLUSTER    1 to treat REDIS_URL as one node of a Redis Cluster
    TRUSTED_PROXIES  comma-separated networks of the proxies in front of the app, whose
                     X-Forwarded-For is believed (default: none, so it is ignored)
    FAIL_OPEN        1 (default) lets requests through while Redis is down; 0 answers 503
    DENY_CACHE       1 (default) answers known refusals locally (slidingwindow.core.deny_cache); 0 off
"""

from __future__ import annotations

import contextlib
import os
from typing import AsyncIterator

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from slidingwindow import AsyncSlidingWindowRateLimiter, connect_async
from slidingwindow.asgi import Policy, RateLimitMiddleware, ScopeIdentity, by_ip, header_api_key

# Demo keys. A real gateway would look the key up in its database; only keys it accepts
# become identities, so a client cannot dodge its limit by inventing keys.
API_KEYS = {"demo-key-1": "alice", "demo-key-2": "bob"}

REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
CLUSTER = os.environ.get("REDIS_CLUSTER", "0") == "1"
TRUSTED = [n.strip() for n in os.environ.get("TRUSTED_PROXIES", "").split(",")
           if n.strip()]
FAIL_OPEN = os.environ.get("FAIL_OPEN", "1") != "0"
DENY_CACHE = os.environ.get("DENY_CACHE", "1") != "0"  # 0: every refusal asks Redis

POLICIES: dict[str, Policy | None] = {
    # Everything under /api: 5 requests per 10 s, per API key (or per address).
    "/api": Policy("api", limit=5, window=10),
    # Logins: 3 per minute per address, whatever key is sent (credential stuffing).
    "/api/login": Policy("login", limit=3, window=60, identity=by_ip(TRUSTED)),
    # An expensive endpoint: each call costs 5 of a 20-per-minute budget.
    "/api/report": Policy("report", limit=20, window=60, cost=5),
    # Health checks are never limited.
    "/health": None,
}


async def hello(request: Request) -> JSONResponse:
    key = request.headers.get("x-api-key")
    return JSONResponse({"hello": API_KEYS.get(key or "", "anonymous")})


async def login(request: Request) -> JSONResponse:
    return JSONResponse({"token": "not-a-real-token"})


async def report(request: Request) -> JSONResponse:
    return JSONResponse({"report": [1, 2, 3]})


async def health(request: Request) -> JSONResponse:
    return JSONResponse({"ok": True})


redis_client = connect_async(REDIS_URL, cluster=CLUSTER)
limiter = AsyncSlidingWindowRateLimiter(redis_client, fail_open=FAIL_OPEN)


@contextlib.asynccontextmanager
async def lifespan(app: Starlette) -> AsyncIterator[None]:
    yield
    await redis_client.aclose()


app = Starlette(
    routes=[
        Route("/api/hello", hello),
        Route("/api/login", login, methods=["POST"]),
        Route("/api/report", report),
        Route("/health", health),
    ],
    middleware=[
        Middleware(
            RateLimitMiddleware,
            limiter=limiter,
            policies=POLICIES,
            identity=ScopeIdentity(TRUSTED, api_key=header_api_key("X-API-Key", API_KEYS.__contains__)),
            deny_cache=DENY_CACHE,
        )
    ],
    lifespan=lifespan,
)
