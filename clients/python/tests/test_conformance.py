"""The conformance vectors (conformance/*.json at the repository root), replayed through
this client's real code: the limiters' command building and backend wire (a scripted
client records what they send), the reply decoders, the header and identity helpers, and
the real DenyCache with an injected clock and a scripted call.

Each driver returns the case's expected part as this client computes it; `mismatch`
compares. `test_a_changed_vector_fails` changes one expected value in every case of every
file and checks that the comparison then reports it (so a vector edited by hand, or a
driver that compares nothing, fails this suite). No Redis: the vectors pin the offline half
of the contract; the live tests pin the rest. rates.json is replayed by its own test file.
"""

from __future__ import annotations

import asyncio
import copy
import json
import logging
import random
import types
from typing import Any, Callable, Iterator, Optional

import pytest
import redis
from redis.exceptions import ResponseError

from slidingwindow import (
    AsyncSlidingWindowRateLimiter,
    MultiLimitResult,
    RateLimitResult,
    SlidingWindowRateLimiter,
    WindowCounts,
    client_ip,
    library,
    limits_headers,
    rate_limit_headers,
)
from slidingwindow.core import deny_cache as deny_cache_module
from slidingwindow.core.commands import CHECK, PEEK, REFUND
from slidingwindow.core.deny_cache import DenyCache
from slidingwindow.http.request_identity import ScopeIdentity, by_ip, header_api_key
from slidingwindow_testing.paths import REPO

CONFORMANCE = REPO / "conformance"
# Each file's expected part of a case: what the drivers compute and `mismatch` compares.
EXPECTED = {
    "commands.json": ("module", "fcall", "evalsha"),
    "replies.json": ("result",),
    "headers.json": ("headers",),
    "identity.json": ("client_ip", "identity"),
    "deny_cache.json": ("expect",),  # one per step
}
QUIET = logging.getLogger("slidingwindow.conformance")
QUIET.addHandler(logging.NullHandler())
QUIET.propagate = False


def load(name: str) -> list[dict[str, Any]]:
    data = json.loads((CONFORMANCE / name).read_text())
    assert isinstance(data["description"], str) and data["description"]
    cases: list[dict[str, Any]] = data["cases"]
    ids = [c["id"] for c in cases]
    assert len(set(ids)) == len(ids), f"{name}: case ids repeat"
    return cases


# --- typed results as the vectors write them ------------------------------------------

def result_json(result: Any) -> Any:
    if isinstance(result, MultiLimitResult):
        return {"summary": result_json(result.summary),
                "limits": [result_json(r) for r in result.limits],
                "governing": result.governing}
    if isinstance(result, RateLimitResult):
        return {
            "allowed": result.allowed, "count": result.count, "limit": result.limit,
            "remaining": result.remaining, "retry_after": result.retry_after,
            "reset_after": result.reset_after, "window": result.window, "ms": result.ms,
            "degraded": result.degraded, "retry_after_seconds": result.retry_after_seconds,
            "reset_after_seconds": result.reset_after_seconds,
            "window_seconds": result.window_seconds,
        }
    if isinstance(result, WindowCounts):
        return {"previous": result.previous, "current": result.current,
                "elapsed": result.elapsed, "degraded": result.degraded}
    if isinstance(result, tuple):  # is_allowed
        return {"allowed": result[0], "count": result[1]}
    raise TypeError(f"no vector form for {result!r}")


def single_from_json(d: dict[str, Any]) -> RateLimitResult:
    return RateLimitResult(d["allowed"], d["count"], d["limit"], d["remaining"],
                           d["retry_after"], d["reset_after"], d["window"], d["ms"],
                           d["degraded"])


def result_from_json(d: dict[str, Any]) -> Any:
    if "summary" in d:
        return MultiLimitResult(single_from_json(d["summary"]),
                                tuple(single_from_json(r) for r in d["limits"]), d["governing"])
    return single_from_json(d)


# --- a scripted client: records what the limiter sends, answers as the case says ------

CALLS = ("SLIDINGWINDOW.", "FCALL", "EVALSHA", "EVAL")


class Scripted:
    """Answers the backend's detection as the case's server would (`server`: "module",
    "functions" (Redis 7+ with the library loaded), "redis62" (no FUNCTION)); the call
    itself gets `reply`, or a connection error when `reply` is None."""

    def __init__(self, server: str, reply: Any = None) -> None:
        self.server, self.reply, self.sent = server, reply, []  # type: list[list[str]]

    def answer(self, args: tuple[Any, ...]) -> Any:
        words = [a if isinstance(a, str) else str(a) for a in args]
        head = words[0].upper()
        if self.server == "redis62" and (head.startswith("FCALL") or head == "FUNCTION"):
            raise ResponseError(f"unknown command `{words[0]}`, with args beginning with: ")
        if head == "FCALL_RO" and words[1] == "slidingwindow_version":
            return library.VERSION
        if head == "FUNCTION":
            return "slidingwindow"
        if head.startswith(CALLS):
            self.sent.append(words)
            if self.reply is None:
                raise redis.ConnectionError("Connection refused (scripted)")
            return self.reply
        raise AssertionError(f"unexpected command {words}")

    def execute_command(self, *args: Any, **options: Any) -> Any:
        return self.answer(args)


