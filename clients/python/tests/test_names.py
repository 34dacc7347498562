"""The canonical names (conformance/README.md, the same in every client) at the package's
top level, and the old ones kept as deprecated aliases."""

from __future__ import annotations

import pytest

import slidingwindow
from slidingwindow import (
    MAX_LIMITS, AsyncSlidingWindowRateLimiter, LibraryNotLoadedError, Limit,
    SlidingWindowRateLimiter,
)
from slidingwindow.core.backend import BACKENDS
from slidingwindow.core.rates import MAX_RATES, Rate, parse_limits

CALLS = ["check", "peek", "refund", "counts", "reset", "wait", "check_limits", "peek_limits",
         "refund_limits", "is_allowed"]


def test_canonical_names() -> None:
    assert MAX_LIMITS == 8 and BACKENDS == ("auto", "module", "library")
    assert Limit(10, 60) == Limit(limit=10, window=60)
    assert issubclass(LibraryNotLoadedError, Exception)
    for kind in (SlidingWindowRateLimiter, AsyncSlidingWindowRateLimiter):
        missing = [name for name in CALLS if not callable(getattr(kind, name, None))]
        assert missing == [], f"{kind.__name__} lacks {missing}"
    for name in ("Limit", "MAX_LIMITS", "LibraryNotLoadedError", "WindowCounts", "DenyCache"):
        assert name in slidingwindow.__all__


def test_old_names_are_deprecated_aliases() -> None:
    with pytest.warns(DeprecationWarning,
                      match="slidingwindow.Rate is deprecated: use slidingwindow.Limit"):
        assert slidingwindow.Rate is Limit
    with pytest.warns(DeprecationWarning, match="use slidingwindow.MAX_LIMITS"):
        assert slidingwindow.MAX_RATES == MAX_LIMITS
    assert Rate is Limit and MAX_RATES == MAX_LIMITS  # slidingwindow.core.rates keeps them too
    assert all(isinstance(limit, Limit) for limit in parse_limits("1/second;2/minute"))
    assert "Rate" not in slidingwindow.__all__ and "MAX_RATES" not in slidingwindow.__all__
    with pytest.raises(AttributeError):
        getattr(slidingwindow, "NoSuchName")
