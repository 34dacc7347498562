"""The asyncio twin, for redis.asyncio.Redis and redis.asyncio.cluster.RedisCluster.

Same methods, same answers as `SlidingWindowRateLimiter`, awaited.
"""

from __future__ import annotations

from typing import Any, Optional, Protocol

from ._core import CHECK, PEEK, LimiterBase, command_args
from .failure import is_unavailable
from .result import RateLimitResult


class AsyncClient(Protocol):
    """What the limiter needs: redis.asyncio.Redis and its RedisCluster both fit."""

    async def execute_command(self, *args: Any, **options: Any) -> Any: ...


class AsyncSlidingWindowRateLimiter(LimiterBase[AsyncClient]):
    """`SlidingWindowRateLimiter` for asyncio clients; see there."""

    async def is_allowed(
        self,
        client_id: str,
        limit: int = 100,
        window_seconds: int = 60,
        *,
        now: Optional[int] = None,
    ) -> tuple[bool, int]:
        """(allowed, count): count is the estimate including this request when allowed,
        the estimate when denied. `now` (Unix seconds) defaults to the server's clock."""
        args = command_args(
            CHECK, self.key(client_id), limit, window_seconds, now=now, cost=1, ms=False,
            details=False,
        )
        reply = await self._call(args)
        if reply is None:
            return self.fail_open, 0
        return bool(int(reply[0]) == 1), int(reply[1])

    async def check(
        self,
        client_id: str,
        limit: int,
        window: int,
        *,
        cost: int = 1,
        ms: bool = False,
        now: Optional[int] = None,
    ) -> RateLimitResult:
        """Counts the request (`cost` units of quota) when allowed. `window` and `now` are
        in seconds, or milliseconds when `ms`; `now` defaults to the server's clock."""
        return await self._decide(CHECK, client_id, limit, window, cost, ms, now)

    async def peek(
        self,
        client_id: str,
        limit: int,
        window: int,
        *,
        cost: int = 1,
        ms: bool = False,
        now: Optional[int] = None,
    ) -> RateLimitResult:
        """What `check` would answer, changing nothing (read-only: runs on replicas)."""
        return await self._decide(PEEK, client_id, limit, window, cost, ms, now)

    async def _decide(
        self, command: str, client_id: str, limit: int, window: int, cost: int, ms: bool,
        now: Optional[int],
    ) -> RateLimitResult:
        args = command_args(
            command, self.key(client_id), limit, window, now=now, cost=cost, ms=ms, details=True
        )
        reply = await self._call(args)
        if reply is None:
            return RateLimitResult.unavailable(self.fail_open, limit, window, ms)
        return RateLimitResult.from_reply(reply, window, ms)

    async def _call(self, args: list[Any]) -> Optional[Any]:
        """The reply, or None when Redis is unavailable (already logged and hooked)."""
        try:
            reply = await self.redis.execute_command(*args)
        except Exception as exc:
            if not is_unavailable(exc):
                raise
            self.failure.failed(exc)
            return None
        self.failure.succeeded()
        return reply
