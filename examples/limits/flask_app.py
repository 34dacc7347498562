"""flask-limiter on the slidingwindow module: the storage URI is the only change.

    flask --app flask_app run            # Flask finds create_app()

RATELIMIT_STORAGE_URI overrides the default server (127.0.0.1:6379, with the module).
"""

from __future__ import annotations

import os

from flask import Flask, jsonify
from flask.typing import ResponseReturnValue
from flask_limiter import Limiter
from flask_limiter.util import get_remote_address

import slidingwindow.limits_storage  # noqa: F401  registers slidingwindow+redis:// with limits

STORAGE_URI = os.environ.get("RATELIMIT_STORAGE_URI", "slidingwindow+redis://127.0.0.1:6379/0")


def create_app(storage_uri: str = STORAGE_URI) -> Flask:
    app = Flask(__name__)
    limiter = Limiter(
        get_remote_address,
        app=app,
        storage_uri=storage_uri,  # was "redis://127.0.0.1:6379/0"
        strategy="sliding-window-counter",
        headers_enabled=True,
    )

    @app.get("/hello")
    @limiter.limit("5 per hour")
    def hello() -> ResponseReturnValue:
        return jsonify(hello="world")

    @app.get("/report")
    @limiter.limit("5 per hour", cost=2)  # a costly call counts twice
    def report() -> ResponseReturnValue:
        return jsonify(report="ready")

    @app.get("/health")
    @limiter.exempt
    def health() -> ResponseReturnValue:
        return jsonify(ok=True)

    return app
