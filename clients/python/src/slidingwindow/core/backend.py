"""Which server-side code answers a call: the module's commands or the Functions library.

    backend="auto"    (the default) the module when the server has it, else the library
    backend="module"  SLIDINGWINDOW.* only (an error where the module is not loaded)
    backend="library" the library only (lua/slidingwindow.lua, shipped in this package);
                      "lua" is its old name (deprecated, still accepted)

The library answers what the module answers, with the same key bytes, so the replies are
read by the same code. It is called with `FCALL`/`FCALL_RO` (Redis 7.0+, Valkey 7.2+), or
with `EVALSHA` (falling back to `EVAL` on `NOSCRIPT`) where the server has no FUNCTION
(Redis 6.2).

Detection runs once per limiter, in its first call, and its answer is kept: after that a
call is one command, as before. With "auto" the first call is the module's command
itself, so a server with the module pays nothing for detection. Looking for the library
reads its `slidingwindow_version` (on every primary of a cluster) and replaces one older
than this package's; a newer one is kept. Only these errors make the limiter look again,
inside the same call, which then goes through:
- with "auto", the module's command is unknown (a failover or restart onto a server
  without it);
- `Function not found` (FUNCTION FLUSH; a failover or restart onto a node without it).
`NOSCRIPT` (SCRIPT FLUSH, restart) is answered by sending the body with `EVAL` once.
None of them is an outage: the circuit never sees them.

A library that is missing is loaded with `FUNCTION LOAD REPLACE` (on every primary of a
cluster). A user who may not (NOPERM) gets `LibraryNotLoadedError`, which names the
command the operator runs.

A call refused by ACL (a command inside the library, the call itself, or its key) raises
`MissingPermissionError` (permissions.py), no outage either: on the library's FCALL path
the backend first asks `FCALL_RO slidingwindow_permissions 1 <key>` which commands are
missing (the whole list if that fails too); on EVALSHA (Redis 6.2) the whole list.

The steps of a call are a generator of `Send`s, driven by `run_sync` or `run_async`, so
the sync and asyncio limiters (and the `limits` storages) share every decision.
"""

from __future__ import annotations

import enum
import logging
import warnings
from dataclasses import dataclass
from typing import Any, Generator, Optional, Sequence

import redis
import redis.asyncio.cluster
import redis.cluster
from redis.exceptions import NoPermissionError, NoScriptError, RedisError, ResponseError

from .. import library
from . import permissions
from .commands import CHECK, FUNCTIONS

LOGGER = logging.getLogger("slidingwindow")

BACKENDS = ("auto", "module", "library")
OLD_NAMES = {"lua": "library"}  # deprecated spellings of BACKENDS


class Mode(enum.Enum):
    """What a limiter sends, once decided."""

    MODULE = "module"  # SLIDINGWINDOW.CHECK ...
    FUNCTION = "function"  # FCALL slidingwindow_check 1 key ...
    EVAL = "eval"  # EVALSHA <sha> 1 key slidingwindow_check ... (EVAL on NOSCRIPT)


class LibraryNotLoadedError(ResponseError):
    """The server has neither the module nor the library, and this user may not load the
    library. A configuration error (raised, never failed open): an operator loads it."""


@dataclass(frozen=True)
class Send:
    """One command to send. target: None (the client's own routing), "key" (the node
    owning `key`, in a cluster) or "primaries" (every primary; the reply is then a list,
    one per node)."""

    args: Sequence[Any]
    target: Optional[str] = None
    key: Optional[str] = None


Steps = Generator[Send, Any, Any]


def _message(exc: BaseException) -> str:
    return str(exc).lower()


def _unknown_command(exc: BaseException, name: str) -> bool:
    """`ERR unknown command 'NAME'` (Redis 6.2 quotes it with backticks), or redis-py's
    cluster client refusing a command the cluster's COMMAND table lacks."""
    text = _message(exc)
    return name.lower() in text and (
        "unknown command" in text or "command doesn't exist" in text)


def _function_missing(exc: BaseException) -> bool:
    return "function not found" in _message(exc)


def _noscript(exc: BaseException) -> bool:
    # redis-py turns `NOSCRIPT ...` into NoScriptError, keeping only the text after it.
    return isinstance(exc, NoScriptError) or str(exc).startswith("NOSCRIPT")


