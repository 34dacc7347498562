"""The Functions library (lua/slidingwindow.lua), shipped in this package, and its loader.

The package holds the repository's one file (a link to lua/slidingwindow.lua, copied
into wheels and sdists by the build): `CODE` is what `FUNCTION LOAD` takes, `BODY` the
same without its `#!lua` line, which `EVAL`/`EVALSHA` take (Redis 6.2), `SHA` its sha1,
`VERSION` the library's `slidingwindow_version`.

Operators whose application user may not run `FUNCTION LOAD` load it once (on every
primary of a cluster) with

    python3 -m slidingwindow.library redis://admin:secret@host:6379 [--cluster]

or `redis-cli FUNCTION LOAD REPLACE "$(cat lua/slidingwindow.lua)"` on each primary. On
Redis 6.2 (no FUNCTION) nothing needs loading: the clients send the same code with
EVALSHA (EVAL after NOSCRIPT), and the helper says so and exits 0.

A package, so that `python3 -m slidingwindow.library` runs its `__main__` without running
this module a second time (runpy's RuntimeWarning when `slidingwindow` has already
imported `slidingwindow.library`, as it does through `backend`). The Lua file stays at
`slidingwindow/slidingwindow.lua`.
"""

from __future__ import annotations

import argparse
import hashlib
import re
import sys
from importlib import resources
from typing import Any, Optional

NAME = "slidingwindow"
CODE: str = resources.files("slidingwindow").joinpath("slidingwindow.lua").read_text("utf-8")
BODY: str = CODE.split("\n", 1)[1]
SHA: str = hashlib.sha1(BODY.encode()).hexdigest()


def _version_of(code: str) -> str:
    found = re.search(r"^local VERSION = '([^']+)'$", code, re.M)
    if found is None:
        raise RuntimeError("slidingwindow.lua has no `local VERSION = '...'` line")
    return found.group(1)


VERSION: str = _version_of(CODE)

# What an operator runs when the application's user may not load the library itself.
LOAD_COMMAND = 'redis-cli FUNCTION LOAD REPLACE "$(cat lua/slidingwindow.lua)"'
LOAD_HELPER = "python3 -m slidingwindow.library <redis-url> [--cluster]"


def version_tuple(version: Any) -> tuple[int, ...]:
    """'0.2.0' (str or bytes) -> (0, 2, 0); anything unreadable sorts first (is replaced)."""
    text = version.decode() if isinstance(version, bytes) else str(version)
    try:
        return tuple(int(part) for part in text.split("."))
    except ValueError:
        return ()


def is_older(version: Any) -> bool:
    """Whether a loaded library's version is older than the shipped one."""
    return version_tuple(version) < version_tuple(VERSION)


def load(client: Any, *, replace_newer: bool = False) -> list[str]:
    """Loads the library with `FUNCTION LOAD REPLACE` on the server, or on every primary
    of a redis.cluster.RedisCluster, unless the loaded one is as new (or newer, unless
    `replace_newer`). Returns one line per node saying what was done."""
    import redis
    import redis.cluster

    if isinstance(client, redis.cluster.RedisCluster):
        cluster: Any = client  # redis-py's sync cluster methods are untyped
        nodes: list[Any] = cluster.get_primaries()
    else:
        nodes = [None]
    lines = []
    for node in nodes:
        options = {} if node is None else {"target_nodes": node}
        where = "server" if node is None else node.name
        loaded: Optional[Any]
        try:
            loaded = client.execute_command("FCALL_RO", "slidingwindow_version", 0, **options)
        except redis.ResponseError as exc:
            if _no_functions(exc):
                lines.append(f"{where}: {NO_FUNCTIONS}")
                continue
            loaded = None  # not loaded
        if loaded is not None and not is_older(loaded) and (
                not replace_newer or version_tuple(loaded) == version_tuple(VERSION)):
            lines.append(f"{where}: library {text(loaded)} already loaded")
            continue
        client.execute_command("FUNCTION", "LOAD", "REPLACE", CODE, **options)
        lines.append(f"{where}: library {VERSION} loaded"
                     + ("" if loaded is None else f" (was {text(loaded)})"))
    return lines


NO_FUNCTIONS = ("this server has no FUNCTION (Redis 6.2): nothing needs loading; the clients "
                "send the library's code with EVALSHA (EVAL after NOSCRIPT)")


def _no_functions(exc: Exception) -> bool:
    """Redis 6.2's answer to FCALL_RO: `unknown command 'FCALL_RO'`."""
    text = str(exc).lower()
    return "unknown command" in text and "fcall_ro" in text


def text(value: Any) -> str:
    """A version as the server answered it (bytes or str), as text."""
    return value.decode() if isinstance(value, bytes) else str(value)


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python3 -m slidingwindow.library",
        description="Load the slidingwindow Functions library (FUNCTION LOAD REPLACE) on a "
                    "server, or on every primary of a cluster.")
    parser.add_argument("url", help="redis://[user:password@]host:port[/db] (rediss:// too)")
    parser.add_argument("--cluster", action="store_true", help="a Redis Cluster: every primary")
    parser.add_argument("--replace-newer", action="store_true",
                        help="also replace a newer library than this package's")
    args = parser.parse_args(argv)
    import redis
    import redis.cluster

    client: Any = (redis.cluster.RedisCluster.from_url(args.url) if args.cluster
                   else redis.Redis.from_url(args.url))
    try:
        for line in load(client, replace_newer=args.replace_newer):
            print(line)
    except redis.RedisError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    finally:
        client.close()
    return 0

