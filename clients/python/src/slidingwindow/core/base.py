"""What the sync and asyncio limiters share: commands as values, configuration, waiting.

Each public method builds a `Command` here (its arguments, how to read the reply, what to
answer without Redis); the two limiters only differ in how they send it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Callable, Generic, Optional, Sequence, TypeVar, Union

from .deny_cache import DenyCacheArg, Spec, make as make_deny_cache, spec_for
from .backend import Backend
from .commands import CHECK, COUNTS, PEEK, REFUND
from .failure import Circuit, ErrorHook, Gate
from .rates import MS_WITH_RATE_STRING, Rate, parse_limits
from .result import MultiLimitResult, RateLimitResult, WindowCounts


Arg = Union[str, int]
# Several limits: a rate string ("10/second;1000/hour", sent in ms), or Rates, or
# (limit, window) pairs (seconds, or ms with `ms`).
Limits = Union[str, Sequence[Union[Rate, tuple[int, int]]]]
ClientT = TypeVar("ClientT")
T = TypeVar("T")


def _check_ints(**values: int) -> None:
    # Types are checked here so a typo fails before any I/O; ranges are the module's job.
    for name, value in values.items():
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{name} must be an int, got {value!r}")


def as_pairs(limits: Limits, ms: bool) -> tuple[list[tuple[int, int]], bool]:
    """(limit, window) pairs, in order, from any form `Limits` allows, and whether their
    windows are in ms: a rate string's always are (and `ms=True` with one is an error)."""
    if isinstance(limits, str):
        if ms:
            raise ValueError(MS_WITH_RATE_STRING)
        limits, ms = parse_limits(limits), True
    pairs = [(r.limit, r.window) if isinstance(r, Rate) else (r[0], r[1]) for r in limits]
    if not pairs:
        raise ValueError("no limit given")
    return pairs, ms


def command_args(
    command: str,
    key: str,
    limit: int,
    window: int,
    *,
    now: Optional[int],
    cost: int,
    ms: bool,
    details: bool,
    more: Sequence[tuple[int, int]] = (),
) -> list[Arg]:
    """The argument vector of one CHECK, PEEK or REFUND; `more` limits go as `LIMIT limit window`."""
    _check_ints(limit=limit, window=window, cost=cost)
    args: list[Arg] = [command, key, limit, window]
    if now is not None:
        args.append(int(now))
    for extra_limit, extra_window in more:
        _check_ints(limit=extra_limit, window=extra_window)
        args += ["LIMIT", extra_limit, extra_window]
    if cost != 1:
        args += ["COST", cost]
    if ms:
        args.append("MS")
    if details:
        args.append("DETAILS")
    return args


@dataclass(frozen=True)
class Command(Generic[T]):
    """One call: `args` (the key is args[1]), `read` turns the reply into the answer, and
    `without_redis(allowed)` is the answer during an outage. `probe_args`, when set, is
    what a probe started by this call sends instead of `args` (a CHECK or a REFUND probes
    with PEEK: a probe only looks, it never counts or gives back a request that was
    answered without Redis)."""

    args: Sequence[Arg]
    read: Callable[[Any], T]
    without_redis: Callable[[bool], T]
    probe_args: Optional[Sequence[Arg]] = None
    # Where the call meets the deny cache (CHECK and REFUND), from the values `args` was
    # built of, so that nothing parses `args` again.
    spec: Optional[Spec] = None


def _probe_args(args: Sequence[Arg]) -> Optional[Sequence[Arg]]:
    """PEEK's arguments for a CHECK or a REFUND (the same but the command), None for the
    read-only others."""
    return [PEEK, *args[1:]] if args[0] in (CHECK, REFUND) else None


def _read_is_allowed(reply: Any) -> tuple[bool, int]:
    return int(reply[0]) == 1, int(reply[1])


def _is_allowed_without_redis(allowed: bool) -> tuple[bool, int]:
    return allowed, 0


