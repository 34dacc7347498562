"""The results: what was measured where (commit, servers, machine), latest.md, the chart,
and the README's Performance table, all from one report dict (latest.json)."""

from __future__ import annotations

import datetime as dt
import hashlib
import os
import platform
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from compact import compact_json, without
from targets import SOURCES, TARGETS, Target, judged

ROOT = Path(__file__).resolve().parent.parent
# The benchmark's own outputs: a tree that differs from its commit only there measured
# that commit.
OUTPUTS = ("bench/results/",)
README_BEGIN = "<!-- bench:begin (bench/bench.py --update-readme writes this block) -->"
README_END = "<!-- bench:end -->"


STARTED = time.monotonic()


def log(msg: str) -> None:
    print(f"[{time.monotonic() - STARTED:6.1f}s] {msg}", file=sys.stderr, flush=True)


def git(*args: str) -> str:
    r = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)
    return r.stdout if r.returncode == 0 else ""


def source_state() -> dict[str, Any]:
    """The commit measured, and whether the tree had changes (outside the outputs)."""
    changed = [line[3:] for line in git("status", "--porcelain").splitlines()
               if not line[3:].startswith(OUTPUTS)]
    commit = git("rev-parse", "HEAD").strip() or "unknown"
    return dict(git_commit=commit, git_dirty=bool(changed), git_changes=changed[:50],
                commit_text=commit + (" dirty" if changed else ""))


def module_info(module: Path) -> dict[str, Any]:
    return dict(module=str(module),
                module_sha256=hashlib.sha256(module.read_bytes()).hexdigest()[:16],
                module_mtime=dt.datetime.fromtimestamp(module.stat().st_mtime).isoformat(
                    timespec="seconds"))


def machine_info() -> dict[str, Any]:
    cpu = "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass  # not Linux: the CPU stays unnamed
    return dict(cpu=cpu, cores=os.cpu_count(), kernel=platform.release(),
                python=platform.python_version(),
                date=dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC"),
                loadavg_start=os.getloadavg(), **source_state())


