"""Judging a limiter's decisions on a stream against the exact true window.

The true window of a request at time t is (t - W, t]. Two exact judgements:

(a) same history: the request should be allowed iff fewer than `limit` requests that
    *this limiter* allowed lie in its true window before it. Each decision is judged on
    the limiter's own past, so one early mistake is not counted again downstream.
(b) as Cloudflare counts: every request counts, allowed or not; the source is over the
    threshold iff more than `limit` requests (this one included) lie in the true window.
    A request allowed while its source is over is "wrongly allowed", one denied while
    its source is not over is "wrongly limited".
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .reference import (
    count_before,
    fixed_window_counts,
    identity_blocks,
    max_in_window,
    window_start,
)


def _share(x: np.ndarray) -> float:
    return float(x.mean()) if len(x) else 0.0


def _spread(x: np.ndarray) -> dict[str, float | int]:
    """Worst, p99 and p50 (values taken by some identity), and how many."""
    if not len(x):
        return {"n": 0, "worst": 0.0, "p99": 0.0, "p50": 0.0}
    p99, p50 = (float(np.quantile(x, f, method="inverted_cdf")) for f in (0.99, 0.5))
    return {"n": int(len(x)), "worst": float(x.max()), "p99": p99, "p50": p50}


def judge(ident: np.ndarray, t: np.ndarray, allowed: np.ndarray, limit: int, window: int,
          estimate: np.ndarray | None = None, kind: np.ndarray | None = None,
          kinds: tuple[str, ...] = ()) -> dict[str, Any]:
    """Everything the report says about one limiter on one stream (sorted by identity,
    time). `estimate`: the limiter's own count of the true window before each request
    (compared with the exact one); `kind`: per identity, for a breakdown by kind."""
    n = len(t)
    a = allowed.astype(np.int64)
    blocks = identity_blocks(ident)
    ids = ident[blocks]

    def per_id(flag: np.ndarray) -> np.ndarray:  # per identity: flag on any request
        return np.logical_or.reduceat(flag, blocks) if n else flag

    exact = count_before(ident, t, window, a)  # (a): allowed in the true window, before
    should = exact + 1 <= limit
    a_wrong_allowed = allowed & ~should
    a_wrong_denied = ~allowed & should
    offered = np.arange(n) - window_start(ident, t, window) + 1  # (b): all, this included
    over = offered > limit
    b_wrong_allowed = allowed & over
    b_wrong_denied = ~allowed & ~over

    max_w = max_in_window(ident, t, window, a) / limit
    max_w10 = max_in_window(ident, t, window // 10, a) / limit
    max_offered = max_in_window(ident, t, window, np.ones(n, dtype=np.int64))
    exceeded = max_offered > limit  # identities that ever sent more than the limit
    let_over = max_w > 1
    ever_denied = per_id(~allowed)
    quiet = np.repeat(~exceeded, np.diff(np.append(blocks, n)))  # per request: never over

    out: dict[str, Any] = {
        "requests": n,
        "allowed": int(a.sum()),
        "identities": int(len(ids)),
        "identities_exceeded": int(exceeded.sum()),
        "same_history": {
            "wrongly_allowed": int(a_wrong_allowed.sum()),
            "wrongly_denied": int(a_wrong_denied.sum()),
            "share_of_requests": _share(a_wrong_allowed | a_wrong_denied),
            "identities_wrongly_denied": int(per_id(a_wrong_denied).sum()),
            "identities_wrongly_allowed": int(per_id(a_wrong_allowed).sum()),
            # the same mistakes, on the identities that never sent more than the limit
            "requests_of_quiet_identities": int(quiet.sum()),
            "wrong_on_quiet_identities": int(((a_wrong_allowed | a_wrong_denied) & quiet).sum()),
        },
        "cloudflare": {
            "wrongly_allowed": int(b_wrong_allowed.sum()),
            "wrongly_limited": int(b_wrong_denied.sum()),
            "share_of_requests": _share(b_wrong_allowed | b_wrong_denied),
            "identities_wrongly_limited": int(per_id(b_wrong_denied).sum()),
            # Cloudflare's "no source under the threshold was limited": never over, denied
            "identities_never_over_but_limited": int((~exceeded & ever_denied).sum()),
        },
        "let_over": {  # identities that got more than the limit into some true window
            "identities": int(let_over.sum()),
            "worst_excess": float(max(max_w.max(initial=1.0) - 1, 0.0)),
            "excess_p50": float(np.median(max_w[let_over]) - 1) if let_over.any() else 0.0,
        },
        "max_in_window": _spread(max_w[exceeded]),  # x limit, identities that exceeded
        "max_in_tenth": _spread(max_w10[exceeded]),
    }
    if kind is not None:
        out["by_kind"] = {
            name: {"identities": int((kind[ids] == k).sum()),
                   "exceeded": int((exceeded & (kind[ids] == k)).sum()),
                   "max_in_window": _spread(max_w[exceeded & (kind[ids] == k)]),
                   "max_in_tenth": _spread(max_w10[exceeded & (kind[ids] == k)])}
            for k, name in enumerate(kinds)}
    if estimate is not None:
        out["estimate"] = estimate_error(estimate, exact, limit)
    return out


def estimate_error(estimate: np.ndarray, exact: np.ndarray, limit: int) -> dict[str, float]:
    """Relative error |estimate - exact| / exact over requests with exact > 0, over all
    of them and over those near the limit (exact >= limit / 2), where decisions turn."""
    err = estimate - exact
    pos = exact > 0
    rel = np.abs(err[pos]) / exact[pos]
    near = exact[pos] >= limit / 2
    return {
        "mean_relative": _share(rel),
        "worst_relative": float(rel.max(initial=0.0)),
        "mean_relative_near_limit": _share(rel[near]),
        "worst_relative_near_limit": float(rel[near].max(initial=0.0)),
        "mean_signed_in_limits": _share(err / limit),  # > 0: overestimates (strict)
        "worst_over_in_limits": float(err.max(initial=0) / limit),
        "worst_under_in_limits": float(-err.min(initial=0) / limit),
    }


def fixed_window_estimate(ident: np.ndarray, t: np.ndarray, allowed: np.ndarray,
                          window: int) -> np.ndarray:
    """What a fixed window believes the true window holds: its own window's allowed."""
    return fixed_window_counts(ident, t, window, allowed.astype(np.int64))


def trailing_counts(t: np.ndarray, allowed: np.ndarray, window: int,
                    points: int = 1500) -> tuple[np.ndarray, np.ndarray]:
    """For one identity: the allowed requests in (x - window, x] at `points` times x
    evenly spread over the stream (the series the chart plots)."""
    at = np.sort(t[allowed])
    lo, hi = (int(t.min()), int(t.max())) if len(t) else (0, 0)
    x = np.unique(np.linspace(lo, hi, points).astype(np.int64))
    inside = np.searchsorted(at, x, side="right") - np.searchsorted(at, x - window, side="right")
    return x, inside
