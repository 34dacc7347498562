"""The server `make accuracy` runs on: slidingwindow_testing's, with latency tracking off."""

from __future__ import annotations

from pathlib import Path

import redis
from slidingwindow_testing import RedisServer


def start_server(binary: str, module: Path) -> RedisServer:
    """`binary` with `module` loaded, started on a free loopback port."""
    srv = RedisServer(binary=binary, module=False, modules=[module], start_timeout=20).start()
    try:  # per-command latency histograms (Redis 7+): each command's first call after
        # CONFIG RESETSTAT allocates ~24 KB, which would blur the memory figures
        srv.r.config_set("latency-tracking", "no")
    except redis.ResponseError:
        pass
    return srv
