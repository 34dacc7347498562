"""Which error replies are outages, each produced by a real server in that state.

Outages (the limiter answers without Redis until a probe gets an answer): LOADING,
READONLY, MASTERDOWN, CLUSTERDOWN, OOM, TRYAGAIN. Not outages (raised, the circuit stays
closed): NOAUTH, WRONGPASS, NOPERM. Each state is real: a server loading a big RDB, a
replica, a replica cut off from its master with replica-serve-stale-data no, a cluster
node with no slots, maxmemory reached, a slot being migrated, requirepass and ACL users.
"""

from __future__ import annotations

import logging
from typing import Iterator

import pytest
import redis
from redis import exceptions as rex
from slidingwindow_testing import Kind, RedisClusterProcs, RedisServer, wait_until
from slidingwindow import SlidingWindowRateLimiter, connect, is_unavailable

PROBE = 0.2  # probe interval here: recovery is checked, not its timing


class Watch:
    """A limiter on `url` that records its on_error calls."""

    def __init__(self, url: str, **options: object) -> None:
        self.errors: list[BaseException] = []
        self.client = connect(url, retries=0, **options)
        self.limiter = SlidingWindowRateLimiter(self.client, on_error=self.errors.append,
                                                probe_interval=PROBE)

    def recovers(self, what: str, peek: bool = False) -> None:
        call = self.limiter.peek if peek else self.limiter.check
        wait_until(what, lambda: not call("r", 10, 60).degraded)
        assert not self.limiter.circuit.down

    def close(self) -> None:
        self.client.close()


def info(port: int, section: str) -> dict[str, object]:
    client = redis.Redis(port=port, decode_responses=True, socket_timeout=5)
    try:
        return dict(client.info(section))
    finally:
        client.close()


@pytest.fixture
def replica_pair(server_kind: Kind) -> Iterator[tuple[RedisServer, RedisServer]]:
    """A master and its replica, both with the module; the replica refuses to serve stale
    data (replica-serve-stale-data no) while cut off from its master."""
    master = RedisServer(kind=server_kind, extra=("--repl-diskless-sync-delay", "0")).start()
    replica = RedisServer(kind=server_kind, extra=(
        "--replicaof", "127.0.0.1", str(master.port), "--replica-serve-stale-data", "no"))
    try:
        replica.start()
        wait_until("the replica's link", lambda: info(
            replica.port, "replication")["master_link_status"] == "up")
        yield master, replica
    finally:
        replica.cleanup()
        master.cleanup()


def test_loading_is_an_outage(server_kind: Kind, caplog: pytest.LogCaptureFixture) -> None:
    """A server loading its RDB answers LOADING; once loaded, limiting resumes."""
    server = RedisServer(kind=server_kind).start()
    try:
        filler = redis.Redis(port=server.port)
        pipe = filler.pipeline(transaction=False)
        for i in range(3000):
            pipe.set(f"fill:{i}", i)
        pipe.execute()
        filler.save()
        filler.close()
        server.stop()
        # 0.5 ms per key: about 1.5 s of loading, answering clients every KiB meanwhile.
        server.extra = ("--key-load-delay", "500", "--loading-process-events-interval-bytes",
                        "1024")
        server.start(loading_ok=True)  # returns at the first reply, LOADING included
        watch = Watch(server.url)
        result = watch.limiter.check("r", 10, 60)
        assert info(server.port, "persistence")["loading"] == 1
        assert (result.allowed, result.degraded) == (True, True)
        assert isinstance(watch.errors[0], rex.BusyLoadingError)
        assert watch.limiter.circuit.down
        watch.recovers("the end of loading")
        assert info(server.port, "persistence")["loading"] == 0
        watch.close()
    finally:
        server.cleanup()


def test_readonly_replica_and_masterdown(replica_pair: tuple[RedisServer, RedisServer],
                                         caplog: pytest.LogCaptureFixture) -> None:
    master, replica = replica_pair
    # READONLY: CHECK writes, and a replica refuses writes (e.g. the old master after a
    # failover, still in the client's configuration).
    writer = Watch(replica.url)
    result = writer.limiter.check("r", 10, 60)
    assert (result.allowed, result.degraded) == (True, True)
    assert isinstance(writer.errors[0], rex.ReadOnlyError)

    # MASTERDOWN: the replica lost its master and will not serve stale data, even PEEK.
    reader = Watch(replica.url)
    assert not reader.limiter.peek("r", 10, 60).degraded
    master.stop()
    wait_until("the link to drop", lambda: info(
        replica.port, "replication")["master_link_status"] == "down")
    peeked = reader.limiter.peek("r", 10, 60)
    assert (peeked.allowed, peeked.degraded) == (True, True)
    assert isinstance(reader.errors[0], rex.MasterDownError)

    master.start()  # the replica reconnects and resyncs: PEEK answers again
    reader.recovers("the replica's resync", peek=True)
    # Promoted: the replica takes writes, and CHECK answers again.
    redis.Redis(port=replica.port).execute_command("REPLICAOF", "NO", "ONE")
    writer.recovers("the promotion")
    # Counted: the call that saw the recovery, then this one (the probe, a PEEK, did not).
    assert writer.limiter.check("r", 10, 60).count == 2
    assert sum("reachable again" in r.getMessage() for r in caplog.records) == 2
    writer.close()
    reader.close()


