"""Which errors mean "Redis is unavailable", and the circuit that answers at once while it is.

The circuit is the one piece of outage logic: the sync and asyncio limiters, and through
them both middlewares, ask it before every call. While Redis is up it costs one attribute
read. After a call fails with an outage error it opens: calls are answered at once without
Redis (fail-open or fail-closed), and at most once per `probe_interval` one call starts a
probe in the background (a thread, or an asyncio task) that no request waits on. The first
probe that gets an answer closes it again.
"""

from __future__ import annotations

import enum
import logging
import threading
import time
from typing import Callable, Optional

from redis import exceptions as rex

LOGGER = logging.getLogger("slidingwindow")

ErrorHook = Callable[[BaseException], None]

# States of the server, not of the request: they can end without anyone touching the app
# (restart, failover, loading, resync, memory freed), so the limiter fails open or closed.
UNAVAILABLE: tuple[type[BaseException], ...] = (
    rex.ConnectionError,  # refused, reset, closed; BusyLoadingError (LOADING)
    rex.TimeoutError,
    TimeoutError,  # the builtin, raised by some asyncio paths
    ConnectionError,  # the builtin (OSError subclass)
    rex.ClusterDownError,  # CLUSTERDOWN, and MASTERDOWN (its subclass)
    rex.ClusterError,  # "TTL exhausted": the cluster kept redirecting
    rex.SlotNotCoveredError,
    rex.TryAgainError,  # TRYAGAIN
    rex.ReadOnlyError,  # READONLY: a replica, e.g. the old master after a failover
    rex.OutOfMemoryError,  # OOM: maxmemory reached with noeviction (CHECK is deny-oom)
)

# Raised although redis-py makes some of them ConnectionErrors: a wrong password, a missing
# ACL grant or a full client-side pool is the app's configuration, which no probe can
# repair. Failing open on them would run the API without limits until someone reads a log.
NOT_OUTAGES: tuple[type[BaseException], ...] = (
    rex.AuthenticationError,  # NOAUTH, WRONGPASS
    rex.AuthorizationError,
    rex.NoPermissionError,  # NOPERM
    rex.MaxConnectionsError,  # the client's own pool is full: Redis is fine
)


def is_unavailable(exc: BaseException) -> bool:
    """Whether `exc` means Redis cannot answer now (an outage), not that the call is wrong."""
    return isinstance(exc, UNAVAILABLE) and not isinstance(exc, NOT_OUTAGES)


def server_answered(exc: Optional[BaseException]) -> bool:
    """Whether a probe reached a working server: a reply, or an error reply that is no outage
    (WRONGTYPE on the probed key still proves the server is back)."""
    return exc is None or (isinstance(exc, rex.RedisError) and not is_unavailable(exc))


class Gate(enum.Enum):
    CALL = "call"  # Redis is up: make the call
    SKIP = "skip"  # outage: answer without Redis
    PROBE = "probe"  # outage, probe due: start one in the background, answer without Redis


class Circuit:
    """Outage state of one limiter, shared by all its threads or tasks.

    fail_open: what calls answer during an outage (allowed; False: denied).
    on_error: called with the exception of every call to Redis that failed with an outage
        error (requests and probes), e.g. to count them; calls answered without Redis do
        not call it. A hook that raises is logged and ignored.
    probe_interval: seconds between the starts of two probes.
    """

    def __init__(
        self,
        fail_open: bool = True,
        on_error: Optional[ErrorHook] = None,
        probe_interval: float = 1.0,
        logger: Optional[logging.Logger] = None,
    ) -> None:
        if probe_interval <= 0:
            raise ValueError("probe_interval must be > 0 seconds")
        self.fail_open = fail_open
        self.on_error = on_error
        self.probe_interval = probe_interval
        self.logger = logger or LOGGER
        self._lock = threading.Lock()
        self._down = False
        self._probing = False
        self._since = 0.0
        self._next_probe = 0.0
        self._answered_without = 0
        self.outages = 0  # outages seen so far (each logged once)
        self.probes = 0  # probes started so far

    @property
    def down(self) -> bool:
        return self._down

    @property
    def probing(self) -> bool:
        """A probe is in flight."""
        return self._probing

    def gate(self) -> Gate:
        if not self._down:  # the common case, lock-free
            return Gate.CALL
        with self._lock:
            if not self._down:
                return Gate.CALL
            self._answered_without += 1
            now = time.monotonic()
            if self._probing or now < self._next_probe:
                return Gate.SKIP
            self._probing = True
            self.probes += 1
            self._next_probe = now + self.probe_interval  # between two probes' starts
            return Gate.PROBE

    def failed(self, exc: BaseException) -> bool:
        """Records a failed call. False when `exc` is no outage: the caller raises it."""
        if not is_unavailable(exc):
            return False
        now = time.monotonic()
        with self._lock:
            opened = not self._down
            if opened:
                self._down = True
                self._since = now
                self._next_probe = now + self.probe_interval
                self._answered_without = 0
                self.outages += 1
        if opened:
            verdict = "allowing (fail-open)" if self.fail_open else "denying (fail-closed)"
            self.logger.warning(
                "rate limiter: Redis unavailable (%s: %s); %s requests without asking it "
                "until a probe (one every %gs) gets an answer",
                type(exc).__name__, exc, verdict, self.probe_interval,
            )
        self._hook(exc)
        return True

    def probed(self, exc: Optional[BaseException]) -> None:
        """Records how a probe ended: `exc` is None when it got a reply."""
        now = time.monotonic()
        recovered = server_answered(exc)
        with self._lock:
            self._probing = False
            was_down, since, answered = self._down, self._since, self._answered_without
            if recovered:
                self._down = False
        if recovered and was_down:
            # WARNING like the outage line, so a default logging setup shows both.
            self.logger.warning(
                "rate limiter: Redis reachable again after %.1fs; %d requests were answered "
                "without it", now - since, answered,
            )
        elif exc is not None and not recovered:
            if is_unavailable(exc):
                self._hook(exc)
            else:  # not a Redis error: a bug somewhere; say so, keep probing
                self.logger.error("rate limiter: probe failed unexpectedly: %r", exc)

    def _hook(self, exc: BaseException) -> None:
        if self.on_error is None:
            return
        try:
            self.on_error(exc)
        except Exception:  # a broken hook must not turn fail-open into a 500
            self.logger.exception("rate limiter: on_error hook raised")
