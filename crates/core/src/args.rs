//! The arguments after the key, parsed into a request. Every argument error is found
//! here, before the key is touched.
//!
//! CHECK and PEEK: `limit window [now] [LIMIT limit window]... [COST cost] [MS] [DETAILS]`.
//! COUNTS: `window [now] [MS]`.
//! `now`, if given, comes right after the window; the options follow in any order and
//! any case. LIMIT may repeat; every other option is given at most once.

use crate::window::{Limit, Request, Unit, MAX_LIMITS, MAX_VALUE};
use std::fmt;

/// A parsed CHECK or PEEK. `now` is `None` when the caller left it to the server's clock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Parsed {
    limits: [Limit; MAX_LIMITS],
    len: usize,
    pub unit: Unit,
    pub now: Option<u64>,
    pub cost: u64,
    pub details: bool,
}

impl Default for Parsed {
    /// No limit yet: what `parse_into` fills.
    fn default() -> Parsed {
        Parsed {
            limits: [Limit {
                limit: 0,
                window: 1,
            }; MAX_LIMITS],
            len: 0,
            unit: Unit::Seconds,
            now: None,
            cost: 1,
            details: false,
        }
    }
}

impl Parsed {
    /// The limits in call order: the positional one first, then each LIMIT.
    pub fn limits(&self) -> &[Limit] {
        &self.limits[..self.len]
    }

    /// The request at `now`, or, when `now` was omitted, at `server_ms` (the server's
    /// time in milliseconds) in the call's unit.
    pub fn request(&self, server_ms: u64) -> Request<'_> {
        let now = self.now.unwrap_or(server_ms / self.unit.millis());
        // `parse` guarantees 1 to MAX_LIMITS limits, which is all `new` asks.
        Request::new(self.limits(), self.unit, now, self.cost).unwrap_or_else(|| {
            unreachable!("parse makes 1 to {MAX_LIMITS} limits");
        })
    }
}

/// A parsed COUNTS: `window [now] [MS]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CountsQuery {
    pub window: u64,
    pub unit: Unit,
    pub now: Option<u64>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ArgError {
    /// Fewer than the command's required arguments.
    Arity,
    /// An argument outside its range or not an integer: (name, lowest, highest, unit).
    Range(&'static str, u64, u64, &'static str),
    MissingValue(&'static str),
    Repeated(&'static str),
    /// More than MAX_LIMITS limits.
    TooManyLimits,
    /// Two limits with the same window: (window, unit).
    SameWindow(u64, Unit),
    /// An argument that is no option; kept (shortened) to name it in the reply, with
    /// the options the command takes.
    Unknown(Vec<u8>, &'static str),
}

impl fmt::Display for ArgError {
    /// The reply text, starting with the error code as Redis expects.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ArgError::Arity => write!(f, "ERR wrong number of arguments"),
            ArgError::Range(name, lo, hi, unit) => {
                write!(f, "ERR {name} must be an integer from {lo} to {hi}{unit}")
            }
            ArgError::MissingValue(what) => write!(f, "ERR {what}"),
            ArgError::Repeated(name) => write!(f, "ERR {name} given more than once"),
            ArgError::TooManyLimits => write!(
                f,
                "ERR at most {MAX_LIMITS} limits per call (the positional one and each LIMIT)"
            ),
            ArgError::SameWindow(window, unit) => write!(
                f,
                "ERR two limits have the same window ({window} {}): give each window once",
                unit.name()
            ),
            ArgError::Unknown(arg, expected) => {
                // Printable ASCII only: the reply is one protocol line and a C string.
                let shown: String = arg
                    .iter()
                    .take(32)
                    .map(|&b| {
                        if b.is_ascii_graphic() || b == b' ' {
                            b as char
                        } else {
                            '?'
                        }
                    })
                    .collect();
                let more = if arg.len() > 32 { "..." } else { "" };
                write!(
                    f,
                    "ERR unknown option '{shown}{more}' (expected {expected})"
                )
            }
        }
    }
}

/// A decimal integer in `lo..=hi`: ASCII digits only (no sign, no spaces).
fn int_in(arg: &[u8], name: &'static str, lo: u64, hi: u64) -> Result<u64, ArgError> {
    let err = || ArgError::Range(name, lo, hi, "");
    if arg.is_empty() {
        return Err(err());
    }
    let mut v: u64 = 0;
    for &b in arg {
        if !b.is_ascii_digit() {
            return Err(err());
        }
        v = v * 10 + u64::from(b - b'0');
        if v > hi {
            return Err(err()); // stops before any overflow: hi < u64::MAX / 10
        }
    }
    if v < lo {
        return Err(err());
    }
    Ok(v)
}

fn is(arg: &[u8], word: &str) -> bool {
    arg.eq_ignore_ascii_case(word.as_bytes())
}

/// Whether the argument after the window is meant as `now` (a number, even a bad one)
/// rather than an option: so `60 1.5` reports `now`, and `60 FOO` an unknown option.
fn looks_numeric(arg: &[u8]) -> bool {
    matches!(arg.first(), Some(b'0'..=b'9' | b'-' | b'+' | b'.'))
}

/// `[now]` right after the window, and the arguments after it.
fn split_now<'a, 'b>(rest: &'a [&'b [u8]]) -> Result<(Option<u64>, &'a [&'b [u8]]), ArgError> {
    match rest {
        [first, options @ ..] if looks_numeric(first) => {
            Ok((Some(int_in(first, "now", 0, MAX_VALUE)?), options))
        }
        _ => Ok((None, rest)),
    }
}

