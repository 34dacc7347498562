//! HTTP headers for a decision, the same strings as the Python client's `headers.py`.
//!
//! | header | value |
//! |---|---|
//! | `X-RateLimit-Limit` | the limit |
//! | `X-RateLimit-Remaining` | `max(0, limit - count)` |
//! | `X-RateLimit-Reset` | seconds until the full limit is available again (a delta) |
//! | `Retry-After` | on a denial: seconds after which the same request is allowed |
//! | `RateLimit-Policy` | `"name";q=<limit>;w=<window seconds>` (draft-ietf-httpapi-ratelimit-headers) |
//! | `RateLimit` | `"name";r=<remaining>;t=<seconds>`: on a denial Retry-After's value, else X-RateLimit-Reset's |
//!
//! Seconds are whole and never early: millisecond figures are rounded **up**. With
//! several limits, RateLimit-Policy and RateLimit list one item per limit (draft 11 takes
//! lists), named `"<policy>/<window>s"` (`<window>ms` for a millisecond window that is
//! not whole seconds); X-RateLimit-*
//! speak for the governing limit; Retry-After is the summary's. A degraded decision
//! (Redis not asked) gets no headers at all.

use crate::result::{Decision, LimitResult};

/// `value` as a Structured Field string (RFC 8941): quoted, `\` and `"` escaped. `None`
/// when it holds anything but printable ASCII.
pub fn sf_string(value: &str) -> Option<String> {
    if !value.chars().all(|c| (' '..='~').contains(&c)) {
        return None;
    }
    Some(format!(
        "\"{}\"",
        value.replace('\\', "\\\\").replace('"', "\\\"")
    ))
}

fn sf(value: &str) -> String {
    sf_string(value).unwrap_or_else(|| "\"default\"".into())
}

/// RateLimit-Policy's value: `"name";q=100;w=60`.
pub fn policy_header(name: &str, limit: u64, window_seconds: u64) -> String {
    format!("{};q={limit};w={window_seconds}", sf(name))
}

fn more_quota(r: &LimitResult) -> u64 {
    r.retry_after_seconds()
        .unwrap_or_else(|| r.reset_after_seconds())
}

fn x_headers(r: &LimitResult) -> Vec<(&'static str, String)> {
    vec![
        ("X-RateLimit-Limit", r.limit.to_string()),
        ("X-RateLimit-Remaining", r.remaining.to_string()),
        ("X-RateLimit-Reset", r.reset_after_seconds().to_string()),
    ]
}

