"""A Redis Cluster of three masters (no replicas) with the module."""

from __future__ import annotations

import subprocess
import time

import redis

from .kinds import DEFAULT_KIND, Kind
from .ports import cluster_port
from .server import RedisServer


class RedisClusterProcs:
    """Three masters joined with the kind's cli; `cleanup()` stops them all."""

    def __init__(self, kind: Kind = DEFAULT_KIND, node_timeout_ms: int = 2000) -> None:
        self.kind = kind
        self.node_timeout_ms = node_timeout_ms
        self.nodes: list[RedisServer] = []

    @property
    def url(self) -> str:
        return self.nodes[0].url

    @property
    def addresses(self) -> str:
        """host:port,host:port,... of every node."""
        return ",".join(f"127.0.0.1:{n.port}" for n in self.nodes)

    def start(self) -> RedisClusterProcs:
        try:
            for _ in range(3):
                node = RedisServer(cluster_port(), kind=self.kind, extra=(
                    "--cluster-enabled", "yes",
                    "--cluster-node-timeout", str(self.node_timeout_ms),
                    "--cluster-config-file", "nodes.conf",
                ))
                self.nodes.append(node)
                node.start()
            subprocess.run(
                [self.kind.cli, "--cluster", "create",
                 *(f"127.0.0.1:{n.port}" for n in self.nodes),
                 "--cluster-replicas", "0", "--cluster-yes"],
                check=True, capture_output=True, timeout=30,
            )
            self.wait_ok()
        except BaseException:
            self.cleanup()
            raise
        return self

    def wait_ok(self, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        clients = [redis.Redis(port=n.port, decode_responses=True, socket_timeout=2)
                   for n in self.nodes]
        try:
            while True:
                infos = [c.execute_command("CLUSTER", "INFO")  # type: ignore[no-untyped-call]
                         for c in clients]
                if all("cluster_state:ok" in i for i in infos):
                    return
                if time.monotonic() > deadline:
                    raise RuntimeError(f"cluster not ok: {infos}")
                time.sleep(0.05)
        finally:
            for c in clients:
                c.close()

    def flush(self) -> None:
        """Empties every node (for a test that lists the keys it wrote)."""
        for node in self.nodes:
            with redis.Redis(port=node.port) as client:
                client.flushall()

    def cleanup(self) -> None:
        for node in self.nodes:
            node.cleanup()