def jsonable(o: Any) -> Any:
    if isinstance(o, dict):
        return {str(k): jsonable(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [jsonable(v) for v in o]
    return o


def write_compact(rep: dict[str, Any], path: Path) -> None:
    """The committed latest.json: `rep` without its samples (every "runs" list), one
    line per case: what the tables, the targets and the README are made from."""
    path.write_text(compact_json(without(jsonable(rep), "runs"), 4))


def p(d: dict[Any, Any], key: int) -> Any:
    """A pipeline-keyed entry, in a fresh report (int keys) or a loaded one (str keys)."""
    return d[key] if key in d else d[str(key)]


def case_rows(report: dict[str, Any]) -> list[tuple[str, str]]:
    """(key, label) of every case measured on any server, in table order."""
    seen: dict[str, str] = {}
    for s in report["servers"]:
        for k, c in s.get("commands", {}).items():
            seen.setdefault(k, c["label"])
    return list(seen.items())


def verified_text(c: dict[str, Any]) -> str:
    f = c.get("allowed_fraction")
    if f is None:
        text = "no errors"
    elif c["expect"] == "denied":
        text = f"{(1 - f) * 100:.1f}% denied"
    elif c["expect"] == "allowed":
        text = f"{f * 100:.1f}% allowed"
    else:
        text = f"{f * 100:.1f}% allowed, the rest denied"
    return text if c["verified"] else "**NOT VERIFIED** " + text


def fmt(v: float | None, digits: int = 3) -> str:
    return "-" if v is None else f"{v:.{digits}f}"


def result_text(row: dict[str, Any], judged_target: bool, quick: bool) -> str:
    """met / missed (and where) for one target's row on the judged server."""
    oks = [ok for ok in row["ok"].values() if ok is not None]
    if not oks:
        return "not measured" if judged_target else ""
    if all(oks):
        res = "met"
    else:
        res = "**missed** (" + ", ".join(s for s, ok in row["ok"].items() if ok is False) + ")"
    return f"({res.replace('**', '')}; quick: not judged)" if quick else res


def ratio_table(report: dict[str, Any], rows: list[Target]) -> list[str]:
    """Each target's ratio on every server (driver P32 / plain), and its result on the
    judged server: the other servers are reported, not judged."""
    servers = report["servers"]
    srv = judged(report)
    L = ["| ratio | bound | " + " | ".join(s["server"] for s in servers) + " | result ("
         + (srv["server"] if srv else "-") + ") |",
         "|---|---:|" + "---:|" * len(servers) + "---|"]
    for t in rows:
        cells = []
        for s in servers:
            v = s["ratios"][t.id]["values"]
            cells.append(fmt(v.get("memory")) if t.kind == "memory"
                         else " / ".join(fmt(v.get(src)) for src in SOURCES))
        res = result_text(srv["ratios"][t.id], t.op is not None,
                          report["mode"] == "quick") if srv else ""
        L.append(f"| {t.label} | {t.bound_text()} | " + " | ".join(cells) + f" | {res} |")
    return L


def render_markdown(report: dict[str, Any]) -> str:
    m, cfg, servers = report["machine"], report["config"], report["servers"]
    names = [s["server"] for s in servers]
    L = ["# redis-slidingwindow benchmark", ""]
    mode = {"full": "full", "quick": "QUICK (small counts, targets not judged)",
            "plain": "plain conditions only"}[report["mode"]]
    L.append(f"- commit {m['commit_text']}; {m['date']}; mode: {mode}; took "
             f"{report['seconds']:.0f} s")
    if m["git_dirty"]:
        L.append(f"- uncommitted changes: {', '.join(m['git_changes'])}")
    L.append(f"- module: {m['module']} (sha256 {m['module_sha256']}, built "
             f"{m['module_mtime']})")
    L.append(f"- machine: {m['cpu']}, {m['cores']} cores, Linux {m['kernel']}; load average "
             f"at start {m['loadavg_start'][0]:.2f}, at end {m['loadavg_end'][0]:.2f}")
    for s in servers:
        L.append(f"- {s['server']} ({s['short']}): {s['binary']}, allocator "
                 f"{s['mem_allocator']}")
    L.append(f"- driver: {cfg['keyspace']:,}-id warm keyspace per case, each case in a "
             f"database of its own; server time = the 25th percentile of {cfg['repeats']} "
             f"runs of {cfg['n32']:,} calls at pipeline 32 (and of {cfg['n1']:,} calls at "
             f"pipeline 1), the cases interleaved; window {report['window']} s; explicit "
             f"`now` = the run's start unless \"server clock\"")
    if any(s.get("plain") for s in servers):
        L.append(f"- plain conditions: redis-benchmark, 50 clients x pipeline 32, "
                 f"{cfg['plain_n']:,} calls per run, `-r {cfg['keyspace']}` for warm keys and "
                 f"`-r 2147483647` into an emptied database for new keys; the median of "
                 f"{cfg['plain_runs']} alternating runs")
    L.append(f"- stream: {report['stream']['ids']:,} ids, P(rank k) ~ 1/k^"
             f"{report['stream']['exponent']}, limit {report['stream']['limit']} per "
             f"{report['stream']['window']} s, {cfg['stream_warm']:,} calls of history first, "
             f"runs of {cfg.get('stream_n32', cfg['n32']):,} calls at pipeline 32 (and of "
             f"{cfg.get('stream_n1', cfg['n1']):,} at pipeline 1)")
    L.append("")

    srv = judged(report)
    if srv is not None:
        L.append(f"## Targets ({srv['server']})\n")
        L.append("| target | driver P32 | driver P1 | plain | bound | result |")
        L.append("|---|---:|---:|---:|---:|---|")
        quick = report["mode"] == "quick"
        for t in TARGETS:
            row = srv["ratios"][t.id]
            v = row["values"]
            if t.kind == "memory":
                cells = [fmt(v.get("memory")), "", ""]
            else:
                cells = [fmt(v.get("driver")), fmt(v.get("driver_p1")), fmt(v.get("plain"))]
            res = result_text(row, t.op is not None, quick)
            L.append(f"| {t.label} | {' | '.join(cells)} | {t.bound_text()} | {res} |")
        L.append("")

    def server_table(title: str, get: Any, digits: int = 3) -> None:
        L.append(f"## {title}\n")
        L.append("| command | " + " | ".join(names) + " |")
        L.append("|---|" + "---:|" * len(names))
        for k, label in case_rows(report):
            cells = [get(s, k) for s in servers]
            if any(c is not None for c in cells):
                L.append(f"| {label} | " + " | ".join(
                    "-" if c is None else (c if isinstance(c, str) else f"{c:.{digits}f}")
                    for c in cells) + " |")
        L.append("")

    if any(s.get("cases") for s in servers):
        def drv(pipe: int) -> Any:
            def get(s: dict[str, Any], k: str) -> str | None:
                c = s.get("cases", {}).get(k)
                if c is None:
                    return None
                sp = p(c["usec_per_call_spread"], pipe)
                return f"{p(c['usec_per_call'], pipe):.3f} ±{(sp['q3'] - sp['q1']) / 2:.2f}"
            return get

        server_table("Server µs per call, driver, pipeline 32 (± half the interquartile "
                     "range of the runs)", drv(32))
    if any(s.get("plain") for s in servers):
        server_table("Server µs per call, plain conditions (redis-benchmark 50 x P32, median)",
                     lambda s, k: s.get("plain", {}).get(k, {}).get("usec_per_call"))
        server_table("Throughput, plain conditions (redis-benchmark ops/s, median)",
                     lambda s, k: s.get("plain", {}).get(k, {}).get("rps"), 0)
    if any(s.get("cases") for s in servers):
        server_table("Server µs per call, driver, pipeline 1", drv(1))

    L.append("## Ratios on every server (driver P32 / plain)\n")
    L += ratio_table(report, TARGETS)
    L.append("")

    if any(s.get("latency") for s in servers):
        L.append("## Latency without pipelining (µs, client round trip; one connection per "
                 "command, alternating)\n")
        L.append("| command | " + " | ".join(f"{n} p50 / p99" for n in names) + " |")
        L.append("|---|" + "---:|" * len(names))
        for k in servers[0].get("latency", {}):
            label = servers[0]["commands"][k]["label"]
            L.append(f"| {label} | " + " | ".join(
                f"{s['latency'][k]['p50_us']:.1f} / {s['latency'][k]['p99_us']:.1f}"
                for s in servers) + " |")
        L.append("")
    if any(s.get("memory") for s in servers):
        L.append(f"## Memory per tracked identity (bytes; {cfg['identities']:,} identities, "
                 "one request in a window and one in the next)\n")
        layouts = list(servers[0]["memory"])
        L.append("| layout | keys per identity | " + " | ".join(names) + " |")
        L.append("|---|---:|" + "---:|" * len(names))
        for lay in layouts:
            kpi = servers[0]["memory"][lay]["keys_per_identity"] or "-"
            L.append(f"| {lay} | {kpi} | " + " | ".join(
                fmt(s["memory"].get(lay, {}).get("bytes_per_identity"), 1) for s in servers)
                + " |")
        L.append("")
    if any(s.get("cases") for s in servers):
        L.append("## Replies (driver, every run of every case checked)\n")
        L.append("| command | " + " | ".join(names) + " |")
        L.append("|---|" + "---|" * len(names))
        for k, label in case_rows(report):
            L.append(f"| {label} | " + " | ".join(
                verified_text(s["cases"][k]) if k in s.get("cases", {}) else "-"
                for s in servers) + " |")
        L.append("")
    L.append("## Commands (`<id>`: 12 digits; the driver's warm ids and redis-benchmark's "
             "`__rand_int__` name the same keys)\n")
    for k, c in servers[0].get("commands", {}).items():
        L.append(f"- {c['label']} ({c['keys']} keys): `{c['command']}`"
                 + (f" — {c['note']}" if c["note"] else ""))
    if servers and servers[0].get("plain"):
        L.append("")
        L.append("redis-benchmark command lines (plain conditions):\n")
        for k, c in servers[0]["plain"].items():
            L.append(f"- `redis-benchmark {c['command']}`")
    L.append("")
    return "\n".join(L)


# --------------------------------------------------------------------------- README


# A load average from which the README says the figures are a loaded machine's.
LOADED = 1.5
LOADED_NOTE = (": a loaded machine, where the ratios moved by tens of percent from one "
               "run to the next; provisional until re-run on a quiet one")
README_ROWS = ["check", "check_clock", "setpxat", "check_new", "check_new_clock", "setpxat_new",
               "check_aged", "check_aged_clock", "get", "peek", "denied", "details", "check3",
               "seed", "stream_check", "stream_lua", "stream_seed"]


def readme_block(report: dict[str, Any]) -> str:
    """The README's Performance tables, from a full run's report: every figure in them is
    in it."""
    if report["mode"] != "full":
        raise SystemExit(f"--update-readme: a {report['mode']} run does not go in the README")
    servers, m = report["servers"], report["machine"]
    L = [README_BEGIN, "",
         f"Measured by `make bench` at commit {m['commit_text'][:12]}"
         f"{' (uncommitted changes)' if m['git_dirty'] else ''}, {m['date']}, "
         f"{m['cpu']} ({m['cores']} cores; load average {m['loadavg_start'][0]:.2f} at the "
         f"start{LOADED_NOTE if m['loadavg_start'][0] >= LOADED else ''}). Server µs per "
         f"call, driver, pipeline 32 (25th percentile of {report['config']['repeats']} "
         "interleaved runs):", "",
         "| command | " + " | ".join(s["server"] for s in servers) + " |",
         "|---|" + "---:|" * len(servers)]
    for k in README_ROWS:
        if k in servers[0].get("cases", {}):
            L.append(f"| {servers[0]['commands'][k]['label']} | " + " | ".join(
                fmt(p(s["cases"][k]["usec_per_call"], 32), 2) if k in s["cases"] else "-"
                for s in servers) + " |")
    for lay in servers[0].get("memory", {}):
        L.append(f"| memory per identity, {lay} | " + " | ".join(
            fmt(s["memory"].get(lay, {}).get("bytes_per_identity"), 0) + " B"
            for s in servers) + " |")
    srv = judged(report)
    L += ["", f"Targets, judged on {srv['server'] if srv else '-'}; the other servers' "
          "ratios are reported alongside (driver P32 / plain: redis-benchmark 50 clients x "
          "pipeline 32, median of runs; `-` where a measurement does not cover it):", ""]
    L += ratio_table(report, [t for t in TARGETS if t.op])
    L += ["", README_END]
    return "\n".join(L)


def update_readme(report: dict[str, Any], readme: Path) -> None:
    text = readme.read_text()
    if README_BEGIN not in text or README_END not in text:
        raise SystemExit(f"{readme}: no {README_BEGIN!r} ... {README_END!r} block")
    pattern = re.escape(README_BEGIN) + ".*?" + re.escape(README_END)
    readme.write_text(re.sub(pattern, lambda _: readme_block(report), text, flags=re.S))


# --------------------------------------------------------------------------- chart


def draw_chart(report: dict[str, Any], path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log("matplotlib missing (pip install -r bench/requirements.txt): no chart")
        return False
    servers = report["servers"]
    fig, axes = plt.subplots(1, 3, figsize=(18, 6), gridspec_kw={"width_ratios": [3, 2.2, 1]})
    width = 0.8 / max(1, len(servers))

    def bars(ax: Any, labels: list[str], values: list[list[float | None]], fmt_: str) -> None:
        for j, (s, vals) in enumerate(zip(servers, values)):
            xs = [i + (j - (len(servers) - 1) / 2) * width for i in range(len(labels))]
            ys = [v or 0 for v in vals]
            bs = ax.bar(xs, ys, width, label=s["server"])
            for b, v in zip(bs, vals):
                if v:
                    ax.text(b.get_x() + b.get_width() / 2, v, format(v, fmt_), ha="center",
                            va="bottom", fontsize=5, rotation=90)
        ax.set_xticks(range(len(labels)))
        ax.set_xticklabels(labels, rotation=40, ha="right", fontsize=7)
        ax.legend(fontsize=7)

    rows = [k for k, _ in case_rows(report) if k in servers[0].get("cases", {})]
    if rows:
        bars(axes[0], [servers[0]["commands"][k]["label"] for k in rows],
             [[p(s["cases"][k]["usec_per_call"], 32) if k in s.get("cases", {}) else None
               for k in rows] for s in servers], ".2f")
        axes[0].set_ylabel("server µs per call (INFO commandstats), pipeline 32")
        axes[0].set_title("Server time per call (driver)")
    judged_t = [t for t in TARGETS if t.op and t.kind == "time"]
    bars(axes[1], [t.label for t in judged_t],
         [[s["ratios"][t.id]["values"].get("driver") for t in judged_t] for s in servers], ".2f")
    for i, t in enumerate(judged_t):
        axes[1].hlines(t.bound, i - 0.45, i + 0.45, colors="black", linewidth=1)
    axes[1].set_title("Target ratios (driver P32); black line: the bound")
    mem = list(servers[0].get("memory", {}))
    if mem:
        bars(axes[2], mem, [[s["memory"].get(n, {}).get("bytes_per_identity") for n in mem]
                            for s in servers], ".0f")
        axes[2].set_ylabel("bytes per identity")
        axes[2].set_title(f"Memory at {report['config']['identities']:,} identities")
    m = report["machine"]
    fig.suptitle(f"redis-slidingwindow, commit {m['commit_text'][:12]}"
                 f"{' dirty' if m['git_dirty'] else ''}, {m['date']}"
                 + (" (QUICK)" if report["mode"] == "quick" else ""), fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True