class AsyncScripted(Scripted):
    async def execute_command(self, *args: Any, **options: Any) -> Any:  # type: ignore[override]
        return self.answer(args)


BACKENDS = {"module": ("module", "module"), "fcall": ("library", "functions"),
            "evalsha": ("library", "redis62")}


def call_limiter(limiter: Any, case: dict[str, Any]) -> Any:
    """The case's call on `limiter` (sync: the answer; asyncio: a coroutine)."""
    call, cid = case["call"], case["client_id"]
    o = dict(case.get("options", {}))
    if call == "is_allowed":
        limit, window = case["limits"][0]
        return limiter.is_allowed(cid, limit, window, **o)
    if call == "counts":
        return limiter.counts(cid, case["window"], **o)
    if call.endswith("_limits"):
        return getattr(limiter, call)(cid, [tuple(p) for p in case["limits"]], **o)
    (limit, window), = case["limits"]
    return getattr(limiter, call)(cid, limit, window, **o)


def limiter_for(client: Any, case: dict[str, Any], backend: str, asyncio_: bool) -> Any:
    kind = AsyncSlidingWindowRateLimiter if asyncio_ else SlidingWindowRateLimiter
    return kind(client, prefix=case.get("prefix", "rate:"), backend=backend, logger=QUIET,
                fail_open=case.get("fail_open", True))


