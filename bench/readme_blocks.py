#!/usr/bin/env python3
"""The measured figures the READMEs show, written between markers from the committed
results (bench/results/*.json, and node-outage.md as `npm run bench:outage` writes it), so
that a README says what the committed run says.

    python3 bench/readme_blocks.py           # rewrite every block in every README
    python3 bench/readme_blocks.py --check   # exit 1 naming each block that differs

A block is

    <!-- figures:NAME (bench/readme_blocks.py writes this block) -->
    ...
    <!-- figures:end -->

and NAME one of BLOCKS below. `make bench` and `make accuracy` rewrite the blocks after
their run; after `make bench-node`, `make bench-rust` or `npm run bench:outage` alone, run
this script. bench/test_readme_blocks.py (in `make test`) fails when a block is stale, and
when a README quotes a server time or a rate outside a block.
The README's Performance block keeps its own markers (bench/bench.py --update-readme)
and is checked here too.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parent))

import clients_report  # noqa: E402  (bench/ is not a package for the benchmark's scripts)
import report  # noqa: E402
from accuracy.report import render_markdown as accuracy_markdown  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
BEGIN = re.compile(r"^<!-- figures:([a-z0-9-]+) \(bench/readme_blocks\.py writes this block\) -->$")
END = "<!-- figures:end -->"


def _load(name: str) -> dict:
    return json.loads((RESULTS / name).read_text())


def _section(markdown: str, heading: str) -> str:
    """The body of `## heading` in `markdown`, up to the next heading."""
    parts = re.split(r"^## (.+)$", markdown, flags=re.M)
    bodies = dict(zip(parts[1::2], parts[2::2]))
    return bodies[heading].strip()


def _accuracy(heading: str) -> Callable[[], str]:
    return lambda: _section(accuracy_markdown(_load("accuracy.json")), heading)


def _accuracy_run() -> str:
    text = accuracy_markdown(_load("accuracy.json"))
    first = text.split("\n\n")[1]  # the paragraph after the title: what was run, where
    return first.replace("`make accuracy` on", "From `make accuracy` on", 1) + (
        " Every table: [bench/results/accuracy.md](bench/results/accuracy.md).")


def _num(value: object, digits: int) -> str:
    return "-" if value is None else f"{float(value):.{digits}f}"  # type: ignore[arg-type]


def _rust_table() -> str:
    """bench/results/rust.json (make bench-rust) as the table the Rust README shows."""
    r = _load("rust.json")
    head = (f"Redis 7 with the module; {r['connections']} connections, {r['duration_s']} s per "
            f"run, median of {r['rounds']} rounds; CPU at a fixed {r['rate']} req/s; every "
            f"request allowed (one key); {r['cores']} cores, load average {r['load_average']} "
            "at the end.")
    rows = ["| app | req/s | p50 ms | p99 ms | Redis server us/request | app CPU us/request "
            "| limiter CPU us/request | non-2xx |", "|---|---|---|---|---|---|---|---|"]
    for a in r["apps"]:
        rows.append(f"| {a['app']} | {_num(a['req_per_sec'], 0)} | {_num(a['p50_ms'], 2)} "
                    f"| {_num(a['p99_ms'], 2)} | {_num(a['server_usec_per_request'], 2)} "
                    f"| {_num(a['cpu_usec_per_request'], 1)} "
                    f"| {_num(a['limiter_cpu_usec_per_request'], 1)} | {a['non2xx']} |")
    return head + "\n\n" + "\n".join(rows)


def _rust_layer() -> str:
    """The table, then the comparison the issue asks for, in words."""
    apps = {a["app"]: a for a in _load("rust.json")["apps"]}
    own = apps["slidingwindow"]["limiter_cpu_usec_per_request"]
    words = [f"The layer's own CPU per allowed request: {_num(own, 1)} us"]
    node = apps.get("node-slidingwindow")
    if node is not None and node["limiter_cpu_usec_per_request"] is not None:
        words.append(f"the Node store's (Express, express-rate-limit): "
                     f"{_num(node['limiter_cpu_usec_per_request'], 1)} us")
    if "governor" in apps:
        words.append(f"tower_governor's (in memory, per process): "
                     f"{_num(apps['governor']['limiter_cpu_usec_per_request'], 1)} us")
    return (_rust_table() + "\n\n" + "; ".join(words) + ". Throughput at saturation: "
            f"{_num(apps['slidingwindow']['req_per_sec'], 0)} req/s with the layer against "
            f"{_num(apps['none']['req_per_sec'], 0)} without a limiter (p99 "
            f"{_num(apps['slidingwindow']['p99_ms'], 2)} ms against "
            f"{_num(apps['none']['p99_ms'], 2)} ms). The CPU figures come from the kernel's "
            "10 ms ticks over about 10,000 requests per run: a difference of a few us is "
            "noise (tower_governor's can come out below zero).")


def _stream_times() -> tuple[dict[str, float], list[float], list[float], int]:
    """Redis 7.0's µs per call on the Zipf stream at pipeline 32 (library, seed, module),
    library / seed and library / module on every server, and the run's calls."""
    d = _load("latest.json")
    per = {s["short"]: {k: s["cases"][k]["usec_per_call"]["32"]
                        for k in ("stream_lua", "stream_seed", "stream_check")}
           for s in d["servers"]}
    vs_seed = [p["stream_lua"] / p["stream_seed"] for p in per.values()]
    module = [p["stream_lua"] / p["stream_check"] for p in per.values()]
    return per["redis7"], vs_seed, module, d["config"]["stream_n32"]


