"""Clients configured for a rate limiter: short timeouts, at most one quick retry.

redis-py's defaults suit a cache, not a limiter in front of every request: no socket
timeout (a hung server hangs the API) and up to 10 retries with backoff. A limiter
should give up fast and fail open instead.

A single server gets a *blocking* pool: past `max_connections`, a request waits up to
`pool_timeout` for a connection. A plain pool raises MaxConnectionsError at once; the
limiter raises it too (the pool is full, Redis is fine: failing open would let a burst of
concurrent requests bypass the limit exactly when it matters), so a burst would get errors.
"""

from __future__ import annotations

from typing import Any, Union

import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.cluster
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError

DEFAULT_TIMEOUT = 0.25  # seconds, for connecting and for each reply
DEFAULT_MAX_CONNECTIONS = 64
DEFAULT_POOL_TIMEOUT = 1.0  # seconds a request may wait for a free pooled connection

SyncRedis = Union[redis.Redis, redis.cluster.RedisCluster]
AsyncRedis = Union[redis.asyncio.Redis, redis.asyncio.cluster.RedisCluster]


def _options(timeout: float, kwargs: dict[str, Any]) -> dict[str, Any]:
    options: dict[str, Any] = {"socket_timeout": timeout, "socket_connect_timeout": timeout}
    options.update(kwargs)
    return options


def _retry(module: Any, retries: int) -> Any:
    # Retry only when the connection broke (e.g. a pooled one after a server restart).
    # Never on a timeout: CHECK counts, so the first attempt may have counted already.
    return module.Retry(NoBackoff(), retries, supported_errors=(RedisConnectionError,))


def connect(
    url: str = "redis://127.0.0.1:6379/0",
    *,
    cluster: bool = False,
    timeout: float = DEFAULT_TIMEOUT,
    retries: int = 1,
    max_connections: int = DEFAULT_MAX_CONNECTIONS,
    pool_timeout: float = DEFAULT_POOL_TIMEOUT,
    **kwargs: Any,
) -> SyncRedis:
    """A redis.Redis (or, with `cluster=True`, a RedisCluster seeded from `url`).
    Further keyword arguments go to redis-py (password, ssl_*, ...)."""
    import redis.retry

    options = _options(timeout, kwargs)
    options.setdefault("retry", _retry(redis.retry, retries))
    if cluster:
        return redis.cluster.RedisCluster.from_url(url, **options)
    pool = redis.BlockingConnectionPool.from_url(
        url, max_connections=max_connections, timeout=pool_timeout, **options
    )
    return redis.Redis.from_pool(pool)


def connect_async(
    url: str = "redis://127.0.0.1:6379/0",
    *,
    cluster: bool = False,
    timeout: float = DEFAULT_TIMEOUT,
    retries: int = 1,
    max_connections: int = DEFAULT_MAX_CONNECTIONS,
    pool_timeout: float = DEFAULT_POOL_TIMEOUT,
    **kwargs: Any,
) -> AsyncRedis:
    """The asyncio twin of `connect`: redis.asyncio.Redis or its RedisCluster. It connects
    lazily, in the event loop that first uses it; use it from that loop only."""
    import redis.asyncio.retry

    options = _options(timeout, kwargs)
    options.setdefault("retry", _retry(redis.asyncio.retry, retries))
    if cluster:
        # Its per-node pools hold max_connections (100 by default) and raise past it.
        return redis.asyncio.cluster.RedisCluster.from_url(url, **options)
    pool = redis.asyncio.BlockingConnectionPool.from_url(
        url, max_connections=max_connections, timeout=pool_timeout, **options
    )
    return redis.asyncio.Redis.from_pool(pool)
