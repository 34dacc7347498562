"""The synchronous limiter, for redis.Redis and redis.cluster.RedisCluster."""

from __future__ import annotations

import threading
import time
from typing import Any, Optional, Protocol, Sequence

from .base import Command, LimiterBase, Limits, T, pause_before_retry
from .commands import CHECK, PEEK, REFUND
from . import deny_cache
from .backend import run_sync
from .probe import probe_sync
from .result import MultiLimitResult, RateLimitResult, WindowCounts


class SyncClient(Protocol):
    """What the limiter needs: redis.Redis and redis.cluster.RedisCluster both fit."""

    def execute_command(self, *args: Any, **options: Any) -> Any: ...


class SlidingWindowRateLimiter(LimiterBase[SyncClient]):
    """A sliding-window-counter limiter: one SLIDINGWINDOW.CHECK per request.

    Drop-in for the seed's class: `is_allowed(client_id, limit, window_seconds)` answers
    the same, but keeps one key per client (`<prefix><client_id>`), so it also works on a
    Redis Cluster; where the server has no module it runs the Functions library
    (`backend=`, see LimiterBase). While Redis is unavailable, calls are answered at
    once, allowed (fail-open) unless `fail_open=False`, whatever the client's own timeouts
    and retries; see `LimiterBase` for the options.
    """

    def is_allowed(
        self,
        client_id: str,
        limit: int = 100,
        window_seconds: int = 60,
        *,
        now: Optional[int] = None,
    ) -> tuple[bool, int]:
        """(allowed, count): count is the estimate including this request when allowed,
        the estimate when denied. `now` (Unix seconds) defaults to the server's clock.
        During an outage: (fail_open, 0)."""
        return self._run(self._is_allowed_command(client_id, limit, window_seconds, now))

    def check(
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
        return self._run(self._decide_command(CHECK, client_id, limit, window, cost, ms, now))

    def peek(
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
        return self._run(self._decide_command(PEEK, client_id, limit, window, cost, ms, now))

    def check_limits(
        self,
        client_id: str,
        limits: Limits,
        *,
        cost: int = 1,
        ms: bool = False,
        now: Optional[int] = None,
    ) -> MultiLimitResult:
        """Several limits in one command, all or nothing: allowed when every limit allows,
        and then `cost` counts in each. `limits`: "10/second;1000/hour", Rates, or
        (limit, window) pairs (windows in ms with `ms`). One key holds every window."""
        return self._run(self._limits_command(CHECK, client_id, limits, cost, ms, now))

    def peek_limits(
        self,
        client_id: str,
        limits: Limits,
        *,
        cost: int = 1,
        ms: bool = False,
        now: Optional[int] = None,
    ) -> MultiLimitResult:
        """What `check_limits` would answer, changing nothing."""
        return self._run(self._limits_command(PEEK, client_id, limits, cost, ms, now))

    def refund(
        self,
        client_id: str,
        limit: int,
        window: int,
        *,
        cost: int = 1,
        ms: bool = False,
        now: Optional[int] = None,
    ) -> RateLimitResult:
        """Gives back `cost` that an allowed `check` with the same arguments counted
        (SLIDINGWINDOW.REFUND: never below 0, the key's expiry kept) and answers what
        `peek` answers right after. Not idempotent: refund once, only after an allowed,
        not degraded check, with that check's arguments. During an outage: the placeholder
        result (`degraded`, allowed = fail_open), nothing given back, and no error."""
        return self._run(self._decide_command(REFUND, client_id, limit, window, cost, ms, now))

    def refund_limits(
        self,
        client_id: str,
        limits: Limits,
        *,
        cost: int = 1,
        ms: bool = False,
        now: Optional[int] = None,
    ) -> MultiLimitResult:
        """`refund` for `check_limits`: `cost` back in each of the limits' windows; answers
        what `peek_limits` answers right after."""
        return self._run(self._limits_command(REFUND, client_id, limits, cost, ms, now))

    def wait(
        self,
        client_id: str,
        limit: int,
        window: int,
        *,
        timeout: float,
        cost: int = 1,
        ms: bool = False,
    ) -> RateLimitResult:
        """`check`, and while denied, sleep exactly its retry_after (never past `timeout`
        seconds from now) and check again. Returns the last result: allowed, or denied at
        the timeout, or at once when it can never pass (cost > limit) or Redis is down
        with fail-closed. Not a fair queue: concurrent waiters race at each retry."""
        deadline = time.monotonic() + timeout
        while True:
            result = self.check(client_id, limit, window, cost=cost, ms=ms)
            pause = pause_before_retry(result, deadline - time.monotonic())
            if pause is None:
                return result
            time.sleep(pause)

    def acquire(
        self, client_id: str, limit: int, window: int, *, timeout: float, cost: int = 1,
        ms: bool = False,
    ) -> bool:
        """`wait(...).allowed`."""
        return self.wait(client_id, limit, window, timeout=timeout, cost=cost, ms=ms).allowed

    def counts(
        self, client_id: str, window: int, *, ms: bool = False, now: Optional[int] = None,
    ) -> WindowCounts:
        """SLIDINGWINDOW.COUNTS: (previous, current, elapsed) of one window of the key
        (read-only). During an outage: zeros, `degraded`."""
        return self._run(self._counts_command(client_id, window, ms, now))

    def reset(self, client_id: str) -> None:
        """Deletes the key: every window's counts, and its deny-cache entries. An outage
        is raised (there is nothing to answer instead)."""
        key = self._forget(client_id)
        try:
            self.redis.execute_command("DEL", key)
        finally:
            self._forget(client_id)

    def _run(self, command: Command[T]) -> T:
        spec = deny_cache.applies(self.deny_cache, command.spec, self.circuit)
        if spec is not None and self.deny_cache is not None:
            return self.deny_cache.run_sync(spec, command, self._call, self.redis)
        return self._call(command)

    def _call(self, command: Command[T]) -> T:
        answer = self._gate(command)
        if answer is not None:
            return answer
        try:
            reply = run_sync(self.redis, self.backend.steps(command.args))
        except Exception as exc:
            return self._failed(exc, command)
        return command.read(reply)

    def _start_probe(self, args: Sequence[Any]) -> None:
        def probe() -> None:
            try:
                probe_sync(self.redis, self.backend.wire(args), args[1])
            except BaseException as exc:
                self.circuit.probed(exc)
            else:
                self.circuit.probed(None)

        try:
            threading.Thread(target=probe, name="slidingwindow-probe", daemon=True).start()
        except RuntimeError as exc:  # no thread to be had: try again next interval
            self.circuit.probed(exc)