def _lua_stream() -> str:
    """lua/README's sentence: the library, the seed's script and the module on the stream."""
    r7, vs_seed, module, calls = _stream_times()
    return (f"Server time in the committed `make bench` run (bench/results/latest.md; pipeline "
            f"32, runs of {calls:,} calls): {r7['stream_lua']:.2f} µs, "
            f"{r7['stream_seed']:.2f} µs and {r7['stream_check']:.2f} µs on Redis 7.0 (library "
            f"/ seed {min(vs_seed):.2f} to {max(vs_seed):.2f} and module {min(module):.1f} to "
            f"{max(module):.1f} x faster across the {len(module)} servers; the runs of this "
            "2-core VM spread widely).")


def _readme_lua_stream() -> str:
    """The main README's sentence on the same figures."""
    r7, vs_seed, module, _ = _stream_times()
    return (f"On the Zipf stream in the benchmark above (`make bench`, Redis 7.0, pipeline 32), "
            f"{r7['stream_lua']:.2f} µs of server time per call against the seed script's "
            f"{r7['stream_seed']:.2f} µs ({r7['stream_lua'] / r7['stream_seed']:.2f} x) and the "
            f"module's {r7['stream_check']:.2f} µs (the module "
            f"{r7['stream_lua'] / r7['stream_check']:.1f} x faster; {min(module):.1f} to "
            f"{max(module):.1f} x across the {len(module)} servers).")


def _stream_allowed() -> str:
    """bench/README's sentence: the share of the Zipf stream's calls allowed, module and seed."""
    d = _load("latest.json")
    share = {s["short"]: [s["cases"][k]["allowed_fraction"]
                          for k in ("stream_check", "stream_seed")] for s in d["servers"]}
    every = [f for pair in share.values() for f in pair]
    r7 = share["redis7"]
    return (f"Allowed in the committed full run: {100 * r7[0]:.1f}% of the module's calls and "
            f"{100 * r7[1]:.1f}% of the seed's on Redis 7.0 ({100 * min(every):.1f}% to "
            f"{100 * max(every):.1f}% for either across the {len(share)} servers), the rest "
            "denied.")


def _bench_duration() -> str:
    """bench/README's Duration: how long the committed full run took, on what machine."""
    d = _load("latest.json")
    m, took, n = d["machine"], d["seconds"], len(d["servers"])
    minutes, seconds = divmod(round(took), 60)
    return (f"The committed full run on the {n} servers took {minutes} min "
            f"{seconds} s ({took:,.0f} s, \"took\" in `latest.md`) on {m['cpu']} with "
            f"{m['cores']} cores, load average {m['loadavg_start'][0]:.2f} at the start and "
            f"{m['loadavg_end'][0]:.2f} at the end: about {took / n / 60:.1f} minutes per "
            "server.")


