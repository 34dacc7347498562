"""The asyncio twin, for redis.asyncio.Redis and redis.asyncio.cluster.RedisCluster.

Same methods, same answers as `SlidingWindowRateLimiter`, awaited; the outage handling is
the same circuit, with probes run as tasks of the running loop.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Optional, Protocol, Sequence

from .base import Command, LimiterBase, Limits, T, pause_before_retry
from .commands import CHECK, PEEK, REFUND
from . import deny_cache
from .backend import run_async
from .probe import probe_async
from .result import MultiLimitResult, RateLimitResult, WindowCounts


class AsyncClient(Protocol):
    """What the limiter needs: redis.asyncio.Redis and its RedisCluster both fit."""

    async def execute_command(self, *args: Any, **options: Any) -> Any: ...


class AsyncSlidingWindowRateLimiter(LimiterBase[AsyncClient]):
    """`SlidingWindowRateLimiter` for asyncio clients; see there for each method."""

    _probe_task: Optional[asyncio.Task[None]] = None

    async def is_allowed(
        self,
        client_id: str,
        limit: int = 100,
        window_seconds: int = 60,
        *,
        now: Optional[int] = None,
    ) -> tuple[bool, int]:
        return await self._run(self._is_allowed_command(client_id, limit, window_seconds, now))

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
        return await self._run(
            self._decide_command(CHECK, client_id, limit, window, cost, ms, now))

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
        return await self._run(
            self._decide_command(PEEK, client_id, limit, window, cost, ms, now))

    async def check_limits(
        self,
        client_id: str,
        limits: Limits,
        *,
        cost: int = 1,
        ms: bool = False,
        now: Optional[int] = None,
    ) -> MultiLimitResult:
        return await self._run(self._limits_command(CHECK, client_id, limits, cost, ms, now))

    async def peek_limits(
        self,
        client_id: str,
        limits: Limits,
        *,
        cost: int = 1,
        ms: bool = False,
        now: Optional[int] = None,
    ) -> MultiLimitResult:
        return await self._run(self._limits_command(PEEK, client_id, limits, cost, ms, now))

    async def refund(
        self,
        client_id: str,
        limit: int,
        window: int,
        *,
        cost: int = 1,
        ms: bool = False,
        now: Optional[int] = None,
    ) -> RateLimitResult:
        return await self._run(
            self._decide_command(REFUND, client_id, limit, window, cost, ms, now))

    async def refund_limits(
        self,
        client_id: str,
        limits: Limits,
        *,
        cost: int = 1,
        ms: bool = False,
        now: Optional[int] = None,
    ) -> MultiLimitResult:
        return await self._run(self._limits_command(REFUND, client_id, limits, cost, ms, now))

    async def wait(
        self,
        client_id: str,
        limit: int,
        window: int,
        *,
        timeout: float,
        cost: int = 1,
        ms: bool = False,
    ) -> RateLimitResult:
        deadline = time.monotonic() + timeout
        while True:
            result = await self.check(client_id, limit, window, cost=cost, ms=ms)
            pause = pause_before_retry(result, deadline - time.monotonic())
            if pause is None:
                return result
            await asyncio.sleep(pause)

    async def acquire(
        self, client_id: str, limit: int, window: int, *, timeout: float, cost: int = 1,
        ms: bool = False,
    ) -> bool:
        result = await self.wait(client_id, limit, window, timeout=timeout, cost=cost, ms=ms)
        return result.allowed

    async def counts(
        self, client_id: str, window: int, *, ms: bool = False, now: Optional[int] = None,
    ) -> WindowCounts:
        return await self._run(self._counts_command(client_id, window, ms, now))

    async def reset(self, client_id: str) -> None:
        key = self._forget(client_id)
        try:
            await self.redis.execute_command("DEL", key)
        finally:
            self._forget(client_id)

    async def _run(self, command: Command[T]) -> T:
        spec = deny_cache.applies(self.deny_cache, command.spec, self.circuit)
        if spec is not None and self.deny_cache is not None:
            return await self.deny_cache.run_async(spec, command, self._call, self.redis)
        return await self._call(command)

    async def _call(self, command: Command[T]) -> T:
        answer = self._gate(command)
        if answer is not None:
            return answer
        try:
            reply = await run_async(self.redis, self.backend.steps(command.args))
        except Exception as exc:
            return self._failed(exc, command)
        return command.read(reply)

    def _start_probe(self, args: Sequence[Any]) -> None:
        async def probe() -> None:
            try:
                await probe_async(self.redis, self.backend.wire(args), args[1])
            except BaseException as exc:  # CancelledError too: the next one may start
                self.circuit.probed(exc)
                if isinstance(exc, asyncio.CancelledError):
                    raise
            else:
                self.circuit.probed(None)

        # Kept referenced until done: the loop holds tasks only weakly.
        self._probe_task = asyncio.get_running_loop().create_task(probe())
