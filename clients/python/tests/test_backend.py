"""backend= "auto" / "module" / "library" ("lua": its old name): which code answers,
detected once, found again.

On every kind (the module's servers and LIBRARY_KINDS): the mode auto picks, what each
later call sends (one command, nothing else), the library loaded again after FUNCTION
FLUSH or a restart (a failover onto a node without it), an older library replaced,
SCRIPT FLUSH on Redis 6.2's EVALSHA path, a user who may not load it, a cluster; none of
it seen by the outage circuit.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from typing import Any

import pytest
import redis
import redis.asyncio

from slidingwindow import (
    AsyncSlidingWindowRateLimiter,
    SlidingWindowRateLimiter,
    connect,
    connect_async,
)
from slidingwindow import library
from slidingwindow.core.backend import LibraryNotLoadedError, Mode
from slidingwindow_testing import Kind, RedisClusterProcs, RedisServer


def has_module(kind: Kind) -> bool:
    return kind.module


def has_functions(kind: Kind) -> bool:
    return kind.name != "redis62"


def expected_mode(kind: Kind) -> Mode:
    if has_module(kind):
        return Mode.MODULE
    return Mode.FUNCTION if has_functions(kind) else Mode.EVAL


class Recording:
    """A redis.Redis that keeps the name of every command it sends."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client
        self.sent: list[str] = []

    def execute_command(self, *args: Any, **options: Any) -> Any:
        self.sent.append(str(args[0]))
        return self.client.execute_command(*args, **options)  # type: ignore[no-untyped-call]


def fresh(r: redis.Redis, kind: Kind) -> None:
    """No library on the server (SCRIPT FLUSH on 6.2)."""
    if has_functions(kind):
        r.execute_command("FUNCTION", "FLUSH")  # type: ignore[no-untyped-call]
    r.script_flush()


def test_auto_detects_once_then_one_command_per_call(
        r: redis.Redis, server_kind: Kind, prefix: str) -> None:
    fresh(r, server_kind)
    client = Recording(r)
    errors: list[BaseException] = []
    limiter = SlidingWindowRateLimiter(client, prefix=prefix, on_error=errors.append)
    assert limiter.is_allowed("a", 2, 60) == (True, 1)
    mode = expected_mode(server_kind)
    assert limiter.backend.mode is mode
    first = {
        Mode.MODULE: ["SLIDINGWINDOW.CHECK"],
        Mode.FUNCTION: ["SLIDINGWINDOW.CHECK", "FCALL_RO", "FUNCTION", "FCALL"],
        Mode.EVAL: ["SLIDINGWINDOW.CHECK", "FCALL_RO", "EVALSHA", "EVAL"],
    }[mode]
    assert client.sent == first
    client.sent.clear()
    assert limiter.is_allowed("a", 2, 60) == (True, 2)
    assert limiter.peek("a", 2, 60).remaining == 0
    assert limiter.refund("a", 2, 60).allowed  # one back: the next is the 2nd again
    assert limiter.is_allowed("a", 2, 60) == (True, 2)
    per_call = {Mode.MODULE: ["SLIDINGWINDOW.CHECK", "SLIDINGWINDOW.PEEK",
                              "SLIDINGWINDOW.REFUND", "SLIDINGWINDOW.CHECK"],
                Mode.FUNCTION: ["FCALL", "FCALL_RO", "FCALL", "FCALL"],
                Mode.EVAL: ["EVALSHA"] * 4}[mode]
    assert client.sent == per_call
    assert errors == [] and not limiter.circuit.down


def test_forced_backends(r: redis.Redis, server_kind: Kind, prefix: str) -> None:
    lua = SlidingWindowRateLimiter(r, prefix=prefix, backend="library")
    assert lua.check("k", 3, 60, now=500).remaining == 2
    assert lua.backend.mode is (Mode.FUNCTION if has_functions(server_kind) else Mode.EVAL)
    module = SlidingWindowRateLimiter(r, prefix=prefix, backend="module")
    if has_module(server_kind):  # the same key, counted on by the other
        assert module.check("k", 3, 60, now=500).remaining == 1
    else:
        with pytest.raises(redis.ResponseError, match="unknown command"):
            module.check("k", 3, 60, now=500)
        assert not module.circuit.down
    with pytest.raises(ValueError, match="backend='redis': use one of 'auto', 'module', 'library'"):
        SlidingWindowRateLimiter(r, backend="redis")


