"""Seeded request streams, in simulated milliseconds.

`realistic_mix`: many identities whose mean rates follow a heavy-tailed (log-normal)
spread, most well under the limit and a few far above it, each with one shape:

- steady: a Poisson process at its rate;
- on-off: Poisson at rate / duty while "on", silent while "off" (exponential periods);
- bursts: bursts arriving as a Poisson process, each of a heavy-tailed (Pareto) number
  of requests, 0 to 2 ms apart;
- late: silent, then from a random moment inside some window a Poisson stream at 1.5 to
  4 x the limit for 1 to 3 windows: clients that start above the limit mid-window.

`burst_then_stream`, `double_burst`: the adversarial open-loop patterns (the closed-loop
one, retrying at `retry_after`, is in drive.py). Streams are returned sorted by
(identity, time).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

KINDS = ("steady", "on-off", "bursts", "late")
SHARES = (0.55, 0.25, 0.17, 0.03)
RATE_SIGMA = 1.5  # log-normal spread of the identities' mean rates
RATE_CAP = 20  # x the limit: the heaviest identity's mean rate
PARETO_ALPHA = 1.2  # burst sizes: P(size > s) ~ s^-1.2
BURST_CAP = 3  # x the limit: the largest burst


@dataclass
class Stream:
    ident: np.ndarray  # int64, sorted
    t: np.ndarray  # int64 ms, sorted within each identity
    kind: np.ndarray  # per identity 0..n-1: index into KINDS
    duration: int  # ms

    def __len__(self) -> int:
        return len(self.t)


@dataclass
class MixConfig:
    identities: int
    windows: int
    window: int  # ms
    limit: int
    requests: int  # expected total; the run reports the actual one
    seed: int


def _sorted(ident: np.ndarray, t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    o = np.lexsort((t, ident))
    return ident[o].astype(np.int64), t[o].astype(np.int64)


def _poisson_in(rng: np.random.Generator, who: np.ndarray, start: np.ndarray,
                end: np.ndarray, per_ms: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Poisson arrivals at `per_ms` in each interval [start, end) of identity `who`."""
    n = rng.poisson(per_ms * (end - start))
    s = np.repeat(start, n).astype(np.float64)
    span = np.repeat(end - start, n)
    return np.repeat(who, n), np.floor(s + rng.random(len(s)) * span)


