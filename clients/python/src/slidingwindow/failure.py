"""Which errors mean "Redis is unavailable", and what to do then (fail open or closed)."""

from __future__ import annotations

import logging
import threading
import time
from typing import Callable, Optional

from redis import exceptions as rex

LOGGER = logging.getLogger("slidingwindow")

ErrorHook = Callable[[BaseException], None]

# Errors that say nothing about the request, only that the server cannot answer it now.
# Everything else, in particular ERR and WRONGTYPE (ResponseError), is raised: those mean
# the call or the key is wrong, and hiding them would hide a bug forever.
UNAVAILABLE: tuple[type[BaseException], ...] = (
    rex.ConnectionError,  # refused, reset, closed; also BusyLoadingError, auth failures
    rex.TimeoutError,
    TimeoutError,  # the builtin, raised by some asyncio paths
    ConnectionError,  # the builtin (OSError subclass)
    rex.ClusterDownError,  # CLUSTERDOWN, MASTERDOWN
    rex.ClusterError,  # "TTL exhausted": the cluster kept redirecting
    rex.SlotNotCoveredError,
    rex.TryAgainError,  # TRYAGAIN during resharding
    rex.ReadOnlyError,  # talking to a replica after a failover
    rex.OutOfMemoryError,  # maxmemory reached with noeviction: CHECK answers OOM
)


def is_unavailable(exc: BaseException) -> bool:
    return isinstance(exc, UNAVAILABLE)


class FailurePolicy:
    """Fail open (allow) or closed (deny) when Redis is unavailable.

    The warning is logged at most once per `warn_interval` seconds, so an outage under
    load does not flood the log; `on_error` is called on every such failure (for a metric).
    """

    def __init__(
        self,
        fail_open: bool = True,
        on_error: Optional[ErrorHook] = None,
        warn_interval: float = 60.0,
        logger: Optional[logging.Logger] = None,
    ) -> None:
        self.fail_open = fail_open
        self.on_error = on_error
        self.warn_interval = warn_interval
        self.logger = logger or LOGGER
        self._lock = threading.Lock()
        self._last_warning: Optional[float] = None
        self._failing = False

    def failed(self, exc: BaseException) -> bool:
        """Records one failure; returns whether the request is allowed."""
        now = time.monotonic()
        with self._lock:
            self._failing = True
            due = self._last_warning is None or now - self._last_warning >= self.warn_interval
            if due:
                self._last_warning = now
        if due:
            verdict = "allowing (fail-open)" if self.fail_open else "denying (fail-closed)"
            self.logger.warning(
                "rate limiter: Redis unavailable (%s: %s); %s requests; next warning in "
                "%gs at the earliest",
                type(exc).__name__,
                exc,
                verdict,
                self.warn_interval,
            )
        if self.on_error is not None:
            try:
                self.on_error(exc)
            except Exception:  # a broken hook must not turn fail-open into a 500
                self.logger.exception("rate limiter: on_error hook raised")
        return self.fail_open

    def succeeded(self) -> None:
        """Notes a successful call: logs the recovery once after a failure."""
        if self._failing:
            with self._lock:
                was_failing, self._failing = self._failing, False
            if was_failing:
                self.logger.info("rate limiter: Redis reachable again")
