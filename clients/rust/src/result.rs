//! What one CHECK, PEEK or REFUND answered, as values.

use redis::Value;

use crate::error::Error;

fn ceil_div(n: u64, d: u64) -> u64 {
    n.div_ceil(d)
}

/// One limit's verdict. Times are in the call's unit: seconds, or milliseconds when `ms`.
///
/// When `degraded` (Redis could not be asked, see fail-open), only `allowed` means
/// anything: the counters are placeholders (count 0, remaining = limit when allowed else
/// 0, retry_after -1, reset_after 0) that the header helpers leave out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LimitResult {
    /// Whether this limit allows the request (for the summary: every limit does).
    pub allowed: bool,
    /// The estimate including this request when allowed, the estimate when denied.
    pub count: u64,
    /// The limit.
    pub limit: u64,
    /// `max(0, limit - count)`.
    pub remaining: u64,
    /// `-1` when allowed (or never possible: cost > limit); else the smallest whole number
    /// of units after which the same request is allowed.
    pub retry_after: i64,
    /// Units until the estimate is 0 again with no further traffic.
    pub reset_after: u64,
    /// The window, in the call's unit.
    pub window: u64,
    /// Whether the unit is milliseconds.
    pub ms: bool,
    /// Answered without Redis (an outage; see the type's docs).
    pub degraded: bool,
}

impl LimitResult {
    fn in_seconds(&self, units: u64) -> u64 {
        // Rounded up: a client told to wait this long is never early.
        if self.ms {
            ceil_div(units, 1000)
        } else {
            units
        }
    }

    /// Whole seconds after which the same request is allowed; `None` when allowed now or
    /// never possible (cost > limit).
    pub fn retry_after_seconds(&self) -> Option<u64> {
        u64::try_from(self.retry_after)
            .ok()
            .map(|r| self.in_seconds(r))
    }

    /// Whole seconds until the estimate is back to 0 (the full limit is available).
    pub fn reset_after_seconds(&self) -> u64 {
        self.in_seconds(self.reset_after)
    }

    /// The window in whole seconds, at least 1 (as RateLimit-Policy's `w` needs).
    pub fn window_seconds(&self) -> u64 {
        self.in_seconds(self.window).max(1)
    }

    /// The placeholder of a call answered without Redis.
    pub fn unavailable(allowed: bool, limit: u64, window: u64, ms: bool) -> LimitResult {
        LimitResult {
            allowed,
            count: 0,
            limit,
            remaining: if allowed { limit } else { 0 },
            retry_after: -1,
            reset_after: 0,
            window,
            ms,
            degraded: true,
        }
    }
}

/// A decision on one or several limits (all must allow; then each counts).
///
/// `summary` is the reply's head: allowed, the governing limit's count, limit and
/// remaining, `retry_after` (-1 when allowed; else when every limit allows the same
/// request, or -1 if one never can) and `reset_after` (until every window is empty).
/// `limits` has each limit's own verdict in call order. `governing` indexes the limit the
/// summary speaks for: when denied, the denying one with the longest wait ("never"
/// longest); else the one with the fewest remaining; ties to the first. With one limit,
/// `limits == [summary]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decision {
    /// The reply's head.
    pub summary: LimitResult,
    /// Each limit's verdict, in call order.
    pub limits: Vec<LimitResult>,
    /// The index in `limits` of the limit the summary speaks for.
    pub governing: usize,
}

fn int(v: &Value, what: &str) -> Result<i64, Error> {
    match v {
        Value::Int(i) => Ok(*i),
        other => redis::from_redis_value_ref::<i64>(other)
            .map_err(|_| Error::UnexpectedReply(format!("{what}: {other:?}"))),
    }
}

fn ints(v: &Value, n: usize, what: &str) -> Result<Vec<i64>, Error> {
    match v {
        Value::Array(items) if items.len() >= n => {
            items[..n].iter().map(|i| int(i, what)).collect()
        }
        other => Err(Error::UnexpectedReply(format!(
            "{what}: expected {n} integers, got {other:?}"
        ))),
    }
}

