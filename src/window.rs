//! The sliding window counter, as pure arithmetic: no Redis types, no I/O.
//!
//! Time is a whole number of *units* (seconds or milliseconds, the caller's choice);
//! window number `k` covers `[k * window, (k + 1) * window)`. A key's state keeps the
//! count of the window it was last written in and of the window before it. The estimate
//! at time `t` is the seed script's
//! `floor(previous * (window - elapsed) / window + current)`, computed in IEEE doubles
//! in the same order as Lua does, so every reply matches the script bit for bit.

/// The largest value accepted for any count, time or window: 2^53 - 1. Every integer up
/// to it is exact in a double, so the estimate is computed exactly as the Lua script
/// computes it, and no sum or product below can overflow a u64.
pub const MAX_VALUE: u64 = (1 << 53) - 1;

/// The unit of `window` and `now`. A key's window is only comparable within one unit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unit {
    Seconds,
    Millis,
}

impl Unit {
    /// Milliseconds in one unit.
    pub fn millis(self) -> u64 {
        match self {
            Unit::Seconds => 1000,
            Unit::Millis => 1,
        }
    }

    /// The largest window accepted in this unit: MAX_VALUE milliseconds, so that
    /// "now + 2 windows" in milliseconds stays far inside an i64.
    pub fn max_window(self) -> u64 {
        MAX_VALUE / self.millis()
    }
}

/// What a key holds: one window size and the counts of two consecutive windows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct State {
    pub unit: Unit,
    /// Window length in `unit`s, >= 1.
    pub window: u64,
    /// Number of the window `current` belongs to (`time / window`).
    pub index: u64,
    /// Requests (weighted by cost) counted in window `index`.
    pub current: u64,
    /// Requests counted in window `index - 1`.
    pub previous: u64,
}

/// One call, already validated by `args`: every field is within its documented range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Request {
    pub limit: u64,
    pub window: u64,
    pub unit: Unit,
    /// The caller's time in `unit`s.
    pub now: u64,
    pub cost: u64,
}

/// The counts that apply in one window: the previous window's and this one's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Counts {
    index: u64,
    previous: u64,
    current: u64,
}

/// The outcome of one request. `state` is what the key must hold afterwards when
/// `allowed`; when denied the key is left as it was.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Decision {
    pub allowed: bool,
    /// The estimate after this request when allowed (estimate + cost), else the estimate.
    pub count: u64,
    pub state: State,
    request: Request,
    /// The time the request was judged at: `now`, or the start of the key's window when
    /// `now` lies in an earlier window (a caller whose clock is behind).
    judged_at: u64,
    /// The counts in force at `judged_at` after this request.
    after: Counts,
}

/// The seed's estimate for `counts` at `elapsed` units into window `counts.index`.
/// Same operations, same order as the Lua script: weight, multiply, add, floor.
fn estimate(window: u64, counts: Counts, elapsed: u64) -> u64 {
    let weight = (window - elapsed) as f64 / window as f64;
    (counts.previous as f64 * weight + counts.current as f64).floor() as u64
}

/// The counts in force in window `index` given what the key holds.
fn counts_at(state: Option<&State>, index: u64) -> Counts {
    let (previous, current) = match state {
        Some(s) if s.index == index => (s.previous, s.current),
        Some(s) if s.index + 1 == index => (s.current, 0),
        _ => (0, 0),
    };
    Counts {
        index,
        previous,
        current,
    }
}

/// Decides one request against what the key holds (`None` for a missing key).
/// A state kept for another window size or unit is ignored: the key starts afresh.
pub fn decide(stored: Option<&State>, req: &Request) -> Decision {
    let stored = stored.filter(|s| s.window == req.window && s.unit == req.unit);
    let w = req.window;
    // A caller behind the key's window is judged at the start of the key's window, so
    // counts never go backwards.
    let judged_at = match stored {
        Some(s) if req.now / w < s.index => s.index * w,
        _ => req.now,
    };
    let counts = counts_at(stored, judged_at / w);
    let est = estimate(w, counts, judged_at % w);
    // est <= 2 * MAX_VALUE and cost <= MAX_VALUE: no overflow.
    let allowed = est + req.cost <= req.limit;
    let after = if allowed {
        Counts {
            current: counts.current + req.cost,
            ..counts
        }
    } else {
        counts
    };
    Decision {
        allowed,
        count: if allowed { est + req.cost } else { est },
        state: State {
            unit: req.unit,
            window: w,
            index: after.index,
            current: after.current,
            previous: after.previous,
        },
        request: *req,
        judged_at,
        after,
    }
}

