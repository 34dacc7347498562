"""ACL, on real servers: the README's least-privilege lines run every call of the sync and
asyncio limiters and the `limits` storage through the Functions library (each server
without the module, and Redis 6.2 by EVALSHA), and a call refused by ACL raises
MissingPermissionError naming the missing commands and the line to fix, with no outage.
"""

from __future__ import annotations

import asyncio
import re
from typing import Any, Iterator

import pytest
import redis
import redis.asyncio
from slidingwindow_testing import ALL_KINDS, LIBRARY_KINDS, REPO, RedisServer

from slidingwindow import (
    AsyncSlidingWindowRateLimiter,
    MissingPermissionError,
    SlidingWindowRateLimiter,
    library,
)
from slidingwindow.core import permissions
from slidingwindow.core.backend import Mode
from slidingwindow.limits_storage import SlidingWindowRedisStorage

LIBRARY = list(LIBRARY_KINDS)  # redis7-managed ... valkey9-managed, redis62


def readme_lines(relative: str) -> list[str]:
    """The `ACL SETUSER` lines between the library-acl-lines markers of a README."""
    text = (REPO / relative).read_text()
    block = re.search(r"<!-- library-acl-lines.*?-->(.*?)<!-- /library-acl-lines -->", text, re.S)
    assert block is not None, f"{relative}: no library-acl-lines markers"
    return [line for line in block.group(1).splitlines() if line.startswith("ACL SETUSER ")]


def test_the_lines_are_the_readmes() -> None:
    """The lines the errors quote are the READMEs' (which tests/lua_acl.rs runs)."""
    lines = [permissions.LIBRARY_LINE, permissions.LIBRARY_LINE_62, permissions.OPERATOR_LINE]
    assert readme_lines("README.md") == lines
    assert readme_lines("lua/README.md") == lines
    entry = {"fcall", "fcall_ro", "evalsha", "eval"}
    for line, commands in [(permissions.LIBRARY_LINE, permissions.LIBRARY_COMMANDS),
                           (permissions.LIBRARY_LINE_62, permissions.LIBRARY_COMMANDS_62)]:
        granted = [w[1:] for w in line.split() if w.startswith("+")]
        assert tuple(c for c in granted if c not in entry) == commands


@pytest.fixture(params=LIBRARY, ids=LIBRARY)
def library_server(request: pytest.FixtureRequest) -> Iterator[RedisServer]:
    """A server of its own without the module, the library loaded by the operator's line
    (nothing to load on 6.2: the limiter sends the body by EVAL after NOSCRIPT)."""
    server = RedisServer(kind=ALL_KINDS[request.param]).start()
    try:
        if server.kind.name != "redis62":
            with redis.Redis(port=server.port) as admin:
                user, password = setuser(admin, permissions.OPERATOR_LINE)
            with redis.Redis(port=server.port, username=user, password=password) as operator:
                assert library.load(operator) == [f"server: library {library.VERSION} loaded"]
        yield server
    finally:
        server.cleanup()


def six(server: RedisServer) -> bool:
    return server.kind.name == "redis62"


def setuser(admin: redis.Redis, line: str, user: str = "", drop: tuple[str, ...] = ()) -> tuple[str, str]:
    """Runs an `ACL SETUSER` line (as `user`, without the rules in `drop`); returns the
    user and password."""
    words = line.split()
    assert words[:2] == ["ACL", "SETUSER"]
    if user:
        words[2] = user
        words.insert(3, "reset")
    rules = [w for w in words[3:] if w not in drop]
    admin.execute_command("ACL", "SETUSER", words[2], *rules)  # type: ignore[no-untyped-call]
    password = next(w[1:] for w in words if w.startswith(">"))
    return words[2], password


def app_line(server: RedisServer) -> str:
    return permissions.LIBRARY_LINE_62 if six(server) else permissions.LIBRARY_LINE


def refused(admin: redis.Redis, user: str) -> list[str]:
    """ACL LOG's refusals of `user`, without redis-py's CLIENT SETINFO on connect (logged
    as `client` on 6.2)."""
    log: list[dict[bytes, Any]] = admin.execute_command("ACL", "LOG")  # type: ignore[no-untyped-call]
    return [e[b"object"].decode() for e in log
            if e[b"username"].decode() == user
            and e[b"object"] not in (b"client|setinfo", b"client")]


