"""pytest plugin: limits' own strategy tests, run against our storage on servers we start.

limits' tests (tests/test_strategy.py, tests/aio/test_strategy.py of its sdist) take
`uri, args, fixture` from marks built in their tests/utils.py out of two dicts of
storages that expect docker-compose servers. Without editing their files, this plugin
(loaded with `-p limits_plugin`, their conftest.py left out with `--noconftest`):

- replaces those dicts with our storage URIs before their test modules import the
  marks, and rebuilds the marks the same way tests/utils.py builds them;
- provides the servers behind the URIs: real redis-server / valkey-server processes with
  the module (or, for the LIBRARY_KINDS such as `redis7-managed` and `redis62`, without
  it: the storage's default backend runs the Functions library), on free loopback ports, as lazy fixtures (pytest-lazy-fixtures resolves a
  `lf()` inside the parameters) that flush the database before each test, as their
  fixtures do;
- keeps out, by name, the tests listed in DESELECTED (with the reason);
- prints the counts per server at the end.
"""

from __future__ import annotations

import sys
from collections import Counter
from typing import Any, Callable, Iterator, Optional

import limits.aio.storage  # noqa: F401  the installed limits, before the sdist's tree
import pytest
import redis
from pytest_lazy_fixtures import lf

import slidingwindow.limits_storage  # noqa: F401  registers our schemes, as a user would
from slidingwindow_testing import ALL_KINDS, KINDS, RedisClusterProcs, RedisServer

SERVER_NAMES = tuple(KINDS)  # the default: the servers with the module
CLUSTER = "cluster"  # a 3-master Redis 7 cluster, for the sliding window counter tests
# With --sw-cluster: the same cluster of each kind named here, e.g. cluster-redis7-managed.
CLUSTER_KINDS = {CLUSTER: KINDS["redis7"], **{
    f"cluster-{name}": kind for name, kind in ALL_KINDS.items() if not kind.module}}
ID_PREFIX = "sw-"  # test ids: test_fixed_window[sw-redis7] (short, so `-k Sliding` is the class)

# Tests kept out of the run, by node id (without the parameter): reason and assertion.
DESELECTED: dict[str, str] = {
    # limits' own moving window (their Lua, not the module): a million-entry write must
    # finish inside `window(2, 1)`, a 2-second wall-clock assertion that a loaded 2-core
    # machine misses (seen on redis8 and valkey8 while other suites ran).
    "tests/test_strategy.py::TestMovingWindow::test_moving_window_huge_cost": (
        "wall-clock bound on limits' own moving-window Lua; not the module's code"),
    "tests/aio/test_strategy.py::TestAsyncMovingWindow::test_moving_window_huge_cost": (
        "wall-clock bound on limits' own moving-window Lua; not the module's code"),
}


class Servers:
    """Started on first use, stopped when the session ends."""

    def __init__(self) -> None:
        self.single: dict[str, RedisServer] = {}
        self.clusters: dict[str, RedisClusterProcs] = {}

    def address(self, name: str) -> str:
        """host:port of a clean server (FLUSHALL first, as limits' own fixtures do)."""
        if name in CLUSTER_KINDS:
            if name not in self.clusters:
                self.clusters[name] = RedisClusterProcs(CLUSTER_KINDS[name]).start()
            self.clusters[name].flush()
            return self.clusters[name].addresses
        if name not in self.single:
            kind = ALL_KINDS[name]
            if kind.located() is None:
                pytest.fail(f"no {name} server binary ({kind.install}, or set {kind.env})")
            self.single[name] = RedisServer(kind=kind).start()
        server = self.single[name]
        with redis.Redis(port=server.port) as client:
            client.flushall()
        return f"127.0.0.1:{server.port}"

    def stop(self) -> None:
        for server in self.single.values():
            server.cleanup()
        for cluster in self.clusters.values():
            cluster.cleanup()


SERVERS = Servers()


def _uri_fixture(server: str, kind: str) -> Callable[[], Iterator[str]]:
    scheme = ("async+" if kind == "async" else "") + "slidingwindow+redis"
    if server in CLUSTER_KINDS:
        scheme += "+cluster"

    @pytest.fixture(name=f"slidingwindow_{kind}_{server}")
    def uri() -> Iterator[str]:
        yield f"{scheme}://{SERVERS.address(server)}"

    return uri


