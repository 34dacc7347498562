"""End-to-end requests per second through the example ASGI gateway (uvicorn) under a
flood from one refused identity mixed with normal traffic, with and without the deny
cache, and the Redis CHECK calls per request (INFO commandstats) in each.

    python3 bench/gateway_flood.py              # -> bench/results/gateway_flood.{json,md}
    python3 bench/gateway_flood.py --quick      # a few seconds, writes nothing committed

The gateway is examples/gateway/app.py under uvicorn (one worker), its limiter on a
fresh redis-server with the module; DENY_CACHE=1/0 switches the cache. The load: `--conc`
keep-alive HTTP clients (httpx, one process on the same machine, so the client's own
cost is part of the figure): 90% of requests from the one flooding API key (policy
"api": 5 per 10 s, so nearly all refused), 10% normal (the other demo key, and /health).
Results name their commit; `make bench` runs it after bench.py, `make bench-quick` not.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import httpx
import redis

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "examples" / "gateway"))
sys.path.insert(0, str(ROOT / "testing" / "python" / "src"))
sys.path.insert(0, str(ROOT / "clients" / "python" / "src"))

from slidingwindow_testing import RedisServer  # noqa: E402
from uvicorn_proc import Gateway  # noqa: E402


def check_calls(r: redis.Redis) -> int:
    stats = r.info("commandstats")
    return int(stats.get("cmdstat_slidingwindow.check", {}).get("calls", 0))


async def load(url: str, seconds: float, conc: int) -> dict[str, int]:
    codes: dict[str, int] = {}
    end = time.monotonic() + seconds
    limits = httpx.Limits(max_connections=conc, max_keepalive_connections=conc)
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=10) as http:
        async def client(n: int) -> None:
            i = 0
            while time.monotonic() < end:
                i += 1
                if (n + i) % 10 == 0:  # normal traffic: another identity, and health
                    path = "/health" if i % 2 else "/api/hello"
                    headers = {"X-API-Key": "demo-key-2"}
                else:  # the flood: one identity, refused nearly always
                    path, headers = "/api/hello", {"X-API-Key": "demo-key-1"}
                response = await http.get(path, headers=headers)
                codes[str(response.status_code)] = codes.get(str(response.status_code), 0) + 1

        await asyncio.gather(*(client(n) for n in range(conc)))
    return codes


def run(cached: bool, seconds: float, conc: int) -> dict[str, object]:
    server = RedisServer().start()
    try:
        gateway = Gateway(REDIS_URL=f"redis://127.0.0.1:{server.port}/0",
                          DENY_CACHE="1" if cached else "0")
        try:
            r = redis.Redis(port=server.port)
            asyncio.run(load(gateway.url, 1.0, conc))  # warm up, refusals in place
            before = check_calls(r)
            t0 = time.monotonic()
            codes = asyncio.run(load(gateway.url, seconds, conc))
            took = time.monotonic() - t0
            calls = check_calls(r) - before
        finally:
            gateway.stop()
    finally:
        server.cleanup()
    total = sum(codes.values())
    return {"deny_cache": cached, "requests": total, "seconds": round(took, 2),
            "req_per_s": round(total / took), "codes": codes, "check_calls": calls,
            "check_calls_per_request": round(calls / total, 4)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--conc", type=int, default=32)
    args = ap.parse_args()
    seconds = 2.0 if args.quick else args.seconds
    rows = [run(True, seconds, args.conc), run(False, seconds, args.conc)]
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                            capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain", "--", ".", ":!bench/results"],
                           cwd=ROOT, capture_output=True, text=True).stdout.strip()
    meta = {"commit": commit + (" (dirty)" if dirty else ""), "machine": platform.node(),
            "cpus": os.cpu_count(), "load": os.getloadavg(), "seconds": seconds,
            "concurrency": args.conc}
    lines = [f"# Gateway flood: deny cache on/off (commit {meta['commit']})", "",
             f"uvicorn examples/gateway (1 worker), {args.conc} keep-alive clients, "
             f"{seconds:g} s each, 90% from one refused API key, 10% normal; load "
             f"{meta['load'][0]:.1f} on {meta['cpus']} cores.", "",
             "| deny cache | requests | req/s | 200 | 429 | CHECK calls | calls per request |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for row in rows:
        codes = row["codes"]
        assert isinstance(codes, dict)
        lines.append(f"| {'on' if row['deny_cache'] else 'off'} | {row['requests']} | "
                     f"{row['req_per_s']} | {codes.get('200', 0)} | {codes.get('429', 0)} | "
                     f"{row['check_calls']} | {row['check_calls_per_request']} |")
    text = "\n".join(lines) + "\n"
    print(text)
    out = ROOT / "bench" / "results" / ("quick" if args.quick else "")
    out.mkdir(parents=True, exist_ok=True)
    (out / "gateway_flood.md").write_text(text)
    (out / "gateway_flood.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