impl Decision {
    /// Units until the same request would be allowed with no other traffic: -1 when
    /// allowed now, or when it never can be (cost > limit).
    pub fn retry_after(&self) -> i64 {
        if self.allowed || self.request.cost > self.request.limit {
            return -1;
        }
        self.units_until(self.request.limit - self.request.cost) as i64
    }

    /// Units until the estimate is 0 with no further traffic.
    pub fn reset_after(&self) -> u64 {
        self.units_until(0)
    }

    pub fn limit(&self) -> u64 {
        self.request.limit
    }

    /// `max(0, limit - count)`.
    pub fn remaining(&self) -> u64 {
        self.request.limit.saturating_sub(self.count)
    }

    /// Whole units from the caller's `now` until the estimate is at most `most`.
    fn units_until(&self, most: u64) -> u64 {
        let at = first_time_at_most(self.request.window, self.after, self.judged_at, most);
        if at == self.judged_at {
            0
        } else {
            at - self.request.now
        }
    }
}

/// The first time `t >= from` at which the estimate is at most `most`, given `counts`
/// in force at `from` and no further traffic. The estimate never rises as time passes
/// (the weight falls within a window, and at a boundary `current` becomes `previous` at
/// full weight), which is what makes the searches below exact.
fn first_time_at_most(w: u64, counts: Counts, from: u64, most: u64) -> u64 {
    let k = counts.index;
    // This window, then the next one (where `current` has become `previous`); two
    // windows on, both counts have aged out and the estimate is 0.
    let next = Counts {
        index: k + 1,
        previous: counts.current,
        current: 0,
    };
    for (c, lo) in [(counts, from - k * w), (next, 0)] {
        if let Some(e) = first_elapsed_at_most(w, c, lo, most) {
            return c.index * w + e;
        }
    }
    (k + 2) * w
}

/// The smallest `elapsed` in `[lo, w)` with `estimate(w, c, elapsed) <= most`, if any.
fn first_elapsed_at_most(w: u64, c: Counts, lo: u64, most: u64) -> Option<u64> {
    if c.current > most {
        return None; // the weighted part only shrinks; `current` stays all window long
    }
    // The estimate never exceeds previous + current (the weight is at most 1 and
    // rounding is monotone); when that sum is <= most (< 2^53, exact in a double) the
    // estimate is within `most` all window long.
    let headroom = most + 1 - c.current;
    if c.previous < headroom {
        return Some(lo);
    }
    let ok = |e: u64| estimate(w, c, e) <= most;
    // In exact arithmetic, estimate <= most  <=>  previous * (w - e) < headroom * w
    //                                        <=>  e > (previous - headroom) * w / previous.
    // Doubles may round a step either way, so the guess is checked at itself and one
    // step before; if it is off, bisection settles it (the estimate is monotone).
    let p = c.previous as u128;
    let guess = ((p - headroom as u128) * w as u128 / p + 1) as u64;
    let guess = guess.clamp(lo, w - 1);
    if ok(guess) {
        if guess == lo || !ok(guess - 1) {
            return Some(guess);
        }
        if ok(lo) {
            return Some(lo);
        }
        return Some(bisect(lo, guess - 1, ok));
    }
    if guess == w - 1 || !ok(w - 1) {
        return None;
    }
    Some(bisect(guess, w - 1, ok))
}

/// The first `e` in `(bad, good]` with `ok(e)`, given `!ok(bad)`, `ok(good)` and `ok`
/// monotone.
fn bisect(mut bad: u64, mut good: u64, ok: impl Fn(u64) -> bool) -> u64 {
    while good - bad > 1 {
        let mid = bad + (good - bad) / 2;
        if ok(mid) {
            good = mid;
        } else {
            bad = mid;
        }
    }
    good
}

#[cfg(test)]
#[path = "window_tests.rs"]
mod tests;
