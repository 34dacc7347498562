"""The client benchmarks' README figures: each renders one committed results file
(bench/results/<client>.json) for bench/readme_blocks.py."""

from __future__ import annotations

import json
from pathlib import Path
from statistics import median

RESULTS = Path(__file__).resolve().parent / "results"

NAMES = {"none": "no limiter", "slidingwindow": "ours", "slidingwindow-nocache":
         "ours, deny cache off", "slidingwindow-denycache": "ours + deny cache",
         "httprate-redis": "httprate-redis", "redis_rate": "redis_rate v10",
         "redis": "RedisRateLimiter", "bucket4j": "bucket4j",
         "asgi-none": "FastAPI, no limiter", "asgi-slidingwindow": "FastAPI + ours (ASGI)",
         "asgi-slowapi": "FastAPI + slowapi", "wsgi-none": "Flask, no limiter",
         "wsgi-slidingwindow": "Flask + ours (WSGI)", "wsgi-flask-limiter": "Flask + flask-limiter",
         "express-none": "Express, no limiter", "express-slidingwindow":
         "Express + ours (express-rate-limit)", "express-slidingwindow-nocache":
         "Express + ours, deny cache off", "express-rate-limit-redis":
         "Express + rate-limit-redis", "fastify-none": "Fastify, no limiter",
         "fastify-slidingwindow": "Fastify + ours (@fastify/rate-limit)",
         "fastify-slidingwindow-nocache": "Fastify + ours, deny cache off",
         "fastify-redis": "Fastify + its Redis store"}


def _m(values: list[float], digits: int) -> str:
    return f"{median(values):,.{digits}f}" if values else "-"


def client_bench(app: str) -> str:
    """bench/results/<app>.json (make bench-<app>, bench/harness): the traffic
    table and the overshoot table."""
    path = RESULTS / f"{app}.json"
    if not path.exists():
        return (f"No committed run yet: `make bench-{app}` writes bench/results/{app}.json, "
                "then `python3 bench/readme_blocks.py` puts its tables here.")
    r = json.loads(path.read_text())
    head = (f"`make bench-{app}` on Redis 7: {r['connections']} connections, {r['duration_s']:g} s "
            f"per run, the median of {r['rounds']} alternating rounds; app CPU at a fixed "
            f"{r['paced_rate']:g} req/s; {r['cores']} cores, load average "
            f"{r['load_average']} at the end. `allowed`: every request allowed (10,000 "
            "identities); `hot`: 90% of the requests from one refused identity.")
    rows = ["| traffic | limiter | server | req/s | p50 ms | p99 ms | Redis us/request "
            "| app CPU us/request |", "|---|---|---|---|---|---|---|---|"]
    for x in r["rows"]:
        rows.append(f"| {x['traffic']} | {NAMES.get(x['variant'], x['variant'])} "
                    f"| {x['server']} | {_m(x['req_per_sec'], 0)} | {_m(x['p50_ms'], 2)} "
                    f"| {_m(x['p99_ms'], 2)} | {_m(x['server_usec_per_request'], 2)} "
                    f"| {_m(x['cpu_usec_per_request'], 1)} |")
    o = r["overshoot"]
    shoot = [f"Overshoot: 64 connections over {o[0].get('instances', 8)} app processes (one "
             "limiter each, one Redis), one "
             f"identity, {o[0]['limit']} per {o[0]['window_s']} s for {o[0]['seconds']:g} s, "
             "every answer, as the callers saw it, judged against an exact sliding log from "
             "the third window on "
             "(Retry-After error: what it said minus the exact wait, in s).", "",
             "| limiter | allowed | most in any true window | refused within the limit "
             "| Retry-After error: median | most late | most early |",
             "|---|---|---|---|---|---|---|"]
    for v in o:
        shoot.append(f"| {NAMES.get(v['variant'], v['variant'])} | {v['allowed']:,} "
                     f"| {v['most_in_any_window']} | {v['wrongly_refused']:,} "
                     f"| {v['retry_after_median_err']:.2f} | {v['retry_after_worst_late']:.2f} "
                     f"| {v['retry_after_worst_early']:.2f} |")
    return head + "\n\n" + "\n".join(rows) + "\n\n" + "\n".join(shoot)
