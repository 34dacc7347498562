"""The `limits.aio` storages whose sliding window counter is the module's command."""

from __future__ import annotations

from typing import Any, Literal

from limits.aio.storage import RedisClusterStorage, RedisStorage
from limits.errors import ConfigurationError
from limits.storage.base import TimestampedSlidingWindow

from . import commands as cmd
from ..core.backend import Backend, run_async

# The bridges of limits.aio that talk through a redis-py style client (execute_command
# with plain arguments): redis.asyncio and valkey.asyncio. coredis is not supported.
IMPLEMENTATIONS = ("redispy", "valkey")


class _AsyncModuleSlidingWindow(RedisStorage, TimestampedSlidingWindow):
    """limits.aio's RedisStorage (fixed and moving windows unchanged), with the sliding
    window counter on SLIDINGWINDOW.CHECK / COUNTS, one key each.

    `implementation` defaults to "redispy" (limits' own default is coredis); `backend`
    is "auto" (default), "module" or "library", as the limiters'.
    """

    def __init__(
        self,
        uri: str,
        implementation: Literal["redispy", "coredis", "valkey"] = "redispy",
        backend: str = "auto",
        **options: Any,
    ) -> None:
        self.backend = Backend(backend)
        if implementation not in IMPLEMENTATIONS:
            raise ConfigurationError(
                f"implementation={implementation!r}: the {cmd.SCHEME_TAG} storage works "
                f"with {' or '.join(IMPLEMENTATIONS)}"
            )
        super().__init__(cmd.native_uri(uri), implementation=implementation, **options)

    def _window_key(self, key: str) -> str:
        return self.bridge.prefixed_key(cmd.KEY_TAG + key)

    def _client(self, readonly: bool = False) -> Any:
        # Both supported bridges are RedispyBridge (ValkeyBridge derives from it).
        return self.bridge.get_connection(readonly)  # type: ignore[attr-defined]

    async def acquire_sliding_window_entry(
        self, key: str, limit: int, expiry: int, amount: int = 1
    ) -> bool:
        command = cmd.acquire_command(self._window_key(key), limit, expiry, amount)
        if command is None:
            return False
        return cmd.allowed(await run_async(self._client(), self.backend.steps(command)))

    async def get_sliding_window(
        self, key: str, expiry: int
    ) -> tuple[int, float, int, float]:
        reply = await run_async(
            self._client(True),
            self.backend.steps(cmd.counts_command(self._window_key(key), expiry)))
        return cmd.sliding_window(reply, expiry)

    async def clear_sliding_window(self, key: str, expiry: int) -> None:
        await self._client().delete(self._window_key(key))


class AsyncSlidingWindowRedisStorage(_AsyncModuleSlidingWindow):
    """`async+slidingwindow+redis://host:port/db` (also `+rediss`, `+redis+unix`)."""

    STORAGE_SCHEME = [
        "async+slidingwindow+redis",
        "async+slidingwindow+rediss",
        "async+slidingwindow+redis+unix",
    ]


class AsyncSlidingWindowRedisClusterStorage(_AsyncModuleSlidingWindow, RedisClusterStorage):
    """`async+slidingwindow+redis+cluster://host:port,host:port`."""

    STORAGE_SCHEME = ["async+slidingwindow+redis+cluster"]
