"""The example gateways over real HTTP, on a loopback port: the ASGI one under uvicorn and
its WSGI twin under flask run, each against Redis or a 3-node Cluster of every server."""

from __future__ import annotations

import httpx
import redis
import redis.cluster

from slidingwindow_testing import RedisClusterProcs, RedisServer, free_port
from uvicorn_proc import Gateway


def burst(url: str, n: int, path: str = "/api/hello", method: str = "GET",
          headers: dict[str, str] | None = None) -> list[httpx.Response]:
    with httpx.Client(base_url=url, timeout=5) as http:
        return [http.request(method, path, headers=headers) for _ in range(n)]


def codes(responses: list[httpx.Response]) -> list[int]:
    return [r.status_code for r in responses]


def test_gateway_limits_over_http(redis_server: RedisServer,
                                  gateway_factory: type[Gateway]) -> None:
    gw = gateway_factory(REDIS_URL=redis_server.url, TRUSTED_PROXIES="127.0.0.1/32")
    anonymous = burst(gw.url, 6, headers={"X-Forwarded-For": "198.51.100.7"})
    assert codes(anonymous) == [200] * 5 + [429]
    first, denied = anonymous[0], anonymous[-1]
    assert first.json() == {"hello": "anonymous"}
    assert first.headers["x-ratelimit-limit"] == "5"
    assert first.headers["x-ratelimit-remaining"] == "4"
    assert first.headers["ratelimit-policy"] == '"api";q=5;w=10'
    assert denied.json()["error"] == "rate_limited"
    retry = int(denied.headers["retry-after"])
    assert 1 <= retry <= 11 and denied.json()["retry_after"] == retry
    assert denied.headers["ratelimit"] == f'"api";r=0;t={retry}'

    # Spoofing: the client puts its own addresses in front; our proxy (127.0.0.1)
    # appends the one it saw. Still the same counter.
    spoofed = [burst(gw.url, 1, headers={"X-Forwarded-For": f"10.9.9.{i}, 198.51.100.7"})[0]
               for i in range(3)]
    assert codes(spoofed) == [429] * 3

    # A valid API key has its own counter; an invented one is counted by address.
    keyed = burst(gw.url, 6, headers={"X-API-Key": "demo-key-1",
                                      "X-Forwarded-For": "198.51.100.7"})
    assert codes(keyed) == [200] * 5 + [429] and keyed[0].json() == {"hello": "alice"}
    assert codes(burst(gw.url, 1, headers={"X-API-Key": "made-up",
                                           "X-Forwarded-For": "198.51.100.7"})) == [429]

    # Logins by address whatever the key; costly reports; health never limited.
    logins = burst(gw.url, 4, method="POST", path="/api/login",
                   headers={"X-API-Key": "demo-key-2", "X-Forwarded-For": "198.51.100.8"})
    assert codes(logins) == [200, 200, 200, 429]
    assert codes(burst(gw.url, 5, path="/api/report")) == [200] * 4 + [429]
    health = burst(gw.url, 20, path="/health")
    assert set(codes(health)) == {200} and "x-ratelimit-limit" not in health[0].headers

    keys = sorted(redis.Redis(port=redis_server.port).keys("rate:*"))
    assert keys == [b"rate:api:ip:198.51.100.7", b"rate:api:key:demo-key-1",
                    b"rate:login:ip:198.51.100.8", b"rate:report:ip:127.0.0.1"]


def test_gateway_on_redis_cluster(cluster: RedisClusterProcs,
                                  gateway_factory: type[Gateway]) -> None:
    cluster.flush()  # the session's cluster: the other gateway flavor counted these ids
    gw = gateway_factory(REDIS_URL=cluster.url, REDIS_CLUSTER="1",
                         TRUSTED_PROXIES="127.0.0.1/32")
    clients = [f"198.51.100.{i}" for i in range(1, 13)]
    for addr in clients:
        assert codes(burst(gw.url, 6, headers={"X-Forwarded-For": addr})) == [200] * 5 + [429]
    rc = redis.cluster.RedisCluster(host="127.0.0.1", port=cluster.nodes[0].port)
    try:
        for addr in clients:
            key = f"rate:api:ip:{addr}"
            assert rc.exists(key) == 1
        nodes = {rc.get_node_from_key(f"rate:api:ip:{a}").port for a in clients}
        assert len(nodes) >= 2  # the identities really are spread over the cluster
    finally:
        rc.close()


def test_gateway_fail_closed_and_fail_open(gateway_factory: type[Gateway]) -> None:
    nowhere = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there
    closed = gateway_factory(REDIS_URL=nowhere, FAIL_OPEN="0")
    down = burst(closed.url, 2)
    assert codes(down) == [503, 503]
    assert down[0].json()["error"] == "rate_limiter_unavailable"
    assert codes(burst(closed.url, 1, path="/health")) == [200]
    opened = gateway_factory(REDIS_URL=nowhere)
    assert codes(burst(opened.url, 8)) == [200] * 8