def run_commands(case: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for wire, (backend, server) in BACKENDS.items():
        sent = []
        for asyncio_ in (False, True):  # both limiters build the same
            client = (AsyncScripted if asyncio_ else Scripted)(server, "scripted reply")
            limiter = limiter_for(client, case, backend, asyncio_)
            try:
                answer = call_limiter(limiter, case)
                if asyncio_:
                    asyncio.run(answer)
            except Exception:
                pass  # the reply is no real one: only what was sent counts here
            sent.append([("$SHA" if w == library.SHA else w) for w in client.sent[-1]]
                        if client.sent else None)
        out[wire] = sent[0] if sent[0] == sent[1] else {"sync": sent[0], "asyncio": sent[1]}
    return out


def run_replies(case: dict[str, Any]) -> dict[str, Any]:
    answers = []
    for asyncio_ in (False, True):
        client = (AsyncScripted if asyncio_ else Scripted)("module", case["reply"])
        limiter = limiter_for(client, case, "module", asyncio_)
        answer = call_limiter(limiter, case)
        answers.append(result_json(asyncio.run(answer) if asyncio_ else answer))
    assert answers[0] == answers[1], f"sync and asyncio disagree: {answers}"
    return {"result": answers[0]}


def run_headers(case: dict[str, Any]) -> dict[str, Any]:
    result = result_from_json(case["result"])
    policy = case.get("policy", "default")
    if isinstance(result, MultiLimitResult):
        return {"headers": limits_headers(result, policy)}
    return {"headers": rate_limit_headers(result, policy)}


class User:
    is_authenticated = True

    def __init__(self, identity: str) -> None:
        self.identity = identity


def run_identity(case: dict[str, Any]) -> dict[str, Any]:
    headers: dict[str, list[str]] = case.get("headers", {})
    options = case.get("options", {})
    scope: dict[str, Any] = {
        "type": "http", "path": "/",
        "headers": [(k.lower().encode("latin-1"), v.encode("latin-1"))
                    for k, values in headers.items() for v in values],
        "client": (case["peer"], 50000) if case.get("peer") is not None else None,
    }
    if options.get("user") is not None:
        scope["user"] = User(options["user"])
    trusted = case.get("trusted_proxies", [])
    prefix = options.get("ipv6_prefix", 64)
    if options.get("by_ip"):
        identify = by_ip(trusted, prefix)
    else:
        keys = set(options.get("api_keys", []))
        api_key = (header_api_key(options["api_key_header"], keys.__contains__)
                   if "api_key_header" in options else None)
        identify = ScopeIdentity(trusted, api_key=api_key, ipv6_prefix=prefix)
    xff = {k.lower(): v for k, v in headers.items()}.get("x-forwarded-for")
    ip = client_ip(xff, case.get("peer"), trusted)
    return {"client_ip": str(ip) if ip is not None else None, "identity": identify(scope)}


class Clock:
    """The cache's monotonic clock, in the vectors' local milliseconds."""

    def __init__(self) -> None:
        self.ms = 0.0

    def monotonic(self) -> float:
        return self.ms / 1000


def run_deny_cache(case: dict[str, Any]) -> dict[str, Any]:
    clock = Clock()
    options = case.get("cache", {})
    cache = DenyCache(options.get("max_entries", 10_000),
                      clock_refresh=options.get("clock_refresh_ms", 0) / 1000)
    offset = case.get("server_offset_ms")
    maker = SlidingWindowRateLimiter(Scripted("module"), prefix=case.get("prefix", "rate:"))
    fail_open = case.get("fail_open", True)

    class TimeClient:  # the TIME calls of the offset's measurement
        def execute_command(self, *args: Any) -> Any:
            assert args == ("TIME",) and offset is not None
            server = clock.ms + offset
            return [int(server // 1000), int(round(server % 1000 * 1000))]

    steps = []
    real = deny_cache_module.time
    deny_cache_module.time = types.SimpleNamespace(monotonic=clock.monotonic)  # type: ignore[assignment]
    try:
        for step in case["steps"]:
            clock.ms = float(step["at_ms"])
            sent = False

            def send(command: Any, step: dict[str, Any] = step) -> Any:
                nonlocal sent
                sent = True
                clock.ms += step.get("latency_ms", 0)
                if "redis" not in step:
                    raise AssertionError("sent to Redis, but the step scripts no reply")
                if step["redis"] == "unavailable":
                    return command.without_redis(fail_open)
                return command.read(step["redis"])

            o = dict(step.get("options", {}))
            cost, ms, now = o.get("cost", 1), o.get("ms", False), o.get("now")
            pairs = [tuple(p) for p in step["limits"]]
            name = {"check": CHECK, "refund": REFUND, "peek": PEEK}[step["call"].split("_")[0]]
            if step["call"].endswith("_limits"):
                command: Any = maker._limits_command(name, step["client_id"], pairs, cost, ms, now)
            else:
                (limit, window), = pairs
                command = maker._decide_command(name, step["client_id"], limit, window, cost,
                                                ms, now)
            spec = command.spec
            try:
                answer = (send(command) if spec is None
                          else cache.run_sync(spec, command, send, TimeClient()))
                got: Any = result_json(answer)
            except AssertionError as exc:
                got = {"error": str(exc)}
            steps.append({"sent": sent, "result": got})
    finally:
        deny_cache_module.time = real  # type: ignore[assignment]
    return {"expect": steps}


DRIVERS: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "commands.json": run_commands,
    "replies.json": run_replies,
    "headers.json": run_headers,
    "identity.json": run_identity,
    "deny_cache.json": run_deny_cache,
}


def expected_of(name: str, case: dict[str, Any]) -> dict[str, Any]:
    if name == "deny_cache.json":
        return {"expect": [s["expect"] for s in case["steps"]]}
    return {k: case[k] for k in EXPECTED[name] if k in case}


def mismatch(name: str, case: dict[str, Any]) -> Optional[str]:
    """None when this client computes the case's expected values; else what differs."""
    want = expected_of(name, case)
    got = DRIVERS[name](case)
    got = {k: v for k, v in got.items() if k in want}
    if got == want:
        return None
    return f"{name} {case['id']}:\n  expected {json.dumps(want)}\n  got      {json.dumps(got)}"


@pytest.mark.parametrize("name, case", [
    pytest.param(name, case, id=f"{name.removesuffix('.json')}:{case['id']}")
    for name in DRIVERS for case in load(name)])
def test_vector(name: str, case: dict[str, Any]) -> None:
    why = mismatch(name, case)
    assert why is None, why


def leaves(value: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    if isinstance(value, dict) and value:
        for k in sorted(value):
            yield from leaves(value[k], (*path, k))
    elif isinstance(value, list) and value:
        for i, v in enumerate(value):
            yield from leaves(v, (*path, i))
    else:
        yield path


def changed(value: Any) -> Any:
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    if isinstance(value, str):
        return value + "x"
    if value is None:
        return "not null"
    if isinstance(value, dict):
        return {**value, "X-Changed": "1"}
    return [*value, 0]


def mutate(name: str, case: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    """A copy of `case` with one leaf of its expected part changed."""
    bad = copy.deepcopy(case)
    if name == "deny_cache.json":
        root: Any = rng.choice(bad["steps"])["expect"]
    else:
        root = {k: bad[k] for k in EXPECTED[name] if k in bad}
    path = rng.choice(list(leaves(root)))
    holder = root
    for part in path[:-1]:
        holder = holder[part]
    holder[path[-1]] = changed(holder[path[-1]])
    if name != "deny_cache.json":
        bad.update(root)
    return bad


def test_a_changed_vector_fails() -> None:
    """Every file, every case: one expected value changed (a seeded choice) is reported."""
    rng = random.Random(28)
    for name in EXPECTED:
        cases = load(name)
        assert cases, f"{name} has no case"
        for case in cases:
            assert mismatch(name, mutate(name, case, rng)) is not None, (
                f"{name} {case['id']}: a changed expected value went unnoticed")


def test_every_file_is_replayed() -> None:
    """Every vector file but rates.json (its own test) has a driver here."""
    files = {p.name for p in CONFORMANCE.glob("*.json")} - {"rates.json"}
    assert files == set(DRIVERS), files ^ set(DRIVERS)


def test_vectors_are_plain_json() -> None:
    """Two-space indented, keys as written (a new client parses them with any JSON reader)."""
    for path in sorted(CONFORMANCE.glob("*.json")):
        data = json.loads(path.read_text())
        assert set(data) >= {"description", "cases"}, path.name
        assert isinstance(data["cases"], list), path.name

