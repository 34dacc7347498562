"""Free loopback ports."""

from __future__ import annotations

import random
import socket


def port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cluster_port() -> int:
    """A free port p whose cluster bus port p + 10000 is free too, below the kernel's
    ephemeral range (32768+): a server stopped and restarted on it by a test is less
    likely to find it taken by a port-0 bind elsewhere on this shared machine meanwhile."""
    for _ in range(1000):
        p = random.randint(20000, 32767)
        if port_is_free(p) and port_is_free(p + 10000):
            return p
    raise RuntimeError("no free port pair for a cluster node")
