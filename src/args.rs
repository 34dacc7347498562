//! The arguments after the key, parsed into a request. Every argument error is found
//! here, before the key is touched.
//!
//! `limit window [now] [COST cost] [MS] [DETAILS]`: `now`, if given, comes right after
//! `window`; the options follow in any order and any case, each at most once.

use crate::window::{Request, Unit, MAX_VALUE};
use std::fmt;

/// A parsed call. `now` is `None` when the caller left it to the server's clock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Parsed {
    pub limit: u64,
    pub window: u64,
    pub unit: Unit,
    pub now: Option<u64>,
    pub cost: u64,
    pub details: bool,
}

impl Parsed {
    /// The request at `now`, or, when `now` was omitted, at the server's time in
    /// milliseconds, which `server_ms` is only asked for then.
    pub fn request(&self, server_ms: impl FnOnce() -> u64) -> Request {
        Request {
            limit: self.limit,
            window: self.window,
            unit: self.unit,
            now: self.now.unwrap_or_else(|| server_ms() / self.unit.millis()),
            cost: self.cost,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ArgError {
    /// Fewer than `limit window`.
    Arity,
    /// An argument outside its range or not an integer: (name, lowest, highest, unit).
    Range(&'static str, u64, u64, &'static str),
    MissingValue(&'static str),
    Repeated(&'static str),
    /// An argument that is no option; kept (shortened) to name it in the reply.
    Unknown(Vec<u8>),
}

impl fmt::Display for ArgError {
    /// The reply text, starting with the error code as Redis expects.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ArgError::Arity => write!(f, "ERR wrong number of arguments"),
            ArgError::Range(name, lo, hi, unit) => {
                write!(f, "ERR {name} must be an integer from {lo} to {hi}{unit}")
            }
            ArgError::MissingValue(name) => write!(f, "ERR {name} needs a value"),
            ArgError::Repeated(name) => write!(f, "ERR {name} given more than once"),
            ArgError::Unknown(arg) => {
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
                    "ERR unknown option '{shown}{more}' (expected COST, MS or DETAILS)"
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

/// Whether the argument after `window` is meant as `now` (a number, even a bad one)
/// rather than an option: so `60 1.5` reports `now`, and `60 FOO` an unknown option.
fn looks_numeric(arg: &[u8]) -> bool {
    matches!(arg.first(), Some(b'0'..=b'9' | b'-' | b'+' | b'.'))
}

/// Parses `limit window [now] [COST cost] [MS] [DETAILS]` (the arguments after the key).
pub fn parse(args: &[&[u8]]) -> Result<Parsed, ArgError> {
    let [limit, window, rest @ ..] = args else {
        return Err(ArgError::Arity);
    };
    let limit = int_in(limit, "limit", 0, MAX_VALUE)?;
    let (now, options) = match rest {
        [first, options @ ..] if looks_numeric(first) => {
            (Some(int_in(first, "now", 0, MAX_VALUE)?), options)
        }
        _ => (None, rest),
    };
    let mut cost = None;
    let mut millis = false;
    let mut details = false;
    let mut i = 0;
    while i < options.len() {
        let opt = options[i];
        if is(opt, "COST") {
            if cost.is_some() {
                return Err(ArgError::Repeated("COST"));
            }
            let value = options.get(i + 1).ok_or(ArgError::MissingValue("COST"))?;
            cost = Some(int_in(value, "cost", 1, MAX_VALUE)?);
            i += 2;
            continue;
        }
        let flag = if is(opt, "MS") {
            (&mut millis, "MS")
        } else if is(opt, "DETAILS") {
            (&mut details, "DETAILS")
        } else {
            return Err(ArgError::Unknown(opt.to_vec()));
        };
        if *flag.0 {
            return Err(ArgError::Repeated(flag.1));
        }
        *flag.0 = true;
        i += 1;
    }
    let unit = if millis { Unit::Millis } else { Unit::Seconds };
    // The window's bound depends on MS, which may come after it.
    let window = int_in(window, "window", 1, unit.max_window()).map_err(|_| {
        let unit_name = match unit {
            Unit::Seconds => " seconds",
            Unit::Millis => " milliseconds (MS)",
        };
        ArgError::Range("window", 1, unit.max_window(), unit_name)
    })?;
    Ok(Parsed {
        limit,
        window,
        unit,
        now,
        cost: cost.unwrap_or(1),
        details,
    })
}

#[cfg(test)]
#[path = "args_tests.rs"]
mod tests;
