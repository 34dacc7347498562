"""HTTP headers for a decision.

X-RateLimit-Limit      the limit
X-RateLimit-Remaining  max(0, limit - count)
X-RateLimit-Reset      seconds from now until the full limit is available again (a delta,
                       not a Unix time): the module's reset_after
Retry-After            on a denial: seconds after which the same request is allowed
RateLimit-Policy       `"name";q=<limit>;w=<window seconds>`  (draft-ietf-httpapi-ratelimit-headers)
RateLimit              `"name";r=<remaining>;t=<seconds>`: t is when more quota is
                       available (draft -10 wording, which fits a sliding window): on a
                       denial the Retry-After value, otherwise X-RateLimit-Reset's

Seconds are whole and never early: with second windows they are the module's numbers;
with millisecond windows they are rounded UP (1001 ms -> 2 s).
"""

from __future__ import annotations

from .result import RateLimitResult


def sf_string(value: str) -> str:
    """`value` as a Structured Field string (RFC 8941): quoted, `\\` and `"` escaped."""
    if any(not (0x20 <= ord(c) <= 0x7E) for c in value):
        raise ValueError(f"policy name must be printable ASCII: {value!r}")
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def policy_header(name: str, limit: int, window_seconds: int) -> str:
    """RateLimit-Policy's value: `"name";q=100;w=60`."""
    return f"{sf_string(name)};q={limit};w={window_seconds}"


def rate_limit_headers(result: RateLimitResult, policy: str = "default") -> dict[str, str]:
    """The headers for `result`, by name. Empty for a degraded result (Redis was not
    asked, so there is nothing true to say)."""
    if result.degraded:
        return {}
    reset = result.reset_after_seconds
    retry = result.retry_after_seconds  # None when allowed, or when it never will be
    more_quota = retry if retry is not None else reset
    headers = {
        "X-RateLimit-Limit": str(result.limit),
        "X-RateLimit-Remaining": str(result.remaining),
        "X-RateLimit-Reset": str(reset),
        "RateLimit-Policy": policy_header(policy, result.limit, result.window_seconds),
        "RateLimit": f"{sf_string(policy)};r={result.remaining};t={more_quota}",
    }
    if retry is not None:
        headers["Retry-After"] = str(retry)
    return headers
