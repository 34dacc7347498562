"""accuracy.md and accuracy.png from the run's report (the dict written as JSON)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

ORDER = ("module", "module_limit", "module_limit_burst", "fixed", "log")
SHORT = {"module": "sliding window counter (module)",
         "module_limit": "module + LIMIT L/10 per W/10",
         "module_limit_burst": "module + LIMIT L/5 per W/10",
         "fixed": "fixed window", "log": "sliding log (exact)"}
COLOURS = {"module": "tab:blue", "module_limit": "tab:cyan", "module_limit_burst": "tab:purple",
           "fixed": "tab:red", "log": "tab:green"}


def pct(x: float) -> str:
    """A share as a percentage: 3 decimals below 1%, 1 above."""
    if not x:
        return "0"
    return f"{100 * x:.3f}%" if abs(x) < 0.01 else f"{100 * x:.1f}%"


def num(x: float) -> str:
    return f"{x:,}"


def xl(x: float) -> str:
    return f"{x:.2f}"


def spread(s: dict[str, Any]) -> str:
    return f"{xl(s['worst'])} / {xl(s['p99'])} / {xl(s['p50'])}" if s["n"] else "-"


def _table(head: list[str], rows: list[list[str]]) -> list[str]:
    out = ["| " + " | ".join(head) + " |", "|" + "---|" + "---:|" * (len(head) - 1)]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return out


def usec(x: dict[str, Any]) -> str:
    q = x.get("server_usec_q25")
    return f"{x['server_usec_per_request']:.2f}" + (f" ({q:.2f})" if q is not None else "")


def mix_table(mix: dict[str, Any]) -> list[str]:
    lims = [k for k in ORDER if k in mix["limiters"]]
    L = [mix["limiters"][k] for k in lims]

    def row(label: str, f: Any) -> list[str]:
        return [label] + [f(x) for x in L]

    def est(x: dict[str, Any], k: str) -> str:
        return pct(x["estimate"][k]) if "estimate" in x else "-"

    def share(x: dict[str, Any]) -> str:
        return f"{num(x['allowed'])} ({pct(x['allowed'] / x['requests'])})"

    def over(x: dict[str, Any]) -> str:
        return f"{num(x['let_over']['identities'])} (+{pct(x['let_over']['worst_excess'])})"

    def quiet(x: dict[str, Any]) -> str:
        a = x["same_history"]
        return f"{num(a['wrong_on_quiet_identities'])} of {num(a['requests_of_quiet_identities'])}"

    rows = [
        row("requests allowed", share),
        row("(a) same history: wrongly allowed / wrongly denied",
            lambda x: f"{num(x['same_history']['wrongly_allowed'])} / "
                      f"{num(x['same_history']['wrongly_denied'])}"),
        row("(a) share of requests decided differently",
            lambda x: pct(x["same_history"]["share_of_requests"])),
        row("(a) ... on the identities that never exceeded the limit", quiet),
        row("(a) identities ever wrongly denied / wrongly allowed",
            lambda x: f"{num(x['same_history']['identities_wrongly_denied'])} / "
                      f"{num(x['same_history']['identities_wrongly_allowed'])}"),
        row("(b) Cloudflare: wrongly allowed / wrongly limited",
            lambda x: f"{num(x['cloudflare']['wrongly_allowed'])} / "
                      f"{num(x['cloudflare']['wrongly_limited'])}"),
        row("(b) share of requests decided differently",
            lambda x: pct(x["cloudflare"]["share_of_requests"])),
        row("(b) identities ever limited while under the limit",
            lambda x: num(x["cloudflare"]["identities_wrongly_limited"])),
        row("(b) identities never over the limit, yet limited",
            lambda x: num(x["cloudflare"]["identities_never_over_but_limited"])),
        row("identities let over the limit in some true window (worst excess)", over),
        row("most allowed in a true window W, x limit: worst / p99 / p50",
            lambda x: spread(x["max_in_window"])),
        row("most allowed in any W/10, x limit: worst / p99 / p50",
            lambda x: spread(x["max_in_tenth"])),
        row("... clients starting above the limit mid-window (in W)",
            lambda x: spread(x["by_kind"]["late"]["max_in_window"])),
        row("estimate vs exact count: mean / worst relative error",
            lambda x: f"{est(x, 'mean_relative')} / {est(x, 'worst_relative')}"),
        row("... near the limit (exact >= limit/2): mean / worst",
            lambda x: f"{est(x, 'mean_relative_near_limit')} / "
                      f"{est(x, 'worst_relative_near_limit')}"),
        row("... worst over- / under-estimate, x limit",
            lambda x: f"{xl(x['estimate']['worst_over_in_limits'])} / "
                      f"{xl(x['estimate']['worst_under_in_limits'])}" if "estimate" in x
            else "-"),
        row("server time per request, us: whole run (low quartile of chunks)", usec),
    ]
    return _table([""] + [SHORT[k] for k in lims], rows)


def attack_table(adv: dict[str, Any]) -> list[str]:
    names = {"burst_then_stream": "full limit in the window's last ms, then a stream "
                                  "(5 x limit per window)",
             "double_burst": "double burst: limit at the last ms + limit at the first ms",
             "retry_after": "client retrying exactly at retry_after (1 ms apart when "
                            "allowed)"}
    lims = [k for k in ORDER if any(k in v for p in names for v in adv[p].values())]
    rows = []
    for p, label in names.items():
        for limit, res in adv[p].items():
            rows.append([label, num(int(limit))] + [
                f"{xl(res[k]['max_in_window'])} ({xl(res[k]['max_in_tenth'])})" if k in res
                else "-" for k in lims])
    return _table(["pattern", "limit"] + [SHORT[k] for k in lims], rows)


def memory_table(report: dict[str, Any]) -> list[str]:
    mem, mix = report["memory"], report["mix"]["limiters"]
    keys = ("module", "fixed", "log")
    rows = [[f"bytes per identity at limit {num(int(limit))} (at its limit)"]
            + [num(int(round(mem[limit][k]["bytes_per_identity"]))) for k in keys]
            for limit in mem]
    rows.append(["server us per request, realistic mix (limit "
                 f"{report['mix']['config']['limit']}): whole run (low quartile of chunks)"]
                + [usec(mix[k]) for k in keys])
    for limit in mem:
        rows.append([f"server us per request, sliding log at its limit {num(int(limit))}",
                     "", "", f"{mem[limit]['log']['fill_usec_per_request']:.2f}"])
    return _table([""] + [SHORT[k] for k in keys], rows)


def render_markdown(report: dict[str, Any]) -> str:
    mix, m = report["mix"], report["machine"]
    c = mix["config"]
    ex = next(iter(mix["limiters"].values()))
    held = next(iter(report["memory"].values()))
    late = ex["by_kind"]["late"]
    out = [
        "# Accuracy: sliding window counter, fixed window, sliding log",
        "",
        f"`{report['command']}` on {m['date']}: commit {report['commit']}"
        + (" (module source modified)" if report["module_source_modified"] else "")
        + f", module sha256 {report['module_sha256']}, {report['server']}, "
          f"{m['cpu']} ({m['cores']} cores, shared), load {m['loadavg_start'][0]} -> "
          f"{m['loadavg_end'][0]}. Whole run: {report['seconds']} s ("
        + ", ".join(f"{k} {v} s" for k, v in report["phase_seconds"].items()) + ").",
        "",
        "Every limiter ran on the same server with the same streams, in simulated time "
        "(explicit `now`, ms). Every reply was checked against the limiter's in-process "
        "reference on the same stream: "
        + "; ".join(f"{SHORT[k]}: {mix['limiters'][k]['verified']}"
                    for k in ORDER if k in mix["limiters"]) + ".",
        "",
        "## Realistic mix",
        "",
        f"{num(mix['requests'])} requests from {num(mix['identities'])} identities over "
        f"{c['windows']} windows of {c['window'] // 1000} s, limit {c['limit']} per window "
        f"(seed {c['seed']}). Kinds of identity: "
        + ", ".join(f"{k} {num(v)}" for k, v in mix["kinds"].items())
        + f". Requests per window per identity: median "
          f"{mix['requests_per_window_per_identity']['p50']:.1f}, p90 "
          f"{mix['requests_per_window_per_identity']['p90']:.1f}, p99 "
          f"{mix['requests_per_window_per_identity']['p99']:.1f}, max "
          f"{mix['requests_per_window_per_identity']['p100']:.1f}. "
          f"{num(ex['identities_exceeded'])} identities "
          f"({pct(ex['identities_exceeded'] / ex['identities'])}) sent more than the limit "
          f"into some true window ({late['exceeded']} of them start above the limit "
          f"mid-window); the others never did.",
        "",
        *mix_table(mix),
        "",
        "(a) judges each decision on the limiter's own history: allowed iff fewer than "
        "`limit` of the requests it allowed lie in (t - W, t]. (b) counts every request, "
        "allowed or not, as Cloudflare did: a request is wrongly allowed when more than "
        "`limit` requests were sent in its true window, wrongly limited when not. "
        "x limit figures: over the identities that sent more than the limit. The LIMIT "
        "columns are judged against the long limit alone: what the short limit refuses "
        "counts as a mistake there.",
        "",
        "## Adversarial patterns",
        "",
        "Most requests allowed inside one true window W, as a multiple of the limit "
        "(in brackets: inside any W/10):",
        "",
        *attack_table(report["adversarial"]),
        "",
        "Retries at retry_after that were denied: " + "; ".join(
            f"limit {limit}: " + ", ".join(f"{SHORT[k]} {v['retries_denied']} of "
                                           f"{num(v['retries_at_retry_after'])}"
                                           for k, v in res.items())
            for limit, res in report["adversarial"]["retry_after"].items()) + ".",
        "",
        "## Memory and server time",
        "",
        *memory_table(report),
        "",
        "Bytes per identity: used_memory after holding N identities at their limit, "
        f"minus before, over N (module and fixed window: {num(held['module']['identities'])}"
        " identities; the module's key holds L in the previous window and L/2 in this "
        "one, the fixed window's key L; the sliding log's sorted set L entries, "
        + " and ".join(f"{num(v['log']['identities'])} identities at limit {num(int(k))}"
                       for k, v in report["memory"].items()) + ").",
        "",
    ]
    return "\n".join(out)


def draw_chart(report: dict[str, Any], path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, (a1, a2, a3) = plt.subplots(1, 3, figsize=(16, 4.8))
    adv = report["adversarial"]["burst_then_stream"]
    limit = next(iter(adv))
    window = report["mix"]["config"]["window"]
    for k in ORDER:
        r = adv[limit].get(k)
        if r and "series" in r:
            t = [x / window for x in r["series"]["t"]]
            y = [v / int(limit) for v in r["series"]["allowed_in_window"]]
            a1.step(t, y, where="post", label=SHORT[k], color=COLOURS[k])
    a1.axhline(1, color="grey", lw=0.8, ls="--")
    a1.set(title=f"Full limit ({limit}) at the end of window 1, then a stream",
           xlabel="time (windows)", ylabel="allowed in the last W, x limit")
    a1.legend(fontsize=8)

    mix = report["mix"]["limiters"]
    lims = [k for k in ORDER if k in mix]
    stats = ("p50", "p99", "worst")
    width = 0.8 / len(lims)
    for i, k in enumerate(lims):
        s = mix[k]["max_in_window"]
        a2.bar([j + i * width for j in range(3)], [s[q] for q in stats], width,
               label=SHORT[k], color=COLOURS[k])
    a2.axhline(1, color="grey", lw=0.8, ls="--")
    a2.set_xticks([j + width * (len(lims) - 1) / 2 for j in range(3)], stats)
    a2.set(title="Realistic mix: most allowed in a true window\n(identities that exceeded "
                 "the limit)", ylabel="x limit")

    mem = report["memory"]
    keys = ("module", "fixed", "log")
    for i, k in enumerate(keys):
        a3.bar([j + i * 0.27 for j in range(len(mem))],
               [mem[lim][k]["bytes_per_identity"] for lim in mem], 0.27, label=SHORT[k],
               color=COLOURS[k])
    a3.set_yscale("log")
    a3.set_xticks([j + 0.27 for j in range(len(mem))], [f"limit {int(x):,}" for x in mem])
    a3.set(title="Memory per identity at its limit", ylabel="bytes (log scale)")
    a3.legend(fontsize=8)
    fig.suptitle(f"make accuracy, {report['server']}, commit {report['commit']}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True
