"""One attempt of a command during an outage, whatever retry policy the user's client has.

A probe goes through the client's own retries and backoff only if nothing better is known:
redis-py's defaults retry a refused connection for seconds, which would delay recovery by
as much. So a probe sends exactly once:
- redis.Redis: on a connection of its own, made like the pool's (same host, password, TLS,
  timeouts) but with no retry, closed afterwards;
- RedisCluster: through the client aimed at the key's node, which redis-py runs without
  retries and which still refreshes the cluster's layout when the node is gone.
`args` are what the limiter sends (its backend's command), `key` the key they are on.
The reply is the command's reply (CHECK counts when it is allowed, as the request would
have) or the server's error.
"""

from __future__ import annotations

from typing import Any, Sequence

import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.asyncio.retry
import redis.cluster
import redis.retry
from redis.backoff import NoBackoff


def probe_sync(client: Any, args: Sequence[Any], key: Any) -> Any:
    if isinstance(client, redis.cluster.RedisCluster):
        cluster: Any = client  # redis-py's sync cluster methods are untyped
        return cluster.execute_command(*args, target_nodes=cluster.get_node_from_key(key))
    if isinstance(client, redis.Redis):
        pool = client.connection_pool
        kwargs = {**pool.connection_kwargs, "retry": redis.retry.Retry(NoBackoff(), 0)}
        conn = pool.connection_class(**kwargs)
        try:
            conn.send_command(*args)
            return conn.read_response()
        finally:
            conn.disconnect()
    return client.execute_command(*args)  # another client: its own policy applies


async def probe_async(client: Any, args: Sequence[Any], key: Any) -> Any:
    if isinstance(client, redis.asyncio.cluster.RedisCluster):
        node = client.get_node_from_key(key)
        return await client.execute_command(*args, target_nodes=node)
    if isinstance(client, redis.asyncio.Redis):
        pool = client.connection_pool
        kwargs = {**pool.connection_kwargs, "retry": redis.asyncio.retry.Retry(NoBackoff(), 0)}
        conn = pool.connection_class(**kwargs)
        try:
            await conn.send_command(*args)
            return await conn.read_response()
        finally:
            await conn.disconnect()
    return await client.execute_command(*args)
