"""Client for the slidingwindow Redis/Valkey module: SLIDINGWINDOW.CHECK, PEEK and REFUND.

    from slidingwindow import SlidingWindowRateLimiter, connect
    limiter = SlidingWindowRateLimiter(connect("redis://127.0.0.1:6379"))
    allowed, count = limiter.is_allowed("user:42", limit=100, window_seconds=60)

The ASGI middleware is in `slidingwindow.asgi`, the WSGI one in `slidingwindow.wsgi`, the
`limits` storages in `slidingwindow.limits_storage`, the bundled Functions library in
`slidingwindow.library`. Inside: `core/` (the limiter, its backends, circuit and deny cache),
`http/` (what both middlewares share) and `storage/` (the `limits` storages).
"""

import warnings
from typing import Any

from .core.aio import AsyncSlidingWindowRateLimiter
from .core.backend import LibraryNotLoadedError
from .core.connect import DEFAULT_TIMEOUT, connect, connect_async
from .core.deny_cache import DenyCache
from .core.failure import Circuit, is_unavailable
from .core.limit import MAX_LIMITS, Limit
from .core.limiter import SlidingWindowRateLimiter
from .core.permissions import MissingPermissionError
from .core.rates import parse_limits
from .core.result import MultiLimitResult, RateLimitResult, WindowCounts
from .http.headers import limits_headers, policy_header, rate_limit_headers
from .http.identity import TrustedProxies, client_identity, client_ip, ip_key, parse_ip

__all__ = [
    "AsyncSlidingWindowRateLimiter",
    "Circuit",
    "DEFAULT_TIMEOUT",
    "DenyCache",
    "LibraryNotLoadedError",
    "Limit",
    "MAX_LIMITS",
    "MissingPermissionError",
    "MultiLimitResult",
    "RateLimitResult",
    "SlidingWindowRateLimiter",
    "TrustedProxies",
    "WindowCounts",
    "client_identity",
    "client_ip",
    "connect",
    "connect_async",
    "ip_key",
    "is_unavailable",
    "limits_headers",
    "parse_ip",
    "parse_limits",
    "policy_header",
    "rate_limit_headers",
]
__version__ = "0.3.0"

# Old names, kept as deprecated aliases (a DeprecationWarning on use).
_DEPRECATED = {"Rate": ("Limit", Limit), "MAX_RATES": ("MAX_LIMITS", MAX_LIMITS)}


def __getattr__(name: str) -> Any:
    if name in _DEPRECATED:
        new, value = _DEPRECATED[name]
        warnings.warn(f"slidingwindow.{name} is deprecated: use slidingwindow.{new}",
                      DeprecationWarning, stacklevel=2)
        return value
    raise AttributeError(f"module 'slidingwindow' has no attribute {name!r}")
