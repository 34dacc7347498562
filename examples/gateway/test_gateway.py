"""The example gateways over real HTTP, on a loopback port: the ASGI one under uvicorn and
its WSGI twin under flask run, each against Redis or a 3-node Cluster of every server."""

from __future__ import annotations

import threading
import time

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


def _server_seconds(admin: redis.Redis) -> float:
    sec, usec = admin.time()
    return sec + usec / 1e6


def test_flood_from_one_identity_reaches_redis_at_most_10_times(
        redis_server: RedisServer, gateway_factory: type[Gateway]) -> None:
    """2,000 requests from one address over 20 threads ("api": 5 per 10 s), started at a
    window's beginning (the bounds scale with the windows a slow machine spans). The deny
    cache's single flight: the concurrent first requests wait for one answer (ASGI: asyncio
    tasks under uvicorn; WSGI: flask's threads), so Redis sees the 5 allowed CHECKs and about
    one refusal (whose retry_after lasts to the window's end), not one per thread. Counted on
    the server (INFO commandstats). Before the single flight: 20-25 calls."""
    gw = gateway_factory(REDIS_URL=redis_server.url)
    admin = redis.Redis(port=redis_server.port, decode_responses=True)
    assert codes(burst(gw.url, 1, path="/health")) == [200]  # up, and nothing counted
    if _server_seconds(admin) % 10 > 2:  # start near a window's beginning: 8 s or more left
        time.sleep(10 - _server_seconds(admin) % 10 + 0.05)
    window = _server_seconds(admin) // 10
    admin.config_resetstat()
    statuses: list[int] = []
    lock = threading.Lock()
    start = threading.Barrier(20)

    def worker() -> None:
        with httpx.Client(base_url=gw.url, timeout=10) as http:
            start.wait()
            got = [http.get("/api/hello").status_code for _ in range(100)]
        with lock:
            statuses.extend(got)

    threads = [threading.Thread(target=worker) for _ in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    calls = int(admin.info("commandstats").get("cmdstat_slidingwindow.check", {}).get("calls", 0))
    # A loaded machine can stretch the flood past its window's end (CI once took over 8 s for
    # WSGI); each further window allows at most 5 more and costs about as many calls again.
    windows = int(_server_seconds(admin) // 10 - window) + 1
    admin.close()
    assert len(statuses) == 2000 and set(statuses) == {200, 429}
    assert 5 <= statuses.count(200) <= 5 * windows, (statuses.count(200), windows)
    assert calls <= 10 * windows, (calls, windows)
    if windows > 1:
        print(f"the flood spanned {windows} windows: {calls} CHECK calls")


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