def _node_bench() -> str:
    """bench/results/node.json (make bench-node) as the Node README's table and comparison."""
    d = _load("node.json")
    rows = ["| store | req/s | p50 ms | p99 ms | Redis server µs per request | its command, µs per "
            "call |", "|---|---|---|---|---|---|"]
    for s in d["summary"]:
        none = s["store"] == "none"
        command = "-" if none else f"{s['command'].upper()}, {s['usecPerCall']:.2f}"
        rows.append(f"| {'no limiter' if none else s['store']} | {s['reqPerSec']:.0f} "
                    f"| {s['p50ms']:.1f} | {s['p99ms']:.1f} "
                    f"| {'-' if none else format(s['serverUsecPerRequest'], '.2f')} "
                    f"| {command} |")
    by = {s["store"]: s for s in d["summary"]}
    ours, theirs = by["slidingwindow"], by["rate-limit-redis"]
    rps = {(r["store"], r["round"]): r["reqPerSec"] for r in d["runs"]}
    rounds = sorted({r["round"] for r in d["runs"]})
    per = [100 * (rps[("slidingwindow", n)] / rps[("rate-limit-redis", n)] - 1) for n in rounds]
    words = ", ".join(f"{abs(p):.0f}% {'fewer' if p < 0 else 'more'}" for p in per)
    return (f"At commit {d['commit']}, {d['connections']} connections, {d['duration']} s per run, "
            f"{d['rounds']} rounds (means below); {d['env']}.\n\n" + "\n".join(rows) + "\n\n"
            f"Redis server time per request: {ours['serverUsecPerRequest']:.2f} µs with our store "
            f"against {theirs['serverUsecPerRequest']:.2f} µs with rate-limit-redis "
            f"({ours['serverUsecPerRequest'] / theirs['serverUsecPerRequest']:.2f} x). Requests "
            f"per second through HTTP, our store against rate-limit-redis, round by round: "
            f"{words}.")


def _node_outage() -> str:
    """bench/results/node-outage.md (npm run bench:outage), as the bench wrote it."""
    return (RESULTS / "node-outage.md").read_text().strip()


def _limit_excess() -> str:
    """The main README's sentence on what a short LIMIT leaves of the excess over the limit:
    the adversarial runs' worst window, module alone against module + LIMIT."""
    runs = _load("accuracy.json")["adversarial"]
    parts = []
    for name, words in (("burst_then_stream", "the full limit at a window's end, then a stream"),
                        ("retry_after", "retries at retry_after")):
        lim = min(runs[name], key=int)
        r = runs[name][lim]
        alone, same, twice = (r[k]["max_in_window"] - 1 for k in
                              ("module", "module_limit", "module_limit_burst"))
        share = (lambda x: f" ({x / alone:.2f} of it)") if alone > 0 else (lambda x: "")
        parts.append(f"{words} (limit {int(lim):,}): {alone:.2f} x the limit of excess in one "
                     f"true window alone, {same:.2f} with L/10 per W/10{share(same)}, "
                     f"{twice:.2f} with L/5 per W/10{share(twice)}")
    return ("What a short limit leaves of the excess, in the committed `make accuracy` run: "
            + "; ".join(parts) + ".")


# Which client call sends each path of bench/lua_paths.py.
_SIZING_PATHS = (
    ("plain", "the seed's call (`is_allowed`)"),
    ("DETAILS", "`check()` and the Python middlewares"),
    ("MS DETAILS", "the Node stores and rate strings"),
    ("LIMIT x3 DETAILS", "a 3-limit policy"),
    ("REFUND", "a refund"),
    ("PEEK DETAILS", "a peek"),
)


def _lua_sizing() -> str:
    """The main README's sizing line: the library's server time on each path a client sends,
    with the module's beside it, from the committed `make bench-lua` run."""
    run = _load("lua_paths.json")
    usec = {(c["path"], c["impl"]): c["usec_per_call"] for c in run["cases"]}
    parts = [f"{what}: {usec[(path, 'library')]:.1f} µs ({usec[(path, 'module')]:.1f} µs with the "
             f"module)" for path, what in _SIZING_PATHS]
    seed = usec[("seed script", "seed")]
    return (f"To size a managed instance: Redis server time per call through the library on "
            f"the paths the clients send ({run['server']['server']}, warm keys, every call "
            f"allowed, pipeline {run['pipeline']}; `make bench-lua`): " + "; ".join(parts)
            + f". The seed's script: {seed:.1f} µs.")


