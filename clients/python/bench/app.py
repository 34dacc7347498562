"""One app of the client benchmark (bench/harness drives it):

    python3 clients/python/bench/app.py <variant> <redis host:port> <limit> <window s>

prints `PORT <n>` once it listens on 127.0.0.1:<n>, then answers GET / for the caller named
by the X-Id header: 200, or 429 with Retry-After, until killed. The same app behind each
limiter, on the same Redis:

    asgi-none, asgi-slidingwindow, asgi-slowapi     FastAPI on uvicorn (one process)
    wsgi-none, wsgi-slidingwindow, wsgi-flask-limiter   Flask on werkzeug's threaded server

slowapi and flask-limiter run on limits' own `redis://` storage with its
`sliding-window-counter` strategy, the same algorithm; ours are the package's middlewares
at their defaults (the deny cache on).
"""

from __future__ import annotations

import socket
import sys
from typing import Any

from fastapi import FastAPI, Request, Response
from flask import Flask

from slidingwindow import AsyncSlidingWindowRateLimiter, SlidingWindowRateLimiter, connect, connect_async
from slidingwindow.asgi import Policy, RateLimitMiddleware
from slidingwindow.http.request import read
from slidingwindow.wsgi import RateLimitWSGIMiddleware


def caller(request: Any) -> str:
    """The X-Id header, from an ASGI scope or a WSGI environ."""
    values = read(request).header_values(b"x-id")
    return "id:" + (values[0] if values else "")


def asgi(variant: str, url: str, limit: int, window: int) -> Any:
    app = FastAPI()
    if variant == "asgi-slowapi":
        from slowapi import Limiter, _rate_limit_exceeded_handler
        from slowapi.errors import RateLimitExceeded

        def key(request: Request) -> str:  # slowapi passes `request` by that name
            return request.headers.get("x-id", "")

        limiter = Limiter(key_func=key, storage_uri=url,
                          strategy="sliding-window-counter", headers_enabled=True)
        app.state.limiter = limiter
        app.add_exception_handler(RateLimitExceeded, _rate_limit_exceeded_handler)  # type: ignore[arg-type]

        @app.get("/")
        @limiter.limit(f"{limit}/{window} second")
        async def limited(request: Request, response: Response) -> str:
            return "ok"

        return app

    @app.get("/")
    async def root() -> str:
        return "ok"

    if variant == "asgi-none":
        return app
    if variant == "asgi-slidingwindow":
        return RateLimitMiddleware(app, AsyncSlidingWindowRateLimiter(connect_async(url)),
                                   {"/": Policy("bench", limit, window)}, identity=caller)
    raise SystemExit(f"unknown variant {variant!r}")


def wsgi(variant: str, url: str, limit: int, window: int) -> Any:
    app = Flask(__name__)
    if variant == "wsgi-flask-limiter":
        from flask import request
        from flask_limiter import Limiter

        limiter = Limiter(lambda: request.headers.get("X-Id", ""), app=app, storage_uri=url,
                          strategy="sliding-window-counter", headers_enabled=True)

        @app.get("/")
        @limiter.limit(f"{limit} per {window} second")
        def limited() -> str:
            return "ok"

        return app

    @app.get("/")
    def root() -> str:
        return "ok"

    if variant == "wsgi-none":
        return app
    if variant == "wsgi-slidingwindow":
        return RateLimitWSGIMiddleware(app, SlidingWindowRateLimiter(connect(url)),
                                       {"/": Policy("bench", limit, window)}, identity=caller)
    raise SystemExit(f"unknown variant {variant!r}")


def main(argv: list[str]) -> None:
    if len(argv) != 4:
        raise SystemExit(__doc__)
    variant, addr, limit, window = argv[0], argv[1], int(argv[2]), int(argv[3])
    url = f"redis://{addr}/0"
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    # Accepted connections inherit it: without it uvicorn's two writes per answer (head, then
    # body) meet Nagle and the caller's delayed ACK, 40 ms a request.
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.bind(("127.0.0.1", 0))
    if variant.startswith("asgi-"):
        import uvicorn

        server = uvicorn.Server(uvicorn.Config(asgi(variant, url, limit, window),
                                               log_level="warning", access_log=False))
        sock.listen(1024)
        print(f"PORT {sock.getsockname()[1]}", flush=True)
        server.run(sockets=[sock])
    else:
        import logging

        from werkzeug.serving import WSGIRequestHandler, make_server

        class KeepAlive(WSGIRequestHandler):
            protocol_version = "HTTP/1.1"  # werkzeug's default, 1.0, closes every connection

        logging.getLogger("werkzeug").setLevel(logging.ERROR)  # no line per request

        port = sock.getsockname()[1]
        sock.close()  # werkzeug binds its own socket: the port, free a moment ago
        srv = make_server("127.0.0.1", port, wsgi(variant, url, limit, window), threaded=True,
                          request_handler=KeepAlive)
        print(f"PORT {port}", flush=True)
        srv.serve_forever()


if __name__ == "__main__":
    main(sys.argv[1:])