def test_the_application_line_runs_every_call(library_server: RedisServer) -> None:
    admin = library_server.r
    user, password = setuser(admin, app_line(library_server))
    app = redis.Redis(port=library_server.port, username=user, password=password)
    errors: list[BaseException] = []
    limiter = SlidingWindowRateLimiter(app, on_error=errors.append)
    assert limiter.is_allowed("clock", 3, 60) == (True, 1)  # the server's clock: TIME
    assert limiter.backend.mode is (Mode.EVAL if six(library_server) else Mode.FUNCTION)
    assert limiter.check("a", 3, 60, now=1000).count == 1
    assert limiter.check("a", 3, 60, now=1000, cost=2).count == 3
    denied = limiter.check("a", 3, 60, now=1001)
    assert not denied.allowed and denied.retry_after > 0
    assert limiter.peek("a", 3, 60, now=1001).remaining == 0
    assert limiter.refund("a", 3, 60, now=1001, cost=2).allowed  # 2 of 3 given back
    assert limiter.peek("a", 3, 60, now=1001).count == 2
    counts = limiter.counts("a", 60, now=1001)
    assert (counts.previous, counts.current, counts.elapsed) == (0, 1, 41)
    assert limiter.check("ms", 2, 1000, ms=True).allowed
    several = limiter.check_limits("multi", [(5, 60), (20, 3600), (50, 86400)], now=2000)
    assert several.allowed and [r.count for r in several.limits] == [1, 1, 1]
    # One of them alone: the others are kept, with the key's expiry read back.
    assert limiter.check("multi", 5, 60, now=2001).count == 2
    assert limiter.peek_limits("multi", [(5, 60), (20, 3600)], now=2002).allowed
    assert limiter.refund_limits("multi", [(5, 60), (20, 3600)], now=2002).allowed
    # asyncio and the limits storage (which sends COUNTS) through the same grants.
    async def run_async() -> bool:
        client = redis.asyncio.Redis(port=library_server.port, username=user, password=password)
        try:
            alimiter = AsyncSlidingWindowRateLimiter(client)
            return (await alimiter.check("async", 5, 60, cost=2)).count == 2
        finally:
            await client.aclose()
    assert asyncio.run(run_async())
    storage = SlidingWindowRedisStorage(
        f"slidingwindow+redis://{user}:{password}@127.0.0.1:{library_server.port}/0",
        key_prefix="rate")
    assert storage.acquire_sliding_window_entry("s", 5, 60, 1)
    assert storage.get_sliding_window("s", 60)[2] == 1
    assert errors == [] and not limiter.circuit.down
    assert refused(admin, user) == []
    app.close()


def test_only_the_functions_names_every_missing_command(library_server: RedisServer) -> None:
    admin = library_server.r
    line = app_line(library_server)
    whole = permissions.LIBRARY_COMMANDS_62 if six(library_server) else permissions.LIBRARY_COMMANDS
    user, password = setuser(admin, line, "bare", tuple(f"+{c}" for c in whole))
    app = redis.Redis(port=library_server.port, username=user, password=password)
    errors: list[BaseException] = []
    limiter = SlidingWindowRateLimiter(app, on_error=errors.append)
    for call in (lambda: limiter.check("b", 5, 60), lambda: limiter.peek("b", 5, 60),
                 lambda: limiter.counts("b", 60),
                 lambda: limiter.check_limits("b", [(5, 60), (10, 3600)], now=100),
                 lambda: limiter.refund("b", 5, 60)):
        with pytest.raises(MissingPermissionError) as caught:
            call()
        assert caught.value.commands == list(whole)
        text = str(caught.value)
        assert "+" + " +".join(whole) in text and line in text, text
        assert isinstance(caught.value, redis.exceptions.NoPermissionError)
    # Redis 7.2+ and Valkey name the user in their error: the line to fix is for it.
    if library_server.kind.name in ("redis8-managed", "valkey8-managed", "valkey9-managed"):
        assert "ACL SETUSER bare +time" in text
    storage = SlidingWindowRedisStorage(
        f"slidingwindow+redis://{user}:{password}@127.0.0.1:{library_server.port}/0",
        key_prefix="rate")
    with pytest.raises(MissingPermissionError) as caught:
        storage.get_sliding_window("s", 60)
    assert caught.value.commands == list(whole)
    # No outage: nothing failed open, the circuit stayed closed.
    assert errors == [] and not limiter.circuit.down
    app.close()