def _rls_bench() -> str:
    """rls/README's benchmark tables: the committed `make bench-rls` run with the peer."""
    path = RESULTS / "rls.md"
    if not path.exists():
        return ("No committed run yet: `RLS_PEER=/path/to/ratelimit make bench-rls` writes "
                "bench/results/rls.md.")
    return path.read_text().strip()


BLOCKS: dict[str, Callable[[], str]] = {
    "lua-stream": _lua_stream,
    "readme-lua-stream": _readme_lua_stream,
    "rust-layer": _rust_layer,
    "accuracy-run": _accuracy_run,
    "accuracy-mix": _accuracy("Realistic mix"),
    "accuracy-adversarial": _accuracy("Adversarial patterns"),
    "accuracy-memory": _accuracy("Memory and server time"),
    "accuracy-limit-excess": _limit_excess,
    "bench-stream-allowed": _stream_allowed,
    "bench-duration": _bench_duration,
    "node-bench": _node_bench,
    "node-outage": _node_outage,
    "go-bench": lambda: clients_report.client_bench("go"),
    "python-bench": lambda: clients_report.client_bench("python"),
    "java-bench": lambda: clients_report.client_bench("java"),
    "node-e2e-bench": lambda: clients_report.client_bench("node-e2e"),
    "lua-paths-ir": lambda: (RESULTS / "lua_paths_ir.md").read_text().strip(),
    "lua-paths-time": lambda: (RESULTS / "lua_paths.md").read_text().strip(),
    "lua-sizing": _lua_sizing,
    "rls-bench": _rls_bench,
    "cold-calls": lambda: (RESULTS / "cold_calls.md").read_text().strip(),
}


def readmes() -> list[Path]:
    """Every README of the repository (none under build or dependency folders)."""
    skip = {"node_modules", "target", ".git", "build"}
    return sorted(p for p in ROOT.rglob("README.md") if not skip & set(p.relative_to(ROOT).parts))


def rewrite(text: str, where: str) -> tuple[str, list[str]]:
    """`text` with every block regenerated, and the names of those that changed."""
    lines, out, changed = text.split("\n"), [], []
    i = 0
    while i < len(lines):
        out.append(lines[i])
        m = BEGIN.match(lines[i])
        i += 1
        if not m:
            continue
        name = m.group(1)
        if name not in BLOCKS:
            raise SystemExit(f"{where}: unknown block {name!r} (known: {', '.join(BLOCKS)})")
        body = []
        while i < len(lines) and lines[i] != END:
            body.append(lines[i])
            i += 1
        if i == len(lines):
            raise SystemExit(f"{where}: block {name!r} has no {END}")
        fresh = BLOCKS[name]().split("\n")
        if body != fresh:
            changed.append(name)
        out.extend(fresh)
    return "\n".join(out), changed


def stale() -> list[str]:
    """'<file>: <block>' for every block that differs from the committed results."""
    found = []
    for path in readmes():
        text = path.read_text()
        where = str(path.relative_to(ROOT))
        found += [f"{where}: {name}" for name in rewrite(text, where)[1]]
        if report.README_BEGIN in text:
            start = text.index(report.README_BEGIN)
            end = text.index(report.README_END, start) + len(report.README_END)
            if text[start:end] != report.readme_block(_load("latest.json")):
                found.append(f"{where}: bench (python3 bench/bench.py --update-readme "
                             "--from bench/results/latest.json)")
    return found


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="change nothing; exit 1 if stale")
    ap.add_argument("--rust-md", action="store_true",
                    help="write bench/results/rust.md from rust.json (make bench-rust)")
    args = ap.parse_args()
    if args.rust_md:
        (RESULTS / "rust.md").write_text(
            "# Rust layer overhead (make bench-rust)\n\n" + _rust_layer() + "\n")
        return 0
    if args.check:
        found = stale()
        for line in found:
            print(f"stale: {line}")
        return 1 if found else 0
    for path in readmes():
        where = str(path.relative_to(ROOT))
        text, changed = rewrite(path.read_text(), where)
        if changed:
            path.write_text(text)
            print(f"{where}: {', '.join(changed)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