fn with_retry(
    mut h: Vec<(&'static str, String)>,
    summary: &LimitResult,
) -> Vec<(&'static str, String)> {
    if let Some(retry) = summary.retry_after_seconds() {
        h.push(("Retry-After", retry.to_string()));
    }
    h
}

/// The headers for one limit's result, by name, in order. Empty when degraded.
pub fn rate_limit_headers(r: &LimitResult, policy: &str) -> Vec<(&'static str, String)> {
    if r.degraded {
        return Vec::new();
    }
    let mut h = x_headers(r);
    h.push((
        "RateLimit-Policy",
        policy_header(policy, r.limit, r.window_seconds()),
    ));
    h.push((
        "RateLimit",
        format!("{};r={};t={}", sf(policy), r.remaining, more_quota(r)),
    ));
    with_retry(h, r)
}

/// The name of one of several limits in the RateLimit fields: `api/60s`, `api/500ms` (a
/// window in ms of whole seconds, as a rate string's, is named in seconds: `api/1s`).
pub fn limit_name(policy: &str, r: &LimitResult) -> String {
    if r.ms && r.window.is_multiple_of(1000) {
        return format!("{policy}/{}s", r.window / 1000);
    }
    format!("{policy}/{}{}", r.window, if r.ms { "ms" } else { "s" })
}

/// The headers for a decision on one or several limits.
pub fn limits_headers(d: &Decision, policy: &str) -> Vec<(&'static str, String)> {
    if d.limits.len() == 1 {
        return rate_limit_headers(&d.summary, policy);
    }
    if d.degraded() {
        return Vec::new();
    }
    let names: Vec<String> = d
        .limits
        .iter()
        .map(|r| sf(&limit_name(policy, r)))
        .collect();
    let mut h = x_headers(d.governing_result());
    let policies: Vec<String> = names
        .iter()
        .zip(&d.limits)
        .map(|(n, r)| format!("{n};q={};w={}", r.limit, r.window_seconds()))
        .collect();
    let states: Vec<String> = names
        .iter()
        .zip(&d.limits)
        .map(|(n, r)| format!("{n};r={};t={}", r.remaining, more_quota(r)))
        .collect();
    h.push(("RateLimit-Policy", policies.join(", ")));
    h.push(("RateLimit", states.join(", ")));
    with_retry(h, &d.summary)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[allow(clippy::too_many_arguments)]
    fn r(
        allowed: bool,
        count: u64,
        limit: u64,
        remaining: u64,
        retry: i64,
        reset: u64,
        window: u64,
        ms: bool,
    ) -> LimitResult {
        LimitResult {
            allowed,
            count,
            limit,
            remaining,
            retry_after: retry,
            reset_after: reset,
            window,
            ms,
            degraded: false,
        }
    }

    fn map(h: Vec<(&'static str, String)>) -> Vec<(String, String)> {
        h.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
    }

    fn want(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    // The expected strings are what the Python client's headers.py answers for the same
    // results (printed from it; the draft-11 names of whole-second ms windows in seconds).
    #[test]
    fn same_strings_as_python() {
        let one = r(false, 3, 3, 0, 1500, 59001, 60000, true);
        assert_eq!(
            map(rate_limit_headers(&one, "api")),
            want(&[
                ("X-RateLimit-Limit", "3"),
                ("X-RateLimit-Remaining", "0"),
                ("X-RateLimit-Reset", "60"),
                ("RateLimit-Policy", "\"api\";q=3;w=60"),
                ("RateLimit", "\"api\";r=0;t=2"),
                ("Retry-After", "2"),
            ])
        );
        let (a, b) = (
            r(true, 1, 10, 9, -1, 2, 1, false),
            r(true, 1, 1000, 999, -1, 2001, 3600, false),
        );
        let d = Decision {
            summary: a,
            limits: vec![a, b],
            governing: 0,
        };
        assert_eq!(
            map(limits_headers(&d, "api")),
            want(&[
                ("X-RateLimit-Limit", "10"),
                ("X-RateLimit-Remaining", "9"),
                ("X-RateLimit-Reset", "2"),
                (
                    "RateLimit-Policy",
                    "\"api/1s\";q=10;w=1, \"api/3600s\";q=1000;w=3600"
                ),
                (
                    "RateLimit",
                    "\"api/1s\";r=9;t=2, \"api/3600s\";r=999;t=2001"
                ),
            ])
        );
        let a = r(true, 5, 10, 5, -1, 900, 1000, true);
        let b = r(false, 2, 2, 0, 59000, 60000, 60000, true);
        let d = Decision {
            summary: b,
            limits: vec![a, b],
            governing: 1,
        };
        assert_eq!(
            map(limits_headers(&d, "a\"b")),
            want(&[
                ("X-RateLimit-Limit", "2"),
                ("X-RateLimit-Remaining", "0"),
                ("X-RateLimit-Reset", "60"),
                (
                    "RateLimit-Policy",
                    "\"a\\\"b/1s\";q=10;w=1, \"a\\\"b/60s\";q=2;w=60"
                ),
                (
                    "RateLimit",
                    "\"a\\\"b/1s\";r=5;t=1, \"a\\\"b/60s\";r=0;t=59"
                ),
                ("Retry-After", "59"),
            ])
        );
        let mut degraded = one;
        degraded.degraded = true;
        assert!(rate_limit_headers(&degraded, "api").is_empty());
    }
}