def test_clusterdown_is_an_outage(server_kind: Kind) -> None:
    """A cluster node that serves no slot answers CLUSTERDOWN; it works once it has them."""
    node = RedisServer(kind=server_kind, extra=(
        "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf")).start()
    try:
        watch = Watch(node.url)
        result = watch.limiter.check("r", 10, 60)
        assert (result.allowed, result.degraded) == (True, True)
        assert isinstance(watch.errors[0], rex.ClusterDownError)
        admin = redis.Redis(port=node.port)
        admin.execute_command("CLUSTER", "ADDSLOTSRANGE", 0, 16383)
        admin.close()
        watch.recovers("the slots")
        watch.close()
    finally:
        node.cleanup()


def test_out_of_memory_is_an_outage(own_server: RedisServer) -> None:
    """maxmemory reached with noeviction: CHECK (a deny-oom command) answers OOM."""
    admin = redis.Redis(port=own_server.port)
    watch = Watch(own_server.url)
    assert watch.limiter.check("r", 1, 60, now=10).allowed
    admin.config_set("maxmemory-policy", "noeviction")
    admin.config_set("maxmemory", 1)
    try:
        result = watch.limiter.check("r", 1, 60, now=10)
        assert (result.allowed, result.degraded) == (True, True)
        assert isinstance(watch.errors[0], rex.OutOfMemoryError)
        # While the circuit is open nothing is sent, PEEK included.
        assert watch.limiter.peek("r", 1, 60, now=10).degraded
    finally:
        admin.config_set("maxmemory", 0)
    wait_until("the circuit to close", lambda: not watch.limiter.check("r", 1, 60, now=10)
               .degraded)
    assert not watch.limiter.check("r", 1, 60, now=10).allowed  # the first count stayed
    admin.close()
    watch.close()


def test_tryagain_is_an_outage(cluster: RedisClusterProcs) -> None:
    """TRYAGAIN is a real reply, but only to a multi-key command during a slot migration;
    CHECK and PEEK take one key (they get ASK instead), so the limiter never sees it. Its
    class is an outage all the same ("try again" is what it says)."""
    owner = redis.cluster.RedisCluster(host="127.0.0.1", port=cluster.nodes[0].port)
    node = owner.get_node_from_key("{tryagain}a")
    other = next(n for n in cluster.nodes if n.port != node.port)
    direct = redis.Redis(port=node.port)
    slot = owner.keyslot("{tryagain}a")
    other_id = redis.Redis(port=other.port).execute_command("CLUSTER", "MYID")
    direct.set("{tryagain}a", 1)
    direct.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", other_id)
    try:
        with pytest.raises(rex.TryAgainError) as caught:
            direct.mget("{tryagain}a", "{tryagain}b")
        assert is_unavailable(caught.value)
    finally:
        direct.execute_command("CLUSTER", "SETSLOT", slot, "STABLE")
        direct.delete("{tryagain}a")
        direct.close()
        owner.close()


@pytest.fixture
def secured(server_kind: Kind) -> Iterator[RedisServer]:
    """A server with a password and an ACL user `app` allowed only keys `allowed:*`."""
    server = RedisServer(kind=server_kind, extra=("--requirepass", "s3cret")).start()
    try:
        admin = redis.Redis(port=server.port, password="s3cret")
        wait_until("the server", lambda: bool(admin.ping()))
        admin.execute_command("ACL", "SETUSER", "app", "on", ">apppw", "~allowed:*", "+@all")
        admin.close()
        yield server
    finally:
        server.cleanup()


@pytest.mark.parametrize("credentials, reply, error", [
    ({}, "NOAUTH", rex.AuthenticationError),
    ({"password": "wrong"}, "WRONGPASS", rex.AuthenticationError),
    ({"username": "app", "password": "apppw"}, "NOPERM", rex.NoPermissionError),
])
def test_auth_errors_are_raised(secured: RedisServer, credentials: dict[str, str], reply: str,
                                error: type[Exception], caplog: pytest.LogCaptureFixture) -> None:
    """A missing or wrong password and a missing ACL grant are the app's configuration:
    no probe can repair them, and failing open would run the API unlimited in silence."""
    caplog.set_level(logging.INFO, logger="slidingwindow")
    watch = Watch(secured.url, **credentials)
    with pytest.raises(error) as caught:
        watch.limiter.check("r", 10, 60)  # the key rate:r is outside allowed:*
    assert reply in str(caught.value) or getattr(caught.value, "status_code", reply) == reply
    assert not watch.limiter.circuit.down and watch.errors == []
    assert not any(r.name == "slidingwindow" for r in caplog.records)
    watch.close()
