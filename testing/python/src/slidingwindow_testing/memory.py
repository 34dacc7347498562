"""Memory readings the benchmarks take: after a flush, and once the server has settled."""

from __future__ import annotations

import time
from typing import Any


def wait_lazyfree(r: Any) -> None:
    """Returns once the server has freed what a flush left: Valkey frees a flushed
    database in the background even with SYNC."""
    deadline = time.time() + 120
    while int(r.info("memory").get("lazyfree_pending_objects", 0)) != 0:
        if time.time() > deadline:
            raise RuntimeError("lazyfree_pending_objects did not reach 0")
        time.sleep(0.05)


def settled_used_memory(r: Any) -> int:
    """used_memory once two reads 200 ms apart agree within 0.05% (rehash done)."""
    prev = int(r.info("memory")["used_memory"])
    for _ in range(25):
        time.sleep(0.2)
        cur = int(r.info("memory")["used_memory"])
        if abs(cur - prev) <= prev * 0.0005:
            return cur
        prev = cur
    return prev