def test_lua_is_the_old_name_of_library(r: redis.Redis, server_kind: Kind, prefix: str) -> None:
    with pytest.warns(DeprecationWarning, match="backend='lua' is deprecated: use backend='library'"):
        old = SlidingWindowRateLimiter(r, prefix=prefix, backend="lua")
    assert old.backend.choice == "library"
    assert old.check("k", 3, 60, now=500).remaining == 2
    assert old.backend.mode is (Mode.FUNCTION if has_functions(server_kind) else Mode.EVAL)


def test_loaded_again_after_function_flush(
        r: redis.Redis, server_kind: Kind, prefix: str) -> None:
    if not has_functions(server_kind):
        pytest.skip("Redis 6.2 has no FUNCTION (SCRIPT FLUSH: the next test)")
    errors: list[BaseException] = []
    limiter = SlidingWindowRateLimiter(r, prefix=prefix, on_error=errors.append, backend="library")
    assert limiter.is_allowed("f", 5, 60) == (True, 1)
    r.execute_command("FUNCTION", "FLUSH")  # type: ignore[no-untyped-call]
    assert limiter.is_allowed("f", 5, 60) == (True, 2)  # the same call goes through
    assert limiter.backend.detections == 2
    assert r.fcall_ro("slidingwindow_version", 0) == library.VERSION.encode()
    assert errors == [] and not limiter.circuit.down


def test_script_flush_on_the_evalsha_path(
        r: redis.Redis, server_kind: Kind, prefix: str) -> None:
    limiter = SlidingWindowRateLimiter(r, prefix=prefix)
    if expected_mode(server_kind) is not Mode.EVAL:
        limiter = SlidingWindowRateLimiter(r, prefix=prefix, backend="library")
        limiter.backend.mode = Mode.EVAL  # the path a server without FUNCTION takes
    assert limiter.is_allowed("s", 5, 60) == (True, 1)
    r.script_flush()
    assert r.script_exists(library.SHA) == [False]
    assert limiter.is_allowed("s", 5, 60) == (True, 2)  # NOSCRIPT: EVAL with the body
    assert r.script_exists(library.SHA) == [True]  # so EVALSHA works again
    assert limiter.is_allowed("s", 5, 60) == (True, 3)
    assert limiter.backend.detections <= 1 and not limiter.circuit.down


def test_older_library_is_replaced(r: redis.Redis, server_kind: Kind, prefix: str) -> None:
    if not has_functions(server_kind):
        pytest.skip("Redis 6.2 has no FUNCTION: EVALSHA names the body by its sha1")
    old = library.CODE.replace(f"local VERSION = '{library.VERSION}'", "local VERSION = '0.0.1'")
    r.execute_command("FUNCTION", "LOAD", "REPLACE", old)  # type: ignore[no-untyped-call]
    assert r.fcall_ro("slidingwindow_version", 0) == b"0.0.1"
    limiter = SlidingWindowRateLimiter(r, prefix=prefix, backend="library")
    assert limiter.is_allowed("o", 5, 60) == (True, 1)
    assert r.fcall_ro("slidingwindow_version", 0) == library.VERSION.encode()
    assert limiter.backend.loads == 1
    # A newer one is kept (another client's, in a rolling deploy).
    newer = library.CODE.replace(f"local VERSION = '{library.VERSION}'", "local VERSION = '99.0'")
    r.execute_command("FUNCTION", "LOAD", "REPLACE", newer)  # type: ignore[no-untyped-call]
    other = SlidingWindowRateLimiter(r, prefix=prefix, backend="library")
    assert other.is_allowed("o", 5, 60) == (True, 2)
    assert other.backend.loads == 0
    assert r.fcall_ro("slidingwindow_version", 0) == b"99.0"
    r.execute_command("FUNCTION", "LOAD", "REPLACE", library.CODE)  # type: ignore[no-untyped-call]


