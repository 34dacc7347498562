"""The servers the repository's tests, examples and benchmarks run on (see README.md)."""

from .cluster import RedisClusterProcs
from .kinds import ALL_KINDS, DEFAULT_KIND, KINDS, LIBRARY_KINDS, Kind
from .paths import MODULE, REPO
from .ports import cluster_port, free_port, port_is_free
from .server import RedisServer
from .waiting import wait_until

__all__ = [
    "ALL_KINDS",
    "LIBRARY_KINDS",
    "DEFAULT_KIND",
    "KINDS",
    "Kind",
    "MODULE",
    "REPO",
    "RedisClusterProcs",
    "RedisServer",
    "cluster_port",
    "free_port",
    "port_is_free",
    "wait_until",
]
