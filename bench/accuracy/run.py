"""How accurate is the sliding window counter? `make accuracy`.

Drives the module (SLIDINGWINDOW.CHECK ... MS, the sliding window counter), a fixed
window (INCR + EXPIRE) and a sliding log (a sorted set per identity, through Lua) on one
real redis-server started here, with the same seeded request streams in simulated time
(explicit `now` in ms), and judges every decision against the exact true window.

    python3 -m bench.accuracy            # full: 5.3M requests -> bench/results/
    python3 -m bench.accuracy --quick    # the same code, small (CI, seconds)

Writes accuracy.json, accuracy.md and accuracy.png (bench/results/quick/ with --quick).
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from slidingwindow_testing import KINDS, MODULE, REPO

from ..compact import compact_json, without, write_raw
from .phases import Config, log, run_adversarial, run_memory, run_mix, supports_limit
from .report import draw_chart, render_markdown
from .server import start_server
from .traffic import MixConfig

WINDOW = 60_000  # ms: "100 requests per minute"
FULL = Config(
    mix=MixConfig(identities=20_000, windows=30, window=WINDOW, limit=100,
                  requests=5_300_000, seed=2026),
    burst_limits=(100, 10_000), retry_limits=(100, 1_000), memory_limits=(100, 10_000),
    memory_identities=20_000, log_identities=(2_000, 50))
QUICK = Config(
    mix=MixConfig(identities=400, windows=20, window=WINDOW, limit=100, requests=60_000,
                  seed=2026),
    burst_limits=(100,), retry_limits=(100,), memory_limits=(100, 10_000),
    memory_identities=2_000, log_identities=(100, 2))


def git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True).stdout.strip()


def machine() -> dict[str, Any]:
    cpu = "unknown"
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo")
                   if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return {"cpu": cpu, "cores": os.cpu_count(), "kernel": platform.release(),
            "python": platform.python_version(),
            "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
            "loadavg_start": [round(x, 2) for x in os.getloadavg()]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="small streams (seconds), for CI")
    ap.add_argument("--server", help="redis-server binary (default: Redis 7.0, $REDIS_SERVER "
                                      "or the first redis-server 7 on PATH)")
    ap.add_argument("--module", default=str(MODULE))
    ap.add_argument("--out", help="directory for the results (default bench/results, "
                                  "bench/results/quick with --quick)")
    ap.add_argument("--render", metavar="JSON",
                    help="only rewrite the Markdown and the chart beside an accuracy.json")
    args = ap.parse_args()
    if args.render:
        saved = json.loads(Path(args.render).read_text())
        out = Path(args.out) if args.out else default_out(saved["quick"])
        write(saved, out, raw=False)
        return
    cfg = QUICK if args.quick else FULL
    out = Path(args.out) if args.out else default_out(args.quick)
    module = Path(args.module).resolve()
    if not module.exists():
        sys.exit(f"{module} is missing: run `make build`")
    binary = (shutil.which(args.server) or args.server) if args.server else KINDS["redis7"].binary
    started = time.perf_counter()
    report: dict[str, Any] = {
        "command": "make accuracy" + (" ARGS=--quick" if args.quick else ""),
        "commit": git("rev-parse", "--short", "HEAD"),
        "module_source_modified": bool(git("status", "--porcelain", "--", "src", "crates",
                                               "Cargo.toml")),
        "module": str(module),
        "module_sha256": hashlib.sha256(module.read_bytes()).hexdigest()[:16],
        "machine": machine(), "quick": args.quick}
    with start_server(binary, module) as srv:
        report["server"] = srv.name
        with_limit = supports_limit(srv)
        report["limit_option"] = with_limit
        log(f"{srv.name} on port {srv.port}, module {module.name}"
            + ("" if with_limit else " (no LIMIT option: the LIMIT row is left out)"))
        report["phase_seconds"] = {}
        for name, run in (("mix", run_mix), ("adversarial", run_adversarial),
                          ("memory", run_memory)):
            phase = time.perf_counter()
            report[name] = run(srv, cfg, with_limit)
            report["phase_seconds"][name] = round(time.perf_counter() - phase, 1)
    report["seconds"] = round(time.perf_counter() - started, 1)
    report["machine"]["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]

    write(report, out, raw=True)
    log(f"(whole run {report['seconds']} s)")


def default_out(quick: bool) -> Path:
    return REPO / "bench" / "results" / ("quick" if quick else "")


def write(report: dict[str, Any], out: Path, raw: bool) -> None:
    """accuracy.md, the chart and a compact accuracy.json (no series) in `out`; with
    `raw`, the whole report under target/bench/ too (what --render takes)."""
    out.mkdir(parents=True, exist_ok=True)
    written = [out / "accuracy.json", out / "accuracy.md"]
    (out / "accuracy.json").write_text(compact_json(without(report, "series"), 4))
    (out / "accuracy.md").write_text(render_markdown(report))
    if draw_chart(report, out / "accuracy.png"):
        written.append(out / "accuracy.png")
    if raw:  # the series too, for --render
        written.append(write_raw(report, f"accuracy-{'quick' if report['quick'] else 'full'}.json"))
    log(f"\nwritten: {', '.join(str(w) for w in written)}")