def _on_off_intervals(rng: np.random.Generator, ids: np.ndarray, duration: int,
                      window: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(who, start, end, duty): alternating exponential on/off periods; mean "on" of
    0.1 to 1 window, duty cycle 10% to 50%, starting at a random phase."""
    who, starts, ends, duties = [], [], [], []
    for i in ids:
        duty = rng.uniform(0.1, 0.5)
        on_mean = window * rng.uniform(0.1, 1.0)
        off_mean = on_mean * (1 - duty) / duty
        at = -rng.exponential(off_mean + on_mean)
        while at < duration:
            on = rng.exponential(on_mean)
            if at + on > 0:
                who.append(i)
                starts.append(max(at, 0.0))
                ends.append(min(at + on, duration))
                duties.append(duty)
            at += on + rng.exponential(off_mean)
    return np.array(who, dtype=np.int64), np.array(starts), np.array(ends), np.array(duties)


def _bursts(rng: np.random.Generator, ids: np.ndarray, per_ms: np.ndarray, duration: int,
            limit: int) -> tuple[np.ndarray, np.ndarray]:
    sizes_mean = _capped_pareto_mean(limit)
    n_bursts = rng.poisson(per_ms * duration / sizes_mean)
    who = np.repeat(ids, n_bursts)
    start = rng.random(len(who)) * duration
    size = np.minimum(np.floor(rng.pareto(PARETO_ALPHA, len(who)) + 1), BURST_CAP * limit)
    size = size.astype(np.int64)
    # request k of a burst: start + the sum of k gaps of 0..2 ms
    first = np.concatenate(([0], np.cumsum(size)[:-1]))
    gaps = rng.integers(0, 3, int(size.sum()))
    gaps[first[size > 0]] = 0
    cum = np.cumsum(gaps)
    offset = cum - np.repeat(cum[first] if len(cum) else first, size)
    t = np.floor(np.repeat(start, size)) + offset
    return np.repeat(who, size), t


def _capped_pareto_mean(limit: int) -> float:
    """E[min(floor(Pareto + 1), cap)], from a fixed sample (does not touch the run's rng)."""
    x = np.random.default_rng(0).pareto(PARETO_ALPHA, 400_000)
    return float(np.minimum(np.floor(x + 1), BURST_CAP * limit).mean())


def realistic_mix(cfg: MixConfig) -> Stream:
    rng = np.random.default_rng(cfg.seed)
    n, w, limit = cfg.identities, cfg.window, cfg.limit
    duration = cfg.windows * w
    kind = rng.choice(len(KINDS), size=n, p=SHARES)
    late = np.flatnonzero(kind == KINDS.index("late"))
    late_rate = rng.uniform(1.5, 4.0, len(late)) * limit / w  # per ms
    late_len = rng.uniform(1.0, 3.0, len(late)) * w
    late_start = rng.uniform(2 * w, max(duration - 3 * w, 2 * w + 1), len(late))
    late_end = np.minimum(late_start + late_len, duration)
    late_expected = float((late_rate * (late_end - late_start)).sum())
    # the others: mean rates log-normal, scaled so that the expected total is cfg.requests
    raw = rng.lognormal(0.0, RATE_SIGMA, n)
    others = kind != KINDS.index("late")
    want = max(cfg.requests - late_expected, 0.0) / cfg.windows  # requests per window

    def total(scale: float) -> float:
        return float(np.minimum(raw[others] * scale, RATE_CAP * limit).sum())

    lo, hi = 0.0, 1.0
    while total(hi) < want:
        hi *= 2
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if total(mid) < want else (lo, mid)
    per_window = np.minimum(raw * hi, RATE_CAP * limit)
    per_ms = per_window / w

    parts = []
    steady = np.flatnonzero(kind == KINDS.index("steady"))
    zeros = np.zeros(len(steady))
    parts.append(_poisson_in(rng, steady, zeros, zeros + duration, per_ms[steady]))
    onoff = np.flatnonzero(kind == KINDS.index("on-off"))
    who, s, e, duty = _on_off_intervals(rng, onoff, duration, w)
    parts.append(_poisson_in(rng, who, s, e, per_ms[who] / duty))
    bursty = np.flatnonzero(kind == KINDS.index("bursts"))
    parts.append(_bursts(rng, bursty, per_ms[bursty], duration, limit))
    parts.append(_poisson_in(rng, late, late_start, late_end, late_rate))
    ident = np.concatenate([p[0] for p in parts])
    t = np.concatenate([p[1] for p in parts])
    keep = (t >= 0) & (t < duration)
    ident, t = _sorted(ident[keep], t[keep])
    return Stream(ident, t, kind, duration)


def burst_then_stream(limit: int, window: int, ident: int = 0, stream_rate: int = 5,
                      stream_windows: int = 3) -> Stream:
    """`limit` requests in the last millisecond of window 1, then a steady stream of
    `stream_rate` x the limit per window through the next `stream_windows` windows."""
    burst = np.full(limit, 2 * window - 1)
    k = np.arange(stream_rate * limit * stream_windows)
    stream = 2 * window + (k * window) // (stream_rate * limit)
    t = np.concatenate((burst, stream))
    i, t = _sorted(np.full(len(t), ident), t)
    return Stream(i, t, np.zeros(1, dtype=np.int64), (2 + stream_windows) * window)


def double_burst(limit: int, window: int, ident: int = 0) -> Stream:
    """`limit` requests in the last millisecond of window 1 and `limit` in the first
    millisecond of window 2."""
    t = np.concatenate((np.full(limit, 2 * window - 1), np.full(limit, 2 * window)))
    i, t = _sorted(np.full(len(t), ident), t)
    return Stream(i, t, np.zeros(1, dtype=np.int64), 3 * window)
