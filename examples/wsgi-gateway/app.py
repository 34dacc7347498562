"""The example gateway again, as a Flask (WSGI) app behind the slidingwindow WSGI middleware.

    flask --app examples/wsgi-gateway/app.py run --host 127.0.0.1 --port 8001
    gunicorn --chdir examples/wsgi-gateway -w 4 -b 127.0.0.1:8001 app:app   # production

The same routes, policies, identities and headers as examples/gateway (ASGI), so the same
tests run against both. Configured by environment variables:
    REDIS_URL        redis://127.0.0.1:6379/0 (a Redis or Valkey with the module loaded)
    REDIS_CLUSTER    1 to treat REDIS_URL as one node of a Redis Cluster
    TRUSTED_PROXIES  comma-separated networks of the proxies in front of the app, whose
                     X-Forwarded-For is believed (default: none, so it is ignored)
    FAIL_OPEN        1 (default) lets requests through while Redis is down; 0 answers 503
    SHADOW           1 refuses nothing and logs each request it would have refused
"""

from __future__ import annotations

import logging
import os

from flask import Flask, jsonify, request
from flask.typing import ResponseReturnValue

from slidingwindow import SlidingWindowRateLimiter, connect
from slidingwindow.wsgi import (
    Policy,
    RateLimitWSGIMiddleware,
    Refusal,
    ScopeIdentity,
    by_ip,
    header_api_key,
)

API_KEYS = {"demo-key-1": "alice", "demo-key-2": "bob"}  # a real app asks its database

REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
CLUSTER = os.environ.get("REDIS_CLUSTER", "0") == "1"
TRUSTED = [n.strip() for n in os.environ.get("TRUSTED_PROXIES", "").split(",") if n.strip()]
FAIL_OPEN = os.environ.get("FAIL_OPEN", "1") != "0"
SHADOW = os.environ.get("SHADOW", "0") == "1"

POLICIES: dict[str, Policy | None] = {
    "/api": Policy("api", limit=5, window=10),  # per API key, or per address
    "/api/login": Policy("login", limit=3, window=60, identity=by_ip(TRUSTED)),
    "/api/report": Policy("report", limit=20, window=60, cost=5),
    "/health": None,
}

app = Flask(__name__)
logging.basicConfig(level=logging.WARNING)  # shows outage, recovery and shadow lines


@app.get("/api/hello")
def hello() -> ResponseReturnValue:
    return jsonify(hello=API_KEYS.get(request.headers.get("X-API-Key", ""), "anonymous"))


@app.post("/api/login")
def login() -> ResponseReturnValue:
    return jsonify(token="not-a-real-token")


@app.get("/api/report")
def report() -> ResponseReturnValue:
    return jsonify(report=[1, 2, 3])


@app.get("/health")
def health() -> ResponseReturnValue:
    return jsonify(ok=True)


def count_refusal(refusal: Refusal) -> None:
    """Where a metric would go (e.g. a counter labelled by policy and `refusal.shadow`)."""


app.wsgi_app = RateLimitWSGIMiddleware(  # type: ignore[method-assign]
    app.wsgi_app,
    limiter=SlidingWindowRateLimiter(connect(REDIS_URL, cluster=CLUSTER), fail_open=FAIL_OPEN),
    policies=POLICIES,
    identity=ScopeIdentity(TRUSTED, api_key=header_api_key("X-API-Key", API_KEYS.__contains__)),
    shadow=SHADOW,
    on_refusal=count_refusal,
)
