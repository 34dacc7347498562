"""Polling for a condition a test waits on."""

from __future__ import annotations

import time
from typing import Callable


def wait_until(what: str, predicate: Callable[[], bool], timeout: float = 20.0) -> None:
    """Polls `predicate` every 20 ms until it holds; fails naming `what` after `timeout`."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.02)
