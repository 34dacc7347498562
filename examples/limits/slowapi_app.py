"""slowapi (FastAPI) on the slidingwindow module: the storage URI is the only change.

    uvicorn slowapi_app:create_app --factory

RATELIMIT_STORAGE_URI overrides the default server (127.0.0.1:6379, with the module).
"""

from __future__ import annotations

import os

from fastapi import FastAPI, Request, Response
from slowapi import Limiter, _rate_limit_exceeded_handler
from slowapi.errors import RateLimitExceeded
from slowapi.util import get_remote_address

import slidingwindow.limits_storage  # noqa: F401  registers slidingwindow+redis:// with limits

STORAGE_URI = os.environ.get("RATELIMIT_STORAGE_URI", "slidingwindow+redis://127.0.0.1:6379/0")


def create_app(storage_uri: str = STORAGE_URI) -> FastAPI:
    limiter = Limiter(
        key_func=get_remote_address,
        storage_uri=storage_uri,  # was "redis://127.0.0.1:6379/0"
        strategy="sliding-window-counter",
        headers_enabled=True,
    )
    app = FastAPI()
    app.state.limiter = limiter
    handler = _rate_limit_exceeded_handler  # 429 with the limit headers
    app.add_exception_handler(RateLimitExceeded, handler)  # type: ignore[arg-type]

    # slowapi needs `request` (and `response`, for the headers on allowed calls).
    @app.get("/hello")
    @limiter.limit("5/hour")
    async def hello(request: Request, response: Response) -> dict[str, str]:
        return {"hello": "world"}

    @app.get("/report")
    @limiter.limit("5/hour", cost=2)  # a costly call counts twice
    async def report(request: Request, response: Response) -> dict[str, str]:
        return {"report": "ready"}

    @app.get("/health")
    @limiter.exempt
    async def health(request: Request) -> dict[str, bool]:
        return {"ok": True}

    return app