class LimiterBase(Generic[ClientT]):
    """The client, key naming and outage handling, common to both limiters.

    prefix: put before every client id to make the Redis key (`rate:<client_id>`).
    fail_open: allow requests while Redis is unavailable (default); False denies them.
    on_error: called with the exception of every call to Redis that failed with an outage
        error (e.g. to count them).
    probe_interval: during an outage, seconds between two background probes.
    logger: where the outage and recovery lines go (default: logging "slidingwindow").
    deny_cache: remember refusals until Redis could first allow them, and answer them
        without Redis (`slidingwindow.core.deny_cache`): True for a default `DenyCache`, or
        one; off by default here, on by default in the middlewares.
    backend: "auto" (default): the module's commands where the server has the module,
        else the Functions library (loaded when missing, if this user may); "module" or
        "library" forces one (see slidingwindow.core.backend).
    """

    def __init__(
        self,
        redis_client: ClientT,
        *,
        prefix: str = "rate:",
        fail_open: bool = True,
        on_error: Optional[ErrorHook] = None,
        probe_interval: float = 1.0,
        logger: Optional[logging.Logger] = None,
        deny_cache: DenyCacheArg = False,
        backend: str = "auto",
    ) -> None:
        self.backend = Backend(backend)
        self.redis = redis_client
        self.deny_cache = make_deny_cache(deny_cache)
        self.prefix = prefix
        self.circuit = Circuit(fail_open, on_error, probe_interval, logger)

    @property
    def fail_open(self) -> bool:
        return self.circuit.fail_open

    def key(self, client_id: str) -> str:
        # One Redis key per identity: the module keeps both windows' counts in it.
        return f"{self.prefix}{client_id}"

    def _gate(self, command: Command[T]) -> Optional[T]:
        """None: make the call. During an outage, the answer without Redis (and a probe
        started in the background when one is due)."""
        gate = self.circuit.gate()
        if gate is Gate.CALL:
            return None
        if gate is Gate.PROBE:
            self._start_probe(command.probe_args or command.args)
        return command.without_redis(self.fail_open)

    def _failed(self, exc: Exception, command: Command[T]) -> T:
        """The answer after a failed call, or `exc` raised when it is no outage."""
        if not self.circuit.failed(exc):
            raise exc
        return command.without_redis(self.fail_open)

    def _start_probe(self, args: Sequence[Any]) -> None:
        raise NotImplementedError  # a thread (sync) or a task (asyncio)

    def _is_allowed_command(
        self, client_id: str, limit: int, window_seconds: int, now: Optional[int]
    ) -> Command[tuple[bool, int]]:
        key = self.key(client_id)
        args = command_args(CHECK, key, limit, window_seconds, now=now, cost=1, ms=False,
                            details=False)
        spec = spec_for(CHECK, key, [(limit, window_seconds)], ms=False, now=now, cost=1,
                        details=False)
        return Command(args, _read_is_allowed, _is_allowed_without_redis, _probe_args(args),
                       spec)

    def _decide_command(
        self, command: str, client_id: str, limit: int, window: int, cost: int, ms: bool,
        now: Optional[int],
    ) -> Command[RateLimitResult]:
        key = self.key(client_id)
        args = command_args(command, key, limit, window, now=now, cost=cost, ms=ms,
                            details=True)
        return Command(
            args,
            lambda reply: RateLimitResult.from_reply(reply, window, ms),
            lambda allowed: RateLimitResult.unavailable(allowed, limit, window, ms),
            _probe_args(args),
            spec_for(command, key, [(limit, window)], ms=ms, now=now, cost=cost, details=True),
        )

    def _limits_command(
        self, command: str, client_id: str, limits: Limits, cost: int, ms: bool,
        now: Optional[int],
    ) -> Command[MultiLimitResult]:
        pairs, ms = as_pairs(limits, ms)
        (limit, window), more = pairs[0], pairs[1:]
        key = self.key(client_id)
        args = command_args(command, key, limit, window, now=now, cost=cost, ms=ms,
                            details=True, more=more)
        windows = [w for _, w in pairs]
        return Command(
            args,
            lambda reply: MultiLimitResult.from_reply(reply, windows, cost, ms),
            lambda allowed: MultiLimitResult.unavailable(allowed, pairs, ms),
            _probe_args(args),
            spec_for(command, key, pairs, ms=ms, now=now, cost=cost, details=True),
        )

    def _counts_command(
        self, client_id: str, window: int, ms: bool, now: Optional[int],
    ) -> Command[WindowCounts]:
        _check_ints(window=window)
        args: list[Arg] = [COUNTS, self.key(client_id), window]
        if now is not None:
            _check_ints(now=now)
            args.append(now)
        if ms:
            args.append("MS")
        return Command(args, WindowCounts.from_reply, lambda _allowed: WindowCounts.unavailable())

    def _forget(self, client_id: str) -> str:
        """For `reset`: the key, with its deny-cache entries dropped."""
        key = self.key(client_id)
        if self.deny_cache is not None:
            self.deny_cache.forget(key)
        return key


def pause_before_retry(result: RateLimitResult, remaining: float) -> Optional[float]:
    """For `wait`: seconds to sleep before trying again, or None to return `result` now
    (allowed; never possible, cost > limit; answered without Redis; no time left).
    The sleep is the exact retry_after, cut to the time left."""
    if result.allowed or result.degraded or result.retry_after < 0 or remaining <= 0:
        return None
    unit = 0.001 if result.ms else 1.0
    return min(result.retry_after * unit, remaining)
