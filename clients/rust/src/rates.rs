//! Rate strings as `limits`, slowapi and flask-limiter users write them, and the
//! [`Limit`] they parse to.
//!
//! ```
//! use slidingwindow_client::{parse_limits, Limit};
//! assert_eq!(parse_limits("10/second;1000/hour").unwrap(),
//!            vec![Limit::new(10, 1_000), Limit::new(1000, 3_600_000)]);
//! assert_eq!(parse_limits("100/5 minutes").unwrap(), vec![Limit::new(100, 300_000)]);
//! ```
//!
//! One rate: `<count> (/ | per) [<n>] <unit>`, unit second, minute, hour or day (plural
//! allowed, any case). Rates are separated by `;`, `,` or `|`. The windows come out in
//! **milliseconds** (the repository's contract): a call given a rate string sends `MS`,
//! so a 1-second window slides by the millisecond instead of jumping once a second.

use std::fmt;

/// The most limits one call may carry (the positional one and each `LIMIT`), as the
/// module and the Functions library accept.
pub const MAX_LIMITS: usize = 8;

const UNITS: [(&str, u64); 4] = [
    ("second", 1),
    ("minute", 60),
    ("hour", 3600),
    ("day", 86400),
];
const HINT: &str = "write e.g. \"10/second\", \"1000 per hour\" or \"100/5 minutes\"";

/// `limit` requests per sliding `window`. The window's unit is the call's: seconds, or
/// milliseconds when the call is in ms (always, for a parsed rate string).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Limit {
    /// Requests (units of cost) allowed in any sliding window; 0 denies everything.
    pub limit: u64,
    /// The window's length, in the call's unit.
    pub window: u64,
}

impl Limit {
    /// `limit` per `window` (in the unit of the call it is used in).
    pub const fn new(limit: u64, window: u64) -> Limit {
        Limit { limit, window }
    }
}

/// A rate string that could not be read; the message names the bad part.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RateError(pub String);

impl fmt::Display for RateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for RateError {}

fn unit_seconds(word: &str, item: &str, text: &str) -> Result<u64, RateError> {
    let lower = word.to_ascii_lowercase();
    let mut name = lower.as_str();
    if let Some(stripped) = name.strip_suffix('s') {
        if UNITS.iter().any(|(u, _)| *u == stripped) {
            name = stripped;
        }
    }
    if let Some((_, s)) = UNITS.iter().find(|(u, _)| *u == name) {
        return Ok(*s);
    }
    let bare = lower.trim_end_matches('s');
    let why = if bare == "month" || bare == "year" {
        format!("'{word}' windows vary in length: use days (e.g. 30 days)")
    } else {
        format!("unknown unit '{word}' (second, minute, hour or day)")
    };
    Err(RateError(format!("bad rate '{item}' in '{text}': {why}")))
}

/// Splits `s` into (leading ASCII digits, rest).
fn digits(s: &str) -> (&str, &str) {
    let end = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    s.split_at(end)
}

/// One rate, e.g. `"10/second"`, `"1000 per hour"`, `"100/5 minutes"`, with its window
/// in milliseconds. `text` is the whole string, named in errors.
pub fn parse_rate(item: &str, text: &str) -> Result<Limit, RateError> {
    let item = item.trim();
    let bad = || RateError(format!("bad rate '{item}' in '{text}': {HINT}"));
    let (count, rest) = digits(item);
    if count.is_empty() {
        return Err(bad());
    }
    let rest = rest.trim_start();
    let rest = if let Some(r) = rest.strip_prefix('/') {
        r
    } else if rest.len() >= 3 && rest[..3].eq_ignore_ascii_case("per") {
        let after = &rest[3..];
        // `per` must be a whole word.
        if after.starts_with(|c: char| c.is_ascii_alphanumeric() || c == '_') {
            return Err(bad());
        }
        after
    } else {
        return Err(bad());
    };
    let rest = rest.trim_start();
    let (multiplier, rest) = digits(rest);
    let rest = rest.trim_start();
    if rest.is_empty() || !rest.chars().all(|c| c.is_ascii_alphabetic()) {
        return Err(bad());
    }
    let limit: u64 = count.parse().map_err(|_| bad())?;
    let n: u64 = if multiplier.is_empty() {
        1
    } else {
        multiplier.parse().map_err(|_| bad())?
    };
    if n < 1 {
        return Err(RateError(format!(
            "bad rate '{item}' in '{text}': the window must be >= 1"
        )));
    }
    let seconds = unit_seconds(rest, item, text)?;
    let window = n
        .checked_mul(seconds)
        .and_then(|s| s.checked_mul(1000))
        .ok_or_else(bad)?;
    Ok(Limit::new(limit, window))
}

