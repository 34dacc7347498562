"""What the sync and asyncio limiters share: argument building and configuration."""

from __future__ import annotations

import logging
from typing import Generic, Optional, TypeVar, Union

from .failure import ErrorHook, FailurePolicy

CHECK = "SLIDINGWINDOW.CHECK"
PEEK = "SLIDINGWINDOW.PEEK"

Arg = Union[str, int]
ClientT = TypeVar("ClientT")


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
) -> list[Arg]:
    """The argument vector; checks types here so a typo fails before any I/O."""
    for name, value in (("limit", limit), ("window", window), ("cost", cost)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{name} must be an int, got {value!r}")
    args: list[Arg] = [command, key, limit, window]
    if now is not None:
        args.append(int(now))
    if cost != 1:
        args += ["COST", cost]
    if ms:
        args.append("MS")
    if details:
        args.append("DETAILS")
    return args


class LimiterBase(Generic[ClientT]):
    """The client, key naming and failure handling, common to both limiters.

    prefix: put before every client id to make the Redis key (`rate:<client_id>`).
    fail_open: allow requests while Redis is unavailable (default); False denies them.
    on_error: called with the exception on every such failure (e.g. to count them).
    warn_interval: seconds between two warnings about the outage (logged once, not per request).
    logger: where the warning goes (default: logging.getLogger("slidingwindow")).
    """

    def __init__(
        self,
        redis_client: ClientT,
        *,
        prefix: str = "rate:",
        fail_open: bool = True,
        on_error: Optional[ErrorHook] = None,
        warn_interval: float = 60.0,
        logger: Optional[logging.Logger] = None,
    ) -> None:
        self.redis = redis_client
        self.prefix = prefix
        self.failure = FailurePolicy(fail_open, on_error, warn_interval, logger)

    @property
    def fail_open(self) -> bool:
        return self.failure.fail_open

    def key(self, client_id: str) -> str:
        # One Redis key per identity: the module keeps both windows' counts in it.
        return f"{self.prefix}{client_id}"
