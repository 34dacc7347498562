//! Every reply the commands send: decisions, counts and errors.

use crate::args::ArgError;
use crate::stats;
use crate::window::{Counts, Decision};
use libc::{c_int, c_longlong};
use redis_module::raw;
use std::ffi::CString;

type Ctx = *mut raw::RedisModuleCtx;

const OK: c_int = raw::REDISMODULE_OK as c_int;

pub const WRONGTYPE: &[u8] = b"WRONGTYPE Operation against a key holding the wrong kind of value\0";
pub const INTERNAL: &[u8] = b"ERR internal error in slidingwindow (please report it)\0";

/// `[allowed, count]`; with DETAILS `[allowed, count, limit, remaining, retry_after,
/// reset_after]`, the governing limit's figures, and with two or more limits a 7th
/// element: each limit's `[window, limit, count, remaining, retry_after, reset_after]`.
#[inline(always)]
pub fn decision(ctx: Ctx, d: &Decision, details: bool) -> c_int {
    if !details {
        raw::reply_with_array(ctx, 2);
        raw::reply_with_long_long(ctx, i64::from(d.allowed));
        raw::reply_with_long_long(ctx, d.count() as i64);
        return OK;
    }
    decision_details(ctx, d)
}

/// The DETAILS reply: out of line, so a reply without it stays a few instructions.
#[inline(never)]
fn decision_details(ctx: Ctx, d: &Decision) -> c_int {
    let int = |v: i64| raw::reply_with_long_long(ctx, v);
    let array = |n: usize| raw::reply_with_array(ctx, n as _);
    let g = d.outcome(d.governing());
    let several = d.limit_count() > 1;
    array(if several { 7 } else { 6 });
    int(i64::from(d.allowed));
    int(g.count as i64);
    int(g.limit as i64);
    int(g.remaining as i64);
    if several {
        int(d.retry_after());
        int(d.reset_after() as i64);
    } else {
        // One limit: the summary is that limit's own figures, already worked out.
        int(g.retry_after);
        int(g.reset_after as i64);
    }
    if several {
        array(d.limit_count());
        for i in 0..d.limit_count() {
            let o = d.outcome(i);
            array(6);
            for v in [
                o.window as i64,
                o.limit as i64,
                o.count as i64,
                o.remaining as i64,
                o.retry_after,
                o.reset_after as i64,
            ] {
                int(v);
            }
        }
    }
    OK
}

/// COUNTS: `[previous, current, elapsed]`.
pub fn counts(ctx: Ctx, counts: &Counts, elapsed: u64) -> c_int {
    raw::reply_with_array(ctx, 3);
    for v in [counts.previous, counts.current, elapsed] {
        raw::reply_with_long_long(ctx, v as c_longlong);
    }
    OK
}

/// An argument error, counted as an error.
pub fn arg_error(ctx: Ctx, e: &ArgError) -> c_int {
    let text = CString::new(e.to_string()).unwrap_or_default();
    error(ctx, text.as_bytes_with_nul())
}

/// An error reply, counted as an error. `text` must end with a NUL byte and start with
/// an error code ("ERR ", "WRONGTYPE ").
pub fn error(ctx: Ctx, text: &[u8]) -> c_int {
    debug_assert_eq!(text.last(), Some(&0));
    stats::error();
    raw::reply_with_error(ctx, text.as_ptr().cast());
    OK
}
