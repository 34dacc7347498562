"""conformance/rates.json replayed: rate strings to [[limit, window_ms], ...], and every
error class with the message fragment both clients share (no server).

`problem(case)` says how the client disagrees with a case (None: it agrees); the
self-check mutates vectors and requires the comparison to catch each mutation."""

from __future__ import annotations

import copy
import json
from typing import Any, Optional

import pytest
import redis
from slidingwindow_testing.paths import REPO
from slidingwindow import SlidingWindowRateLimiter, parse_limits

VECTORS = json.loads((REPO / "conformance" / "rates.json").read_text())
CASES: list[dict[str, Any]] = VECTORS["cases"]
ERROR_CLASSES = {"empty", "syntax", "unit", "month_year", "zero_multiplier", "duplicate_window",
                 "too_many", "ms_option"}


def _outcome(case: dict[str, Any]) -> tuple[Optional[list[list[int]]], Optional[str]]:
    """(the limits, None) or (None, the error message) for one case."""
    try:
        if case.get("ms"):
            # A call given the string and ms=True: refused before any I/O (the client is
            # never connected).
            limiter = SlidingWindowRateLimiter(redis.Redis(port=1))
            limiter.check_limits("conformance", case["text"], ms=True)
            return [], None
        return [[r.limit, r.window] for r in parse_limits(case["text"])], None
    except ValueError as exc:
        return None, str(exc)


def problem(case: dict[str, Any]) -> Optional[str]:
    limits, message = _outcome(case)
    if "limits" in case:
        if message is not None:
            return f"{case['text']!r}: raised {message!r}, expected {case['limits']}"
        if limits != case["limits"]:
            return f"{case['text']!r}: {limits}, expected {case['limits']}"
        return None
    if message is None:
        return f"{case['text']!r}: parsed to {limits}, expected a {case['error']} error"
    if case["message"] not in message:
        return f"{case['text']!r}: {message!r} lacks {case['message']!r}"
    return None


@pytest.mark.parametrize("case", CASES, ids=[f"{i}:{c['text'][:30]}" for i, c in enumerate(CASES)])
def test_vector(case: dict[str, Any]) -> None:
    assert problem(case) is None, problem(case)


def test_every_error_class_is_covered() -> None:
    seen = {c["error"] for c in CASES if "error" in c}
    assert seen == ERROR_CLASSES


def test_a_mutated_vector_fails() -> None:
    """The comparison catches a changed window, a changed limit, a dropped rate, a changed
    message fragment, and a valid case turned into an error (and back)."""
    valid = next(c for c in CASES if "limits" in c and len(c["limits"]) > 1)
    error = next(c for c in CASES if c.get("error") == "duplicate_window")
    mutants = []
    for change in (lambda c: c["limits"][0].__setitem__(1, c["limits"][0][1] // 1000),
                   lambda c: c["limits"][1].__setitem__(0, c["limits"][1][0] + 1),
                   lambda c: c["limits"].pop()):
        mutant = copy.deepcopy(valid)
        change(mutant)
        mutants.append(mutant)
    mutants.append({**error, "message": error["message"].replace("per minute", "per 60 s")})
    mutants.append({"text": valid["text"], "error": "syntax", "message": "bad rate"})
    mutants.append({"text": error["text"], "limits": [[10, 60000], [20, 60000]]})
    for mutant in mutants:
        assert problem(mutant) is not None, mutant
