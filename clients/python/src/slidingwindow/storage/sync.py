"""The `limits` storages (sync) whose sliding window counter is the module's command."""

from __future__ import annotations

from typing import Any

from limits.storage import RedisClusterStorage, RedisStorage
from limits.storage.base import TimestampedSlidingWindow

from . import commands as cmd
from ..core.backend import Backend, run_sync


class _ModuleSlidingWindow(RedisStorage, TimestampedSlidingWindow):
    """limits' RedisStorage (fixed and moving windows unchanged: its own Lua scripts),
    with the sliding window counter on SLIDINGWINDOW.CHECK / COUNTS, one key each.

    `backend`: "auto" (default), "module" or "library", as the limiters' (the Functions
    library where the server has no module). No STORAGE_SCHEME here: limits registers
    the subclasses below under theirs.
    """

    def __init__(self, uri: str, backend: str = "auto", **options: Any) -> None:
        self.backend = Backend(backend)
        super().__init__(cmd.native_uri(uri), **options)

    def _window_key(self, key: str) -> str:
        return self.prefixed_key(cmd.KEY_TAG + key)

    def _client(self, readonly: bool = False) -> Any:
        # redis.Redis or redis.cluster.RedisCluster (limits types it as a narrower protocol).
        return self.get_connection(readonly)

    def acquire_sliding_window_entry(
        self, key: str, limit: int, expiry: int, amount: int = 1
    ) -> bool:
        command = cmd.acquire_command(self._window_key(key), limit, expiry, amount)
        if command is None:
            return False
        return cmd.allowed(run_sync(self._client(), self.backend.steps(command)))

    def get_sliding_window(self, key: str, expiry: int) -> tuple[int, float, int, float]:
        reply = run_sync(self._client(True),
                         self.backend.steps(cmd.counts_command(self._window_key(key), expiry)))
        return cmd.sliding_window(reply, expiry)

    def clear_sliding_window(self, key: str, expiry: int) -> None:
        self._client().delete(self._window_key(key))


class SlidingWindowRedisStorage(_ModuleSlidingWindow):
    """`slidingwindow+redis://host:port/db` (also `+rediss`, `+redis+unix`): one server
    with the module loaded. Options are those of limits' RedisStorage."""

    STORAGE_SCHEME = [
        "slidingwindow+redis",
        "slidingwindow+rediss",
        "slidingwindow+redis+unix",
    ]


class SlidingWindowRedisClusterStorage(_ModuleSlidingWindow, RedisClusterStorage):
    """`slidingwindow+redis+cluster://host:port,host:port`: a Redis Cluster whose
    masters all load the module. Options are those of limits' RedisClusterStorage."""

    STORAGE_SCHEME = ["slidingwindow+redis+cluster"]