def test_one_missing_command_is_named(library_server: RedisServer) -> None:
    admin = library_server.r
    line = app_line(library_server)
    user, password = setuser(admin, line, "notime", ("+time",))
    app = redis.Redis(port=library_server.port, username=user, password=password)
    limiter = SlidingWindowRateLimiter(app)
    with pytest.raises(MissingPermissionError) as caught:
        limiter.check("t", 5, 60)
    # Redis 6.2 cannot tell: the whole list; 7.0+ asks slidingwindow_permissions.
    want = list(permissions.LIBRARY_COMMANDS_62) if six(library_server) else ["time"]
    assert caught.value.commands == want
    assert "+" + " +".join(want) in str(caught.value)

    async def run_async() -> None:
        client = redis.asyncio.Redis(port=library_server.port, username=user, password=password)
        try:
            with pytest.raises(MissingPermissionError) as caught:
                await AsyncSlidingWindowRateLimiter(client).check("t", 5, 60)
            assert caught.value.commands == want
        finally:
            await client.aclose()
    asyncio.run(run_async())
    # A read on the caller's `now` needs no TIME (a write does: the key's expiry).
    assert limiter.peek("t", 5, 60, now=100).allowed
    app.close()


def test_the_call_itself_or_its_key_refused(library_server: RedisServer) -> None:
    admin = library_server.r
    line = app_line(library_server)
    entry = "+evalsha" if six(library_server) else "+fcall"
    user, password = setuser(admin, line, "nocall", (entry,))
    app = redis.Redis(port=library_server.port, username=user, password=password)
    limiter = SlidingWindowRateLimiter(app)
    with pytest.raises(MissingPermissionError) as caught:
        limiter.check("c", 5, 60)
    assert caught.value.commands == [entry[1:]]
    assert f"+{entry[1:]}" in str(caught.value)
    # The refused reply's code, as redis-py 8 keeps it on its errors (None before 8).
    assert caught.value.status_code in ("NOPERM", None)
    # The key outside the user's patterns: the prefix is named, no command.
    full, password = setuser(admin, line)
    other = SlidingWindowRateLimiter(
        redis.Redis(port=library_server.port, username=full, password=password), prefix="x:")
    with pytest.raises(MissingPermissionError) as caught:
        other.check("c", 5, 60)
    assert caught.value.commands == [] and "~<prefix>*" in str(caught.value)
    app.close()


def test_without_the_diagnostic_the_whole_list() -> None:
    """A loaded library without slidingwindow_permissions (older, kept because this user
    may not replace it): the error names the whole list."""
    with RedisServer(kind=ALL_KINDS["redis7-managed"]).start() as server:
        admin = server.r
        old = (library.CODE.replace(f"local VERSION = '{library.VERSION}'", "local VERSION = '99.0'")
               .replace("  { 'slidingwindow_permissions', permissions, { 'no-writes' } },\n", ""))
        assert old.count("slidingwindow_permissions', permissions") == 0
        admin.execute_command("FUNCTION", "LOAD", "REPLACE", old)  # type: ignore[no-untyped-call]
        user, password = setuser(admin, permissions.LIBRARY_LINE, "old", ("+time",))
        app = redis.Redis(port=server.port, username=user, password=password)
        with pytest.raises(MissingPermissionError) as caught:
            SlidingWindowRateLimiter(app).check("o", 5, 60)
        assert caught.value.commands == list(permissions.LIBRARY_COMMANDS)
        app.close()


def test_the_module_command_refused() -> None:
    """On a server with the module, the client calls the module: a user granted only the
    library's line is told which module command it lacks."""
    with RedisServer(kind=ALL_KINDS["redis7"]).start() as server:
        user, password = setuser(server.r, permissions.LIBRARY_LINE)
        app = redis.Redis(port=server.port, username=user, password=password)
        with pytest.raises(MissingPermissionError) as caught:
            SlidingWindowRateLimiter(app).check("m", 5, 60)
        assert caught.value.commands == ["slidingwindow.check"]
        assert "ACL SETUSER <user> +slidingwindow.check" in str(caught.value)
        # The library on the same server, chosen: the line works.
        library.load(server.r)
        assert SlidingWindowRateLimiter(app, backend="library").check("m", 5, 60).allowed
        app.close()
