"""The same HTTP tests through the ASGI middleware and the WSGI one (a real WSGI server):
routes, 429s, headers, identities, proxies, and Retry-After obeyed in real time."""

from __future__ import annotations

import json
import time

import pytest
import redis
from http_stacks import STACKS, keys, stack
from slidingwindow_testing import RedisServer
from slidingwindow.http.request_identity import ScopeIdentity, by_ip, header_api_key
from slidingwindow.http.policy import Policy

KEYS = {"k-alice", "k-bob"}
PROXY = "127.0.0.1"  # the peer every request comes from in both stacks


def policies() -> dict[str, Policy | None]:
    return {
        "/api": Policy("api", 3, 60),
        "/api/login": Policy("login", 2, 60, identity=by_ip()),
        "/api/heavy": Policy("heavy", 10, 60, cost=4),
        "/health": None,
    }


def api_keys() -> ScopeIdentity:
    return ScopeIdentity(api_key=header_api_key("X-API-Key", KEYS.__contains__))


@pytest.fixture(params=STACKS)
def stack_name(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def test_limits_routes_and_answers_429(stack_name: str, redis_server: RedisServer,
                                       prefix: str) -> None:
    with stack(stack_name, redis_server, prefix, policies(), api_keys()) as app:
        ok = app.get("/api/a")
        assert ok.status_code == 200 and ok.text == "/api/a"
        assert ok.headers["x-ratelimit-limit"] == "3"
        assert ok.headers["x-ratelimit-remaining"] == "2"
        assert ok.headers["ratelimit-policy"] == '"api";q=3;w=60'
        assert ok.headers["ratelimit"].startswith('"api";r=2;t=')
        assert "retry-after" not in ok.headers
        # One counter for the whole prefix, per identity.
        assert app.codes("/api/b", 1) + app.codes("/api/a", 1) == [200, 200]
        denied = app.get("/api/b")
        assert denied.status_code == 429
        assert denied.headers["content-type"] == "application/json"
        body = json.loads(denied.content)
        assert body["error"] == "rate_limited" and body["policy"] == "api"
        assert int(denied.headers["retry-after"]) == body["retry_after"] > 0
        assert denied.headers["x-ratelimit-remaining"] == "0"
        assert denied.headers["ratelimit"] == f'"api";r=0;t={body["retry_after"]}'
        # Exempt and unmatched paths: no counting, no headers. "/apix" is not under "/api".
        for path in ("/health", "/apix"):
            r = app.get(path)
            assert r.status_code == 200 and "x-ratelimit-limit" not in r.headers
    assert keys(redis_server, prefix) == [f"{prefix}api:ip:127.0.0.1"]


def test_identity_per_key_and_per_policy(stack_name: str, redis_server: RedisServer,
                                         prefix: str) -> None:
    with stack(stack_name, redis_server, prefix, policies(), api_keys()) as app:
        assert app.codes("/api/a", 4, {"X-API-Key": "k-alice"}) == [200, 200, 200, 429]
        # Another key, and anonymous callers, have counters of their own.
        assert app.codes("/api/a", 1, {"X-API-Key": "k-bob"}) == [200]
        assert app.codes("/api/a", 1) == [200]
        # Invented keys are no identity: counted by address, so they cannot dodge it.
        fake = [app.get("/api/a", {"X-API-Key": f"nope{i}"}).status_code for i in range(3)]
        assert fake == [200, 200, 429]
        # The login policy counts by address whatever key is sent.
        login = [app.get("/api/login", {"X-API-Key": k}).status_code
                 for k in ("k-alice", "k-bob", "k-alice")]
        assert login == [200, 200, 429]
        heavy = [app.get("/api/heavy") for _ in range(3)]
        assert [r.status_code for r in heavy] == [200, 200, 429]  # cost 4 against 10
        assert heavy[0].headers["x-ratelimit-remaining"] == "6"
    assert keys(redis_server, prefix) == sorted([
        f"{prefix}api:ip:127.0.0.1", f"{prefix}api:key:k-alice", f"{prefix}api:key:k-bob",
        f"{prefix}heavy:ip:127.0.0.1", f"{prefix}login:ip:127.0.0.1"])


def test_app_headers_win(stack_name: str, redis_server: RedisServer, prefix: str) -> None:
    with stack(stack_name, redis_server, prefix, policies()) as app:
        r = app.get("/api/own")
        assert r.headers.get_list("x-ratelimit-limit") == ["app"]
        assert r.headers["x-ratelimit-remaining"] == "2"


def test_forwarded_for_through_a_trusted_proxy(stack_name: str, redis_server: RedisServer,
                                               prefix: str) -> None:
    """Behind our proxy (the peer): the right-most address it appended is the client;
    whatever the client wrote further left is ignored."""
    identity = ScopeIdentity(trusted_proxies=[f"{PROXY}/32"])
    with stack(stack_name, redis_server, prefix, {"/": Policy("all", 3, 60)}, identity) as app:
        def via_proxy(real_client: str, forged: str | None) -> int:
            xff = f"{forged}, {real_client}" if forged else real_client
            return app.get("/", {"X-Forwarded-For": xff}).status_code

        codes = [via_proxy("203.0.113.7", f"198.18.0.{i}") for i in range(10)]
        assert codes == [200] * 3 + [429] * 7
        assert via_proxy("203.0.113.7", None) == 429
        assert via_proxy("203.0.113.8", "203.0.113.7") == 200  # someone else
    assert keys(redis_server, prefix) == [f"{prefix}all:ip:203.0.113.7",
                                          f"{prefix}all:ip:203.0.113.8"]


def test_direct_client_cannot_pose_as_proxied(stack_name: str, redis_server: RedisServer,
                                              prefix: str) -> None:
    """The peer is no trusted proxy: X-Forwarded-For is the client's own text, ignored."""
    identity = ScopeIdentity(trusted_proxies=["10.0.0.5/32"])
    with stack(stack_name, redis_server, prefix, {"/": Policy("all", 1, 60)}, identity) as app:
        codes = [app.get("/", {"X-Forwarded-For": f"198.18.1.{i}"}).status_code
                 for i in range(3)]
    assert codes == [200, 429, 429]
    assert keys(redis_server, prefix) == [f"{prefix}all:ip:127.0.0.1"]


def test_millisecond_window_in_real_time(stack_name: str, redis_server: RedisServer,
                                         prefix: str) -> None:
    """Obeying Retry-After (rounded up from ms) on the server's own clock works. The
    requests start just after a 400 ms window boundary read from TIME, so no boundary
    falls between them (one did in 3 of 400 runs when they started anywhere)."""
    with stack(stack_name, redis_server, prefix, {"/": Policy("fast", 2, 400, ms=True)}) as app:
        client = redis.Redis(port=redis_server.port)
        seconds, micros = client.time()
        client.close()
        time.sleep((400 - (seconds * 1000 + micros // 1000) % 400 + 5) / 1000)
        assert app.codes("/", 3) == [200, 200, 429]
        denied = app.get("/")
        assert denied.headers["ratelimit-policy"] == '"fast";q=2;w=1'
        wait = int(denied.headers["retry-after"])
        assert wait == 1  # the module says <= 800 ms; whole seconds, rounded up
        time.sleep(wait)
        assert app.get("/").status_code == 200