fn u(v: i64) -> u64 {
    v.max(0) as u64
}

impl Decision {
    /// Whether the request is allowed (by every limit).
    pub fn allowed(&self) -> bool {
        self.summary.allowed
    }

    /// Answered without Redis.
    pub fn degraded(&self) -> bool {
        self.summary.degraded
    }

    /// The summary's `retry_after` (-1 when allowed or never).
    pub fn retry_after(&self) -> i64 {
        self.summary.retry_after
    }

    /// The governing limit's own verdict.
    pub fn governing_result(&self) -> &LimitResult {
        &self.limits[self.governing]
    }

    /// From a DETAILS reply: 6 integers for one limit, a 7th element (one array per limit,
    /// `[window, limit, count, remaining, retry_after, reset_after]`) for several.
    pub fn from_reply(
        reply: &Value,
        windows: &[u64],
        cost: u64,
        ms: bool,
    ) -> Result<Decision, Error> {
        let head = ints(reply, 6, "DETAILS reply")?;
        let allowed = head[0] == 1;
        let mut summary = LimitResult {
            allowed,
            count: u(head[1]),
            limit: u(head[2]),
            remaining: u(head[3]),
            retry_after: head[4],
            reset_after: u(head[5]),
            window: windows[0],
            ms,
            degraded: false,
        };
        if windows.len() == 1 {
            return Ok(Decision {
                summary,
                limits: vec![summary],
                governing: 0,
            });
        }
        let per = match reply {
            Value::Array(items) if items.len() == 7 => match &items[6] {
                Value::Array(per) if per.len() == windows.len() => per,
                other => return Err(Error::UnexpectedReply(format!("7th element: {other:?}"))),
            },
            other => {
                return Err(Error::UnexpectedReply(format!(
                    "expected 7 elements: {other:?}"
                )))
            }
        };
        let mut limits = Vec::with_capacity(per.len());
        let mut governing = None;
        for item in per {
            let f = ints(item, 6, "a limit's verdict")?;
            let (limit, retry) = (u(f[1]), f[4]);
            // -1 when that limit alone allows, and also when it never can (cost > limit).
            let alone = allowed || (retry == -1 && cost <= limit);
            if governing.is_none()
                && [f[1], f[2], f[3], f[4]] == [head[2], head[1], head[3], head[4]]
            {
                governing = Some(limits.len());
            }
            limits.push(LimitResult {
                allowed: alone,
                count: u(f[2]),
                limit,
                remaining: u(f[3]),
                retry_after: retry,
                reset_after: u(f[5]),
                window: u(f[0]),
                ms,
                degraded: false,
            });
        }
        let governing = governing.ok_or_else(|| {
            Error::UnexpectedReply(format!(
                "no limit in the DETAILS reply matches its summary: {reply:?}"
            ))
        })?;
        summary.window = limits[governing].window;
        Ok(Decision {
            summary,
            limits,
            governing,
        })
    }

    /// The placeholder of a call answered without Redis.
    pub fn unavailable(allowed: bool, limits: &[crate::Limit], ms: bool) -> Decision {
        let limits: Vec<LimitResult> = limits
            .iter()
            .map(|l| LimitResult::unavailable(allowed, l.limit, l.window, ms))
            .collect();
        Decision {
            summary: limits[0],
            limits,
            governing: 0,
        }
    }
}

/// What `COUNTS` answered for one window of a key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Counts {
    /// The previous window's count in force at `now`.
    pub previous: u64,
    /// The current window's count.
    pub current: u64,
    /// Units elapsed in the current window.
    pub elapsed: u64,
    /// Answered without Redis (an outage): zeros.
    pub degraded: bool,
}

impl Counts {
    pub(crate) fn from_reply(v: &Value) -> Result<Counts, Error> {
        let f = ints(v, 3, "COUNTS reply")?;
        Ok(Counts {
            previous: u(f[0]),
            current: u(f[1]),
            elapsed: u(f[2]),
            degraded: false,
        })
    }
}
