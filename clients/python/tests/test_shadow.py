"""Shadow mode: the same traffic through an enforcing and a shadow middleware (ASGI and
WSGI): the shadow one refuses nothing, and reports exactly the requests the enforcing one
refused, through the hook and one log line each."""

from __future__ import annotations

import logging
import random

import pytest

from http_stacks import STACKS, stack
from slidingwindow_testing import RedisServer
from slidingwindow.http.middleware import Refusal
from slidingwindow.http.request_identity import ScopeIdentity, by_ip
from slidingwindow.http.policy import Policy

TRUSTED = ["127.0.0.1/32"]  # the peer: X-Forwarded-For names the client
DAY = 86400  # both runs fall in one window (a boundary between them would change counts)


def policies() -> dict[str, Policy | None]:
    return {"/api": Policy("api", 3, DAY),
            "/api/login": Policy("login", 2, DAY, identity=by_ip(TRUSTED))}


def traffic(n: int = 60) -> list[tuple[str, str]]:
    """(path, client address): a few clients, two policies, in a fixed random order."""
    rng = random.Random(9)
    return [(rng.choice(["/api/a", "/api/b", "/api/login"]), f"198.51.100.{rng.randint(1, 4)}")
            for _ in range(n)]


@pytest.mark.parametrize("stack_name", STACKS)
def test_shadow_reports_exactly_what_enforcing_refuses(
        stack_name: str, redis_server: RedisServer, prefix: str,
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="slidingwindow.shadow")
    enforced: list[Refusal] = []
    shadowed: list[Refusal] = []
    identity = ScopeIdentity(TRUSTED)
    runs = {}
    for shadow, seen in ((False, enforced), (True, shadowed)):
        with stack(stack_name, redis_server, f"{prefix}{shadow}:", policies(), identity,
                   shadow=shadow, on_refusal=seen.append) as app:
            runs[shadow] = [app.get(path, {"X-Forwarded-For": addr}) for path, addr in traffic()]

    enforcing, shadow_run = runs[False], runs[True]
    refused = [i for i, r in enumerate(enforcing) if r.status_code == 429]
    assert 5 < len(refused) < 55  # the traffic exercised both answers
    assert {r.status_code for r in enforcing} == {200, 429}
    assert {r.status_code for r in shadow_run} == {200}  # nothing refused

    def described(events: list[Refusal]) -> list[tuple[str, str, str]]:
        return [(e.path, e.identity, e.policy.name) for e in events]

    expected = [(traffic()[i][0], f"ip:{traffic()[i][1]}",
                 "login" if traffic()[i][0] == "/api/login" else "api") for i in refused]
    assert described(enforced) == expected
    assert described(shadowed) == expected
    assert all(not e.shadow for e in enforced) and all(e.shadow for e in shadowed)
    # The same counts, so the same headers (but `t`, which moves with the clock between
    # the two runs); a would-be refusal carries no Retry-After.
    for i, (a, b) in enumerate(zip(enforcing, shadow_run, strict=True)):
        assert a.headers["ratelimit"].split(";t=")[0] == b.headers["ratelimit"].split(";t=")[0]
        assert a.headers["x-ratelimit-remaining"] == b.headers["x-ratelimit-remaining"]
        assert ("retry-after" in a.headers) == (i in refused)
        assert "retry-after" not in b.headers
    logged = [r.getMessage() for r in caplog.records if r.name == "slidingwindow.shadow"]
    assert len(logged) == len(refused)
    assert all(m.startswith("shadow: would refuse GET /api/") for m in logged)
    assert any("under 'api' (3 per 86400s; 429, retry after" in m for m in logged)