def not_loaded_message(cause: BaseException) -> str:
    return (
        f"the slidingwindow module is not on this server and the slidingwindow library "
        f"{library.VERSION} is not loaded, and this user may not load it ({cause}). "
        f"An operator loads it once, on every primary: {library.LOAD_COMMAND} "
        f"(lua/slidingwindow.lua of the repository, also shipped in the Python package), "
        f"or {library.LOAD_HELPER}"
    )


def older_kept_message(versions: Sequence[Any], cause: BaseException) -> str:
    loaded = ", ".join(library.text(v) for v in versions)
    return (
        f"rate limiter: the slidingwindow library on the server ({loaded}) is older than "
        f"this client's ({library.VERSION}) and this user may not replace it ({cause}): "
        f"using it as it is. An operator loads the new one on every primary: "
        f"{library.LOAD_COMMAND}, or {library.LOAD_HELPER}"
    )


class Backend:
    """The decision of one limiter or storage: `choice` as given, `mode` once known."""

    def __init__(self, choice: str = "auto") -> None:
        if choice in OLD_NAMES:
            warnings.warn(f"backend={choice!r} is deprecated: use backend={OLD_NAMES[choice]!r}",
                          DeprecationWarning, stacklevel=3)
            choice = OLD_NAMES[choice]
        if choice not in BACKENDS:
            raise ValueError(f"backend={choice!r}: use one of {', '.join(map(repr, BACKENDS))}")
        self.choice = choice
        # "auto" tries the module first: its first call is the call itself.
        self.mode: Optional[Mode] = None if choice == "library" else Mode.MODULE
        self.detections = 0  # times the library was looked for (for tests and logs)
        self.loads = 0  # times this limiter loaded the library

    def wire(self, args: Sequence[Any], mode: Optional[Mode] = None) -> list[Any]:
        """The command that carries `args` (a module command) in `mode` (default: the
        current one; the module's while undecided)."""
        mode = mode or self.mode or Mode.MODULE
        if mode is Mode.MODULE:
            return list(args)
        name, readonly = FUNCTIONS[str(args[0]).upper()]
        key, rest = args[1], list(args[2:])
        if mode is Mode.FUNCTION:
            return ["FCALL_RO" if readonly else "FCALL", name, 1, key, *rest]
        return ["EVALSHA", library.SHA, 1, key, name, *rest]

    def _send(self, args: Sequence[Any], mode: Mode) -> Send:
        # FCALL goes to the key's node explicitly: redis-py's cluster would otherwise ask a
        # node for FCALL's keys (COMMAND GETKEYS) on every call. EVALSHA it parses itself.
        target = "key" if mode is Mode.FUNCTION else None
        return Send(self.wire(args, mode), target, str(args[1]) if target else None)

    def steps(self, args: Sequence[Any]) -> Steps:
        """The steps of one call of `args` (a module command); returns its reply."""
        mode = self.mode
        if mode is None:
            mode = yield from self._find_library()
        for attempt in (1, 2):
            try:
                return (yield from self._call(args, mode))
            except RedisError as exc:
                refused = permissions.refusal(exc)
                if refused is not None:
                    raise (yield from self._refused(exc, refused, args, mode)) from exc
                if attempt == 2 or not self._gone(exc, mode):
                    raise
            # The module or the library is not there (any more): look again, call again.
            mode = yield from self._find_library()
        raise AssertionError("unreachable")

    def _call(self, args: Sequence[Any], mode: Mode) -> Steps:
        try:
            return (yield self._send(args, mode))
        except RedisError as exc:
            if mode is Mode.EVAL and _noscript(exc):
                name = FUNCTIONS[str(args[0]).upper()][0]
                return (yield Send(["EVAL", library.BODY, 1, args[1], name, *args[2:]]))
            raise

    def _refused(self, exc: RedisError, refused: str, args: Sequence[Any],
                 mode: Mode) -> Generator[Send, Any, permissions.MissingPermissionError]:
        """The MissingPermissionError for a call refused by ACL; on the FCALL path, with
        what slidingwindow_permissions says is missing (not asked for a refused key)."""
        listed = None
        if mode is Mode.FUNCTION and refused != "key":
            key = args[1]
            try:
                listed = yield Send(["FCALL_RO", "slidingwindow_permissions", 1, key], "key",
                                    str(key))
            except RedisError:
                listed = None  # an older library, FCALL_RO refused, ...: the whole list
        backend = {Mode.MODULE: "module", Mode.FUNCTION: "library", Mode.EVAL: "eval"}[mode]
        return permissions.error(exc, refused, backend, args[1], listed)

    def _gone(self, exc: RedisError, mode: Mode) -> bool:
        if mode is Mode.MODULE:
            return self.choice == "auto" and _unknown_command(exc, "slidingwindow.")
        if mode is Mode.FUNCTION:
            return _function_missing(exc) or _unknown_command(exc, "fcall")
        return False

    def _find_library(self) -> Steps:
        """Uses the loaded library, replaces an older one, loads a missing one, or falls
        back to EVAL where the server has no FUNCTION. Returns the mode."""
        self.detections += 1
        self.mode = None
        try:
            versions = yield Send(["FCALL_RO", "slidingwindow_version", 0], "primaries")
        except RedisError as exc:  # a reply, or redis-py's cluster refusing FCALL_RO
            if _unknown_command(exc, "fcall_ro"):
                self.mode = Mode.EVAL  # Redis 6.2: no FUNCTION
                return self.mode
            refused = permissions.refusal(exc)
            if refused is not None:  # FCALL_RO itself
                raise permissions.error(exc, refused, "library", None) from exc
            if not _function_missing(exc):
                raise
            versions = None
        if versions is None or any(library.is_older(v) for v in versions):
            try:
                yield Send(["FUNCTION", "LOAD", "REPLACE", library.CODE], "primaries")
            except NoPermissionError as exc:
                if versions is None:
                    raise LibraryNotLoadedError(not_loaded_message(exc)) from exc
                # Every primary has a library, only older: it answers every call this
                # client sends, so it is used as it is rather than stopping the app
                # mid-upgrade.
                LOGGER.warning(older_kept_message(versions, exc))
                self.mode = Mode.FUNCTION
                return self.mode
            except RedisError as exc:
                if not _unknown_command(exc, "function"):
                    raise
                self.mode = Mode.EVAL  # FUNCTION refused by name: EVAL still works
                return self.mode
            self.loads += 1
        self.mode = Mode.FUNCTION
        return self.mode


