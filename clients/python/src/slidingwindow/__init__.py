"""Client for the slidingwindow Redis/Valkey module: SLIDINGWINDOW.CHECK, PEEK and REFUND.

    from slidingwindow import SlidingWindowRateLimiter, connect
    limiter = SlidingWindowRateLimiter(connect("redis://127.0.0.1:6379"))
    allowed, count = limiter.is_allowed("user:42", limit=100, window_seconds=60)

The ASGI middleware is in `slidingwindow.asgi`, the WSGI one in `slidingwindow.wsgi`.
"""

from .aio import AsyncSlidingWindowRateLimiter
from .connect import DEFAULT_TIMEOUT, connect, connect_async
from .failure import Circuit, is_unavailable
from .headers import limits_headers, policy_header, rate_limit_headers
from .identity import TrustedProxies, client_identity, client_ip, ip_key, parse_ip
from .limiter import SlidingWindowRateLimiter
from .permissions import MissingPermissionError
from .rates import Rate, parse_limits
from .result import MultiLimitResult, RateLimitResult

__all__ = [
    "AsyncSlidingWindowRateLimiter",
    "Circuit",
    "DEFAULT_TIMEOUT",
    "MissingPermissionError",
    "MultiLimitResult",
    "Rate",
    "RateLimitResult",
    "SlidingWindowRateLimiter",
    "TrustedProxies",
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
__version__ = "0.2.0"