for _server in (*ALL_KINDS, *CLUSTER_KINDS):
    for _kind in ("sync", "async"):
        globals()[f"_fixture_{_kind}_{_server}"] = _uri_fixture(_server, _kind)


def _param(server: str, kind: str) -> Any:
    return pytest.param(lf(f"slidingwindow_{kind}_{server}"), {}, None,
                        id=f"{ID_PREFIX}{server}")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--sw-servers", default=",".join(SERVER_NAMES),
                     help="servers to run limits' tests on (default: those with the "
                          "module): " + ",".join(ALL_KINDS))
    parser.addoption("--sw-cluster", action="store_true",
                     help="also run the sliding window counter tests through a 3-master "
                          "Redis Cluster (Redis 7 with the module)")
    parser.addoption("--sw-clusters", default="",
                     help="more such clusters, without the module: "
                          + ",".join(n for n in CLUSTER_KINDS if n != CLUSTER))


def pytest_configure(config: pytest.Config) -> None:
    """Point limits' storage marks at our URIs, before their test modules import them."""
    servers = [s for s in config.getoption("--sw-servers").split(",") if s]
    unknown = set(servers) - set(ALL_KINDS)
    if unknown:
        raise pytest.UsageError(f"unknown server(s) {sorted(unknown)}: use {tuple(ALL_KINDS)}")
    clusters = [CLUSTER] if config.getoption("--sw-cluster") else []
    clusters += [c for c in config.getoption("--sw-clusters").split(",") if c]
    unknown = set(clusters) - set(CLUSTER_KINDS)
    if unknown:
        raise pytest.UsageError(f"unknown cluster(s) {sorted(unknown)}: use {tuple(CLUSTER_KINDS)}")
    # limits' sdist: run.py starts `python -m pytest` in it, which puts it first on sys.path.
    import tests.utils as u  # the same module their tests import

    if not hasattr(u, "ALL_STORAGES"):
        raise pytest.UsageError(f"{config.rootpath} is not limits' source tree")
    marks: dict[str, Any] = {}
    for kind, prefix in (("sync", ""), ("async", "async_")):
        every = [_param(s, kind) for s in servers]
        sliding = every + [_param(c, kind) for c in clusters]
        storages = {p.id: p for p in every}
        setattr(u, "ALL_STORAGES" if kind == "sync" else "ALL_STORAGES_ASYNC", storages)
        names = "uri, args, fixture"
        marks[f"{prefix}all_storage"] = pytest.mark.parametrize(names, every)
        marks[f"{prefix}moving_window_storage"] = pytest.mark.parametrize(names, every)
        marks[f"{prefix}sliding_window_counter_storage"] = pytest.mark.parametrize(
            names, sliding)
    for name, mark in marks.items():
        if not hasattr(u, name):
            raise pytest.UsageError(f"limits' tests/utils.py has no {name}: another version?")
        setattr(u, name, mark)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    keep: list[pytest.Item] = []
    drop: list[pytest.Item] = []
    for item in items:
        (drop if item.nodeid.split("[")[0] in DESELECTED else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def _server_of(nodeid: str) -> str:
    return nodeid.rsplit("[" + ID_PREFIX, 1)[-1].rstrip("]")


def pytest_terminal_summary(terminalreporter: Any) -> None:
    counts: dict[str, Counter[str]] = {}
    for outcome in ("passed", "failed", "error", "skipped", "deselected"):
        for report in terminalreporter.stats.get(outcome, []):
            nodeid = getattr(report, "nodeid", "")
            if "[" + ID_PREFIX not in nodeid:
                continue
            if outcome == "deselected" and nodeid.split("[")[0] not in DESELECTED:
                continue  # left out by -k or -m, not by our list
            counts.setdefault(_server_of(nodeid), Counter())[outcome] += 1
    terminalreporter.section("limits' tests through the slidingwindow storage, per server")
    for server, c in sorted(counts.items()):
        run = c["passed"] + c["failed"] + c["error"]
        terminalreporter.write_line(
            f"{server}: {run} run, {c['passed']} passed, {c['failed']} failed, "
            f"{c['error']} errors, {c['skipped']} skipped, {c['deselected']} excluded by name")
    for nodeid, reason in DESELECTED.items():
        terminalreporter.write_line(f"excluded {nodeid}: {reason}")


def pytest_unconfigure(config: pytest.Config) -> None:
    SERVERS.stop()
