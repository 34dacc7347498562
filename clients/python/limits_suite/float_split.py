"""How often limits' Python estimate and the module's differ by one (README figure).

limits' strategy computes `test()` and `get_window_stats()` in Python from what
`get_sliding_window` returns: previous * previous_ttl / expiry + current, the TTL in
seconds. The module computes previous * ((window - elapsed) / window) + current in
milliseconds. Equal in exact arithmetic; in floating point, when the estimate is an exact
integer, the two can round to opposite sides of it and floor to different numbers.

This counts such cases over a grid, then replays every one of them on a real server with
the module (PEEK with an explicit `now`) to check that the module's side was modelled
right. Usage: python float_split.py   (needs target/release/libredis_slidingwindow.so)
"""

from __future__ import annotations

import math

import redis
from slidingwindow.storage.commands import sliding_window
from slidingwindow_testing import RedisServer

EXPIRIES = (1, 2, 10, 60, 3600)  # seconds
PREVIOUS = range(1, 301)
SAMPLES = 2000  # elapsed values per window and count, evenly spaced


def module_estimate(previous: int, window: int, elapsed: int) -> int:
    """crates/core/src/window.rs: weight, multiply, add, floor (current is 0 here)."""
    return math.floor(previous * ((window - elapsed) / window) + 0)


def limits_estimate(previous: int, expiry: int, elapsed: int) -> int:
    """limits' strategy on our get_sliding_window tuple (strategies.py, _weighted_count)."""
    prev, prev_ttl, current, _ = sliding_window([previous, 0, elapsed], expiry)
    return math.floor(prev * prev_ttl / expiry + current)


def main() -> None:
    cases, split = 0, []
    for expiry in EXPIRIES:
        window = expiry * 1000
        step = max(1, window // SAMPLES)
        for previous in PREVIOUS:
            for elapsed in range(0, window, step):
                cases += 1
                m = module_estimate(previous, window, elapsed)
                if m != limits_estimate(previous, expiry, elapsed):
                    split.append((expiry, previous, elapsed, m))
    server = RedisServer().start()
    try:
        r = redis.Redis(port=server.port)
        for i, (expiry, previous, elapsed, m) in enumerate(split):
            window, key, index = expiry * 1000, f"split:{i}", 1_000_000
            r.execute_command("SLIDINGWINDOW.CHECK", key, previous, window,
                              (index - 1) * window, "COST", previous, "MS")
            allowed, count = r.execute_command("SLIDINGWINDOW.PEEK", key, 2**53 - 1, window,
                                               index * window + elapsed, "MS")
            assert allowed == 1 and count == m + 1, (expiry, previous, elapsed, m, count)
    finally:
        server.cleanup()
    higher = sum(1 for e, p, el, m in split if m > limits_estimate(p, e, el))
    print(f"{cases} cases, {len(split)} differ by one ({higher} with the module higher), "
          f"every one confirmed on the server")


if __name__ == "__main__":
    main()