def test_restart_without_it_is_no_outage(own_server: RedisServer, server_kind: Kind) -> None:
    """A restart loses the library (no persistence here): as a failover onto a node that
    never had it. The outage is one (the server was down); its end reloads the library."""
    errors: list[BaseException] = []
    limiter = SlidingWindowRateLimiter(connect(own_server.url), on_error=errors.append,
                                       probe_interval=0.05)
    assert limiter.is_allowed("x", 5, 60) == (True, 1)
    own_server.stop()
    assert limiter.is_allowed("x", 5, 60) == (True, 0)  # fail-open while it is down
    assert limiter.circuit.down and len(errors) == 1
    own_server.start()
    for _ in range(200):
        limiter.is_allowed("x", 5, 60)
        if not limiter.circuit.down:
            break
        import time
        time.sleep(0.02)
    assert not limiter.circuit.down
    assert limiter.is_allowed("y", 5, 60) == (True, 1)  # through the library loaded again
    assert limiter.backend.mode is expected_mode(server_kind)
    assert len(errors) == 1  # the stop, and nothing after it


def test_user_who_may_not_load_it_is_told_the_command(
        redis_server: RedisServer, r: redis.Redis, server_kind: Kind, prefix: str) -> None:
    if has_module(server_kind) or not has_functions(server_kind):
        pytest.skip("needs a server without the module, with FUNCTION")
    fresh(r, server_kind)
    user = f"app{prefix[1:-1]}"
    r.acl_setuser(user, enabled=True, passwords=["+pw"], keys=["*"],
                  commands=["+@all", "-function"])
    app = redis.Redis(port=redis_server.port, username=user, password="pw")
    errors: list[BaseException] = []
    limiter = SlidingWindowRateLimiter(app, prefix=prefix, on_error=errors.append)
    with pytest.raises(LibraryNotLoadedError) as caught:
        limiter.is_allowed("u", 5, 60)
    assert library.LOAD_COMMAND in str(caught.value)
    assert "python3 -m slidingwindow.library" in str(caught.value)
    assert errors == [] and not limiter.circuit.down
    # The operator's helper, as an admin; then the app's next call goes through.
    done = subprocess.run([sys.executable, "-m", "slidingwindow.library", redis_server.url],
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert f"library {library.VERSION} loaded" in done.stdout
    assert limiter.is_allowed("u", 5, 60) == (True, 1)
    app.close()
    r.acl_deluser(user)


def test_older_library_this_user_may_not_replace_is_used_as_it_is(
        redis_server: RedisServer, r: redis.Redis, server_kind: Kind, prefix: str,
        caplog: pytest.LogCaptureFixture) -> None:
    # An app upgraded before its operator: the loaded 0.0.1 answers every call, so the
    # limiter keeps limiting with it, and says once what the operator runs.
    if has_module(server_kind) or not has_functions(server_kind):
        pytest.skip("needs a server without the module, with FUNCTION")
    old = library.CODE.replace(f"local VERSION = '{library.VERSION}'", "local VERSION = '0.0.1'")
    r.execute_command("FUNCTION", "LOAD", "REPLACE", old)  # type: ignore[no-untyped-call]
    user = f"old{prefix[1:-1]}"
    r.acl_setuser(user, enabled=True, passwords=["+pw"], keys=["*"],
                  commands=["+@all", "-function"])
    app = redis.Redis(port=redis_server.port, username=user, password="pw")
    try:
        limiter = SlidingWindowRateLimiter(app, prefix=prefix)
        with caplog.at_level("WARNING", logger="slidingwindow"):
            assert limiter.is_allowed("old", 5, 60) == (True, 1)
            assert limiter.is_allowed("old", 5, 60) == (True, 2)
        assert r.fcall_ro("slidingwindow_version", 0) == b"0.0.1"  # kept
        assert limiter.backend.loads == 0 and not limiter.circuit.down
        warned = [m for m in caplog.messages if "using it as it is" in m]
        assert len(warned) == 1, caplog.messages
        assert library.LOAD_COMMAND in warned[0] and "(0.0.1)" in warned[0]
    finally:
        app.close()
        r.acl_deluser(user)
        r.execute_command("FUNCTION", "LOAD", "REPLACE", library.CODE)  # type: ignore[no-untyped-call]


def test_async_loaded_again_after_flush(
        redis_server: RedisServer, r: redis.Redis, server_kind: Kind, prefix: str) -> None:
    async def scenario() -> None:
        client = redis.asyncio.Redis(port=redis_server.port)
        limiter = AsyncSlidingWindowRateLimiter(client, prefix=prefix)
        assert await limiter.is_allowed("a", 5, 60) == (True, 1)
        assert limiter.backend.mode is expected_mode(server_kind)
        fresh(r, server_kind)
        assert await limiter.is_allowed("a", 5, 60) == (True, 2)
        assert not limiter.circuit.down
        await client.aclose()

    asyncio.run(scenario())


def test_cluster_loads_every_primary_and_again_after_flush(
        cluster: RedisClusterProcs, server_kind: Kind, prefix: str) -> None:
    if has_module(server_kind):
        pytest.skip("the module's cluster: test_limiter.py::test_cluster")
    client = connect(cluster.url, cluster=True)
    limiter = SlidingWindowRateLimiter(client, prefix=prefix)
    ids = [f"c{i}" for i in range(20)]
    assert [limiter.is_allowed(c, 1, 60)[0] for c in ids] == [True] * 20
    nodes = [redis.Redis(port=n.port) for n in cluster.nodes]
    if has_functions(server_kind):
        assert [n.fcall_ro("slidingwindow_version", 0) for n in nodes] == [
            library.VERSION.encode()] * 3
        nodes[1].execute_command("FUNCTION", "FLUSH")  # type: ignore[no-untyped-call]
    else:
        nodes[1].script_flush()
    assert [limiter.is_allowed(c, 1, 60)[0] for c in ids] == [False] * 20
    assert sum(len(n.keys(f"{prefix}*")) for n in nodes) == 20
    assert all(n.keys(f"{prefix}*") for n in nodes)  # spread over the three
    assert not limiter.circuit.down
    client.close()

    async def scenario() -> None:  # the asyncio cluster client: the same, from a fresh node
        if has_functions(server_kind):
            nodes[2].execute_command("FUNCTION", "FLUSH")  # type: ignore[no-untyped-call]
        else:
            nodes[2].script_flush()
        aclient = connect_async(cluster.url, cluster=True)
        alimiter = AsyncSlidingWindowRateLimiter(aclient, prefix=prefix)
        assert [(await alimiter.is_allowed(c, 2, 60))[0] for c in ids] == [True] * 20
        if has_functions(server_kind):
            assert [n.fcall_ro("slidingwindow_version", 0) for n in nodes] == [
                library.VERSION.encode()] * 3
        assert not alimiter.circuit.down
        await aclient.aclose()

    asyncio.run(scenario())
    for n in nodes:
        n.close()


def test_the_shipped_library_is_the_repository_file() -> None:
    """The package's slidingwindow.lua is lua/slidingwindow.lua itself (a link; builds
    copy its target: checked by building a wheel and an sdist, see the README)."""
    from pathlib import Path

    from slidingwindow_testing import REPO

    # slidingwindow/slidingwindow.lua, beside the library package (slidingwindow/library/).
    shipped = Path(library.__file__).parents[1] / "slidingwindow.lua"
    assert shipped.is_symlink()
    assert shipped.resolve() == (REPO / "lua" / "slidingwindow.lua").resolve()
    assert library.CODE == (REPO / "lua" / "slidingwindow.lua").read_text()
    assert library.BODY == library.CODE.split("\n", 1)[1] and library.CODE.startswith("#!lua")
    assert library.VERSION == "0.3.0"
    pyproject = (REPO / "clients" / "python" / "pyproject.toml").read_text()
    assert '"slidingwindow.lua"' in pyproject  # package-data: the wheel carries it
