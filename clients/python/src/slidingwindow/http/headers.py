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

Several limits (`limits_headers`): RateLimit-Policy and RateLimit list one item per limit
(draft-ietf-httpapi-ratelimit-headers-11 takes lists), named `"<policy>/<window>s"`
(`"<policy>/<window>ms"` for ms windows that are no whole number of seconds);
X-RateLimit-* speak for the governing limit; Retry-After is the summary's: when every
limit allows the same request again.
"""

from __future__ import annotations

from ..core.result import MultiLimitResult, RateLimitResult


def sf_string(value: str) -> str:
    """`value` as a Structured Field string (RFC 8941): quoted, `\\` and `"` escaped."""
    if any(not (0x20 <= ord(c) <= 0x7E) for c in value):
        raise ValueError(f"policy name must be printable ASCII: {value!r}")
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def policy_header(name: str, limit: int, window_seconds: int) -> str:
    """RateLimit-Policy's value: `"name";q=100;w=60`."""
    return f"{sf_string(name)};q={limit};w={window_seconds}"


def _more_quota(result: RateLimitResult) -> int:
    """RateLimit's `t`: seconds until more quota: on a denial Retry-After's value (when
    there is one), otherwise until the window is empty."""
    retry = result.retry_after_seconds
    return retry if retry is not None else result.reset_after_seconds


def _x_headers(result: RateLimitResult) -> dict[str, str]:
    return {
        "X-RateLimit-Limit": str(result.limit),
        "X-RateLimit-Remaining": str(result.remaining),
        "X-RateLimit-Reset": str(result.reset_after_seconds),
    }


def _with_retry(headers: dict[str, str], summary: RateLimitResult) -> dict[str, str]:
    retry = summary.retry_after_seconds  # None when allowed, or when it never will be
    if retry is not None:
        headers["Retry-After"] = str(retry)
    return headers


def rate_limit_headers(result: RateLimitResult, policy: str = "default") -> dict[str, str]:
    """The headers for `result`, by name. Empty for a degraded result (Redis was not
    asked, so there is nothing true to say)."""
    if result.degraded:
        return {}
    return _with_retry({
        **_x_headers(result),
        "RateLimit-Policy": policy_header(policy, result.limit, result.window_seconds),
        "RateLimit": f"{sf_string(policy)};r={result.remaining};t={_more_quota(result)}",
    }, result)


def limit_name(policy: str, result: RateLimitResult) -> str:
    """The name of one of several limits in the RateLimit fields: `api/60s`, `api/500ms`
    (a window in ms of whole seconds, as a rate string's, is named in seconds: `api/1s`)."""
    if result.ms and result.window % 1000 == 0:
        return f"{policy}/{result.window // 1000}s"
    return f"{policy}/{result.window}{'ms' if result.ms else 's'}"


def limits_headers(result: MultiLimitResult, policy: str = "default") -> dict[str, str]:
    """The headers for a decision on several limits (one limit: as rate_limit_headers)."""
    if len(result.limits) == 1:
        return rate_limit_headers(result.summary, policy)
    if result.degraded:
        return {}
    names = [sf_string(limit_name(policy, r)) for r in result.limits]
    return _with_retry({
        **_x_headers(result.governing_result),
        "RateLimit-Policy": ", ".join(
            f"{name};q={r.limit};w={r.window_seconds}" for name, r in zip(names, result.limits)),
        "RateLimit": ", ".join(
            f"{name};r={r.remaining};t={_more_quota(r)}" for name, r in zip(names, result.limits)),
    }, result.summary)