def _as_list(reply: Any) -> list[Any]:
    """One reply per node: redis-py answers a dict {node name: reply} for several nodes."""
    return list(reply.values()) if isinstance(reply, dict) else [reply]


def send_sync(client: Any, send: Send) -> Any:
    if isinstance(client, redis.cluster.RedisCluster):
        cluster: Any = client  # redis-py's sync cluster methods are untyped
        if send.target == "key":
            node = cluster.get_node_from_key(send.key)
            return cluster.execute_command(*send.args, target_nodes=node)
        if send.target == "primaries":
            return _as_list(cluster.execute_command(
                *send.args, target_nodes=cluster.get_primaries()))
    reply = client.execute_command(*send.args)
    return [reply] if send.target == "primaries" else reply


async def send_async(client: Any, send: Send) -> Any:
    if isinstance(client, redis.asyncio.cluster.RedisCluster):
        if send.target == "key":
            node = client.get_node_from_key(str(send.key))
            return await client.execute_command(*send.args, target_nodes=node)
        if send.target == "primaries":
            # A list of nodes: redis.asyncio's cluster routes FUNCTION by its own policy
            # (and FCALL_RO with no key to one random node) when given the PRIMARIES flag.
            return _as_list(await client.execute_command(
                *send.args, target_nodes=client.get_primaries()))
    reply = await client.execute_command(*send.args)
    return [reply] if send.target == "primaries" else reply


def run_sync(client: Any, steps: Steps) -> Any:
    """Drives `steps` through a redis-py style sync client; returns the last reply."""
    send = next(steps)
    while True:
        try:
            reply = send_sync(client, send)
        except Exception as exc:
            try:
                send = steps.throw(exc)
            except StopIteration as stop:
                return stop.value
        else:
            try:
                send = steps.send(reply)
            except StopIteration as stop:
                return stop.value


async def run_async(client: Any, steps: Steps) -> Any:
    """`run_sync` for asyncio clients."""
    send = next(steps)
    while True:
        try:
            reply = await send_async(client, send)
        except Exception as exc:
            try:
                send = steps.throw(exc)
            except StopIteration as stop:
                return stop.value
        else:
            try:
                send = steps.send(reply)
            except StopIteration as stop:
                return stop.value