/// A window in `unit`, which is only known once every option has been read.
fn window_in(arg: &[u8], unit: Unit) -> Result<u64, ArgError> {
    int_in(arg, "window", 1, unit.max_window()).map_err(|_| {
        let unit_name = match unit {
            Unit::Seconds => " seconds",
            Unit::Millis => " milliseconds (MS)",
        };
        ArgError::Range("window", 1, unit.max_window(), unit_name)
    })
}

/// An unknown option, copied to name it in the reply: out of line, as it allocates.
#[cold]
#[inline(never)]
fn unknown(opt: &[u8], expected: &'static str) -> ArgError {
    ArgError::Unknown(opt.to_vec(), expected)
}

/// Sets a flag given at most once.
fn set_once(flag: &mut bool, name: &'static str) -> Result<(), ArgError> {
    if *flag {
        return Err(ArgError::Repeated(name));
    }
    *flag = true;
    Ok(())
}

const CHECK_OPTIONS: &str = "LIMIT, COST, MS or DETAILS";

/// Parses `limit window [now] [LIMIT limit window]... [COST cost] [MS] [DETAILS]` (the
/// arguments after the key) into a `Parsed::default()` the caller holds: the handler's
/// hot path, where returning the limits by value would copy them twice. Every argument
/// error of CHECK and PEEK is found here.
pub fn parse_into(args: &[&[u8]], out: &mut Parsed) -> Result<(), ArgError> {
    let [limit, window, rest @ ..] = args else {
        return Err(ArgError::Arity);
    };
    let (now, options) = split_now(rest)?;
    // Every window's bound depends on MS, which may come last: find it first. (A
    // LIMIT's numbers are never the word MS, so a plain scan cannot be fooled.)
    let unit = if options.iter().any(|o| is(o, "MS")) {
        Unit::Millis
    } else {
        Unit::Seconds
    };
    out.unit = unit;
    out.now = now;
    let mut add = |limit: &[u8], window: &[u8]| -> Result<(), ArgError> {
        if out.len == MAX_LIMITS {
            return Err(ArgError::TooManyLimits);
        }
        let limit = int_in(limit, "limit", 0, MAX_VALUE)?;
        let window = window_in(window, unit)?;
        if out.limits().iter().any(|l| l.window == window) {
            return Err(ArgError::SameWindow(window, unit));
        }
        out.limits[out.len] = Limit { limit, window };
        out.len += 1;
        Ok(())
    };
    add(limit, window)?;
    let mut cost = None;
    let mut millis = false;
    let mut details = false;
    let mut i = 0;
    while i < options.len() {
        let opt = options[i];
        if is(opt, "LIMIT") {
            let [l, w] = options
                .get(i + 1..i + 3)
                .and_then(|p| p.try_into().ok())
                .ok_or(ArgError::MissingValue("LIMIT needs a limit and a window"))?;
            add(l, w)?;
            i += 3;
        } else if is(opt, "COST") {
            if cost.is_some() {
                return Err(ArgError::Repeated("COST"));
            }
            let value = options
                .get(i + 1)
                .ok_or(ArgError::MissingValue("COST needs a value"))?;
            cost = Some(int_in(value, "cost", 1, MAX_VALUE)?);
            i += 2;
        } else if is(opt, "MS") {
            set_once(&mut millis, "MS")?;
            i += 1;
        } else if is(opt, "DETAILS") {
            set_once(&mut details, "DETAILS")?;
            i += 1;
        } else {
            return Err(unknown(opt, CHECK_OPTIONS));
        }
    }
    out.cost = cost.unwrap_or(1);
    out.details = details;
    Ok(())
}

/// Parses `window [now] [MS]` (the arguments of COUNTS after the key).
pub fn parse_counts(args: &[&[u8]]) -> Result<CountsQuery, ArgError> {
    let [window, rest @ ..] = args else {
        return Err(ArgError::Arity);
    };
    let (now, options) = split_now(rest)?;
    let mut millis = false;
    for &opt in options {
        if !is(opt, "MS") {
            return Err(unknown(opt, "MS"));
        }
        set_once(&mut millis, "MS")?;
    }
    let unit = if millis { Unit::Millis } else { Unit::Seconds };
    Ok(CountsQuery {
        window: window_in(window, unit)?,
        unit,
        now,
    })
}

#[cfg(test)]
#[path = "unit_tests/args.rs"]
mod tests;