/// The rates in `text`, in order, windows in milliseconds. Fails naming the bad part: an
/// empty string, an unknown unit, a missing count, two rates with the same window, more
/// than [`MAX_LIMITS`] rates.
pub fn parse_limits(text: &str) -> Result<Vec<Limit>, RateError> {
    let items: Vec<&str> = text
        .split([';', ',', '|'])
        .filter(|i| !i.trim().is_empty())
        .collect();
    if items.is_empty() {
        return Err(RateError(format!("no rate in '{text}': {HINT}")));
    }
    let rates = items
        .iter()
        .map(|i| parse_rate(i, text))
        .collect::<Result<Vec<_>, _>>()?;
    for (i, r) in rates.iter().enumerate() {
        if let Some(first) = rates[..i].iter().find(|o| o.window == r.window) {
            return Err(RateError(format!(
                "two rates with the same window in '{text}': {} and {}; keep one (the \
                 smaller limit is the one that applies)",
                describe(first),
                describe(r)
            )));
        }
    }
    if rates.len() > MAX_LIMITS {
        return Err(RateError(format!(
            "{} rates in '{text}': at most {MAX_LIMITS} per policy",
            rates.len()
        )));
    }
    Ok(rates)
}

/// `"10 per second"`, `"100 per 5 minutes"` for a limit with a window in ms (a parsed rate).
fn describe(l: &Limit) -> String {
    let seconds = l.window / 1000;
    for (unit, s) in UNITS.iter().rev() {
        if l.window.is_multiple_of(1000) && seconds.is_multiple_of(*s) {
            let n = seconds / s;
            return if n == 1 {
                format!("{} per {unit}", l.limit)
            } else {
                format!("{} per {n} {unit}s", l.limit)
            };
        }
    }
    format!("{} per {} ms", l.limit, l.window)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forms() {
        assert_eq!(
            parse_limits("10/second").unwrap(),
            vec![Limit::new(10, 1000)]
        );
        assert_eq!(
            parse_limits("5 per minute").unwrap(),
            vec![Limit::new(5, 60_000)]
        );
        assert_eq!(
            parse_limits("100/5 minutes, 2000 per day").unwrap(),
            vec![Limit::new(100, 300_000), Limit::new(2000, 86_400_000)]
        );
        assert_eq!(
            parse_limits("1/Hours|2/DAY").unwrap(),
            vec![Limit::new(1, 3_600_000), Limit::new(2, 86_400_000)]
        );
    }

    #[test]
    fn errors_name_the_part() {
        let e = parse_limits("10/month").unwrap_err().0;
        assert!(e.contains("vary in length"), "{e}");
        let e = parse_limits("10/fortnight").unwrap_err().0;
        assert!(e.contains("unknown unit 'fortnight'"), "{e}");
        assert!(parse_limits("").unwrap_err().0.starts_with("no rate"));
        assert!(parse_limits("ten/second").is_err());
        assert!(parse_limits("10/0 seconds").unwrap_err().0.contains(">= 1"));
        let e = parse_limits("1/second;2/second").unwrap_err().0;
        assert!(e.contains("1 per second and 2 per second"), "{e}");
        let nine = "1/1s;1/2s;1/3s;1/4s;1/5s;1/6s;1/7s;1/8s;1/9s".replace('s', " seconds");
        assert!(parse_limits(&nine).unwrap_err().0.contains("at most 8"));
        assert!(parse_limits("10 persecond").is_err());
    }
}
