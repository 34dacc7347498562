"""In-process reference limiters and the exact "true window" counter.

A stream is two parallel integer arrays sorted by (identity, time): `ident` and `t`
(milliseconds). That order is the order in which one identity's requests are decided;
requests of different identities never affect each other, so the order between
identities does not matter. Every function here takes cost 1 per request.

- `window_start` / `count_before` / `max_in_window`: the exact counter used by the
  metrics: how many (allowed, or offered) requests of the same identity fall inside the
  true window `(t - span, t]`. Vectorised with numpy (a binary search per request).
- `fixed_window`: INCR + EXPIRE on `key:<t // window>`: allowed while the window's
  INCR result is <= limit. INCR counts denied requests too, which changes no decision.
- `sliding_log`: one log of allowed times per identity, trimmed to `(t - window, t]`;
  allowed while it holds fewer than `limit` entries. The exact limiter.
- `sliding_counter`: the seed's estimate, with the module's arithmetic (IEEE doubles:
  weight, multiply, add, floor), for one or several (limit, window) pairs: what
  SLIDINGWINDOW.CHECK must answer, request by request.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray

IntArray = NDArray[np.int64]
BoolArray = NDArray[np.bool_]


def _keys(ident: IntArray, t: IntArray, span: int) -> tuple[IntArray, int]:
    """ident * stride + t: one sorted axis on which a search never crosses identities."""
    stride = int(t.max(initial=0)) + span + 1
    if (int(ident.max(initial=0)) + 1) * stride >= 2**62:
        raise ValueError("identities x time span too large for int64 keys")
    return ident.astype(np.int64) * stride + t, stride


def window_start(ident: IntArray, t: IntArray, span: int) -> IntArray:
    """For each request, the index of the first request of its identity with time
    > t - span: the requests in its true window (t - span, t] start there."""
    keys, _ = _keys(ident, t, span)
    return np.searchsorted(keys, keys - span, side="right").astype(np.int64)


def count_before(ident: IntArray, t: IntArray, span: int, weights: np.ndarray) -> IntArray:
    """For each request, the sum of `weights` over the earlier requests (in stream
    order) of the same identity inside its true window (t - span, t]."""
    cum = np.concatenate(([0], np.cumsum(weights, dtype=np.int64)))
    idx = np.arange(len(t), dtype=np.int64)
    return cum[idx] - cum[window_start(ident, t, span)]


def identity_blocks(ident: IntArray) -> IntArray:
    """Index of the first request of each identity (ident sorted)."""
    if len(ident) == 0:
        return np.zeros(0, dtype=np.int64)
    return np.flatnonzero(np.concatenate(([True], ident[1:] != ident[:-1]))).astype(np.int64)


def max_in_window(ident: IntArray, t: IntArray, span: int, weights: np.ndarray) -> IntArray:
    """Per identity (in order of first appearance), the largest sum of `weights` inside
    any interval (x - span, x]. The best x is always some request's time, and the value
    there is reached at the last request of that millisecond."""
    cum = np.concatenate(([0], np.cumsum(weights, dtype=np.int64)))
    idx = np.arange(len(t), dtype=np.int64)
    inside = cum[idx + 1] - cum[window_start(ident, t, span)]
    if len(t) == 0:
        return inside
    return np.maximum.reduceat(inside, identity_blocks(ident))


def fixed_window(ident: IntArray, t: IntArray, limit: int, window: int) -> BoolArray:
    """INCR key:<t // window>, allowed while the result is <= limit."""
    keys, _ = _keys(ident, t // window, 1)
    first_in_window = np.searchsorted(keys, keys, side="left")
    return (np.arange(len(t)) - first_in_window) < limit


def fixed_window_counts(ident: IntArray, t: IntArray, window: int, weights: np.ndarray) -> IntArray:
    """For each request, the sum of `weights` over the earlier requests of the same
    identity in the same fixed window: what a fixed window believes the count is."""
    keys, _ = _keys(ident, t // window, 1)
    first_in_window = np.searchsorted(keys, keys, side="left")
    cum = np.concatenate(([0], np.cumsum(weights, dtype=np.int64)))
    return cum[np.arange(len(t))] - cum[first_in_window]


def sliding_log(ident: Sequence[int], t: Sequence[int], limit: int, window: int) -> BoolArray:
    """The exact limiter: allowed while fewer than `limit` allowed requests of the
    identity lie in (t - window, t]."""
    allowed = np.zeros(len(t), dtype=bool)
    log: list[int] = []
    head = 0
    prev_id = None
    for i, (who, now) in enumerate(zip(ident, t, strict=True)):
        if who != prev_id:
            log, head, prev_id = [], 0, who
        while head < len(log) and log[head] <= now - window:
            head += 1
        if len(log) - head < limit:
            log.append(now)
            allowed[i] = True
    return allowed


def counter_estimate(previous: int, current: int, elapsed: int, window: int) -> int:
    """The seed's estimate, in the module's order of IEEE double operations."""
    weight = (window - elapsed) / window
    return math.floor(previous * weight + current)


def sliding_counter(
    ident: Sequence[int], t: Sequence[int], limits: Sequence[tuple[int, int]]
) -> tuple[BoolArray, IntArray]:
    """SLIDINGWINDOW.CHECK key limit window now [LIMIT limit window]... per request, for
    times that never go backwards within an identity. Returns (allowed, count): the
    count is the first limit's estimate, plus 1 when allowed (the reply's `count` when
    that limit governs; with one limit always)."""
    n = len(t)
    allowed = np.zeros(n, dtype=bool)
    count = np.zeros(n, dtype=np.int64)
    k = len(limits)
    index = [-2] * k
    cur = [0] * k
    prev = [0] * k
    prev_id = None
    for i, (who, now) in enumerate(zip(ident, t, strict=True)):
        if who != prev_id:
            index, cur, prev, prev_id = [-2] * k, [0] * k, [0] * k, who
        ok = True
        first = 0
        for j, (limit, window) in enumerate(limits):
            w = now // window
            if w != index[j]:  # age the counts into window w
                prev[j] = cur[j] if w == index[j] + 1 else 0
                cur[j] = 0
                index[j] = w
            est = counter_estimate(prev[j], cur[j], now - w * window, window)
            if j == 0:
                first = est
            if est + 1 > limit:
                ok = False
        if ok:
            for j in range(k):
                cur[j] += 1
            allowed[i] = True
            count[i] = first + 1
        else:
            count[i] = first
    return allowed, count
