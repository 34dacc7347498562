//! The sliding window counter, as pure arithmetic: no Redis types, no I/O.
//!
//! Time is a whole number of *units* (seconds or milliseconds, the caller's choice);
//! window number `k` covers `[k * window, (k + 1) * window)`. For each window size it
//! has seen, a key keeps a `Counter`: the count of the window it was last written in and
//! of the window before it. The estimate at time `t` is the seed script's
//! `floor(previous * (window - elapsed) / window + current)`, computed in IEEE doubles
//! in the same order as Lua does, so every reply matches the script bit for bit.
//!
//! A call names one to `MAX_LIMITS` limits (a limit and a window each, one unit for all).
//! Each is judged on its own counter exactly as a single limit would be; the request is
//! allowed only when every limit allows it, and then its cost is counted in every named
//! window. Windows the call does not name keep their counts.

/// The largest value accepted for any count, time or window: 2^53 - 1. Every integer up
/// to it is exact in a double, so the estimate is computed exactly as the Lua script
/// computes it, and no sum or product below can overflow a u64.
pub const MAX_VALUE: u64 = (1 << 53) - 1;

/// Limits one call may name (the positional one included).
pub const MAX_LIMITS: usize = 8;

/// Counters one key may hold.
pub const MAX_WINDOWS: usize = 8;

/// The unit of `window` and `now`. A window is only comparable within one unit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Unit {
    #[default]
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

    /// "seconds" or "milliseconds", for messages.
    pub fn name(self) -> &'static str {
        match self {
            Unit::Seconds => "seconds",
            Unit::Millis => "milliseconds",
        }
    }
}

/// One window size's counts in a key: the window it was last written in and the one
/// before it. `Counter::default()` (all zero) only fills unused slots.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counter {
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

impl Counter {
    /// The order counters are kept in, in a state and in its bytes.
    pub fn sort_key(&self) -> (Unit, u64) {
        (self.unit, self.window)
    }

    /// The end of the newest window this counter has counts for, in milliseconds.
    /// `index * window <= MAX_VALUE` units (the decoder checks it), so this and one
    /// window more stay below 2^63 in either unit.
    fn newest_ms(&self) -> u64 {
        (self.index + 1) * self.window * self.unit.millis()
    }

    /// Whether its counts can no longer affect any answer at `now_ms`: two windows on.
    fn aged_out(&self, now_ms: u64) -> bool {
        self.newest_ms() + self.window * self.unit.millis() <= now_ms
    }
}

/// What a key holds: 1 to `MAX_WINDOWS` counters, sorted by `(unit, window)`, no two
/// with the same window and unit. `State::default()` holds none: a buffer to decode
/// into, never written to a key.
#[derive(Clone, Copy, Debug, Default)]
pub struct State(Held);

/// The counters, by how many. The enum is as large as eight counters either way: the
/// point is that `Empty` and `One` (the common case) never initialise that room, which
/// keeps the single-window path small in stack writes and code.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Copy, Debug, Default)]
enum Held {
    #[default]
    Empty,
    One(Counter),
    Many([Counter; MAX_WINDOWS], usize),
}

impl PartialEq for State {
    fn eq(&self, other: &State) -> bool {
        self.counters() == other.counters()
    }
}

impl Eq for State {}

impl State {
    /// Appends `c` if there is room and it sorts after every counter held; says
    /// whether it did.
    #[inline(always)]
    pub fn push(&mut self, c: Counter) -> bool {
        let held = self.counters();
        let in_order = held
            .last()
            .is_none_or(|last| last.sort_key() < c.sort_key());
        if held.len() == MAX_WINDOWS || !in_order {
            return false;
        }
        self.append(c);
        true
    }

    /// Appends `c`, in any order; the caller makes sure there is room.
    fn append(&mut self, c: Counter) {
        match &mut self.0 {
            Held::Empty => self.0 = Held::One(c),
            Held::One(first) => {
                let mut all = [Counter::default(); MAX_WINDOWS];
                all[0] = *first;
                all[1] = c;
                self.0 = Held::Many(all, 2);
            }
            Held::Many(all, len) => {
                all[*len] = c;
                *len += 1;
            }
        }
    }

    /// Drops every counter: the state is a buffer again.
    pub fn clear(&mut self) {
        self.0 = Held::Empty;
    }

    pub fn counters(&self) -> &[Counter] {
        match &self.0 {
            Held::Empty => &[],
            Held::One(c) => std::slice::from_ref(c),
            Held::Many(all, len) => &all[..*len],
        }
    }

    fn counters_mut(&mut self) -> &mut [Counter] {
        match &mut self.0 {
            Held::Empty => &mut [],
            Held::One(c) => std::slice::from_mut(c),
            Held::Many(all, len) => &mut all[..*len],
        }
    }

    fn find(&self, unit: Unit, window: u64) -> Option<&Counter> {
        self.counters()
            .iter()
            .find(|c| c.window == window && c.unit == unit)
    }
}

/// One limit of a call: at most `limit` per `window` units.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limit {
    pub limit: u64,
    pub window: u64,
}

/// One call, already validated by `args`: every field is within its documented range,
/// 1 to `MAX_LIMITS` limits with distinct windows. The limits are borrowed from the
/// parsed arguments: a request is a view, copied for nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Request<'a> {
    limits: &'a [Limit],
    pub unit: Unit,
    /// The caller's time in `unit`s.
    pub now: u64,
    pub cost: u64,
}

impl<'a> Request<'a> {
    /// `None` unless there are 1 to `MAX_LIMITS` limits.
    pub fn new(limits: &'a [Limit], unit: Unit, now: u64, cost: u64) -> Option<Request<'a>> {
        if limits.is_empty() || limits.len() > MAX_LIMITS {
            return None;
        }
        Some(Request {
            limits,
            unit,
            now,
            cost,
        })
    }

    /// Whether `c` is the counter of a window this request names.
    fn names(&self, c: &Counter) -> bool {
        c.unit == self.unit && self.limits.iter().any(|l| l.window == c.window)
    }

    /// The longest window named, in milliseconds.
    pub fn longest_window_ms(&self) -> u64 {
        let w = self.limits.iter().map(|l| l.window).max().unwrap_or(1);
        w * self.unit.millis()
    }
}

/// The counts that apply in one window: the previous window's and this one's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Counts {
    pub index: u64,
    pub previous: u64,
    pub current: u64,
}

/// One limit judged on its own counter, before anything is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Judged {
    limit: Limit,
    /// The time the limit was judged at: `now`, or the start of its counter's window
    /// when `now` lies in an earlier window (a caller whose clock is behind).
    judged_at: u64,
    /// The counts in force at `judged_at`, before this request.
    counts: Counts,
    /// The seed's estimate at `judged_at`.
    est: u64,
}

/// The time a window of length `w` is judged at, and the counts in force then: `now`,
/// or the start of the counter's window when `now` lies in an earlier one (a caller
/// whose clock is behind). Counts never move into a past window.
fn in_force(stored: Option<&Counter>, w: u64, now: u64) -> (u64, Counts) {
    let judged_at = match stored {
        Some(c) if now / w < c.index => c.index * w,
        _ => now,
    };
    (judged_at, counts_at(stored, judged_at / w))
}

impl Judged {
    fn new(stored: Option<&Counter>, limit: Limit, now: u64) -> Judged {
        let w = limit.window;
        let (judged_at, counts) = in_force(stored, w, now);
        Judged {
            limit,
            judged_at,
            counts,
            est: estimate(w, counts, judged_at % w),
        }
    }

    /// Whether this limit alone allows a request of `cost`.
    fn allows(&self, cost: u64) -> bool {
        // est <= 2 * MAX_VALUE and cost <= MAX_VALUE: no overflow.
        self.est + cost <= self.limit.limit
    }
}

/// The outcome of one request, judged on what the key holds. When `allowed`,
/// `next_state` is what the key must hold afterwards; when denied the key is left as
/// it was. It borrows the state and the request, and works each limit's figures out
/// when asked: a reply without DETAILS asks for one count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Decision<'a> {
    pub allowed: bool,
    /// The first limit, judged: with one limit, all a reply without DETAILS needs.
    first: Judged,
    stored: Option<&'a State>,
    req: Request<'a>,
}

/// What one limit reports: as that limit alone would, for the request as decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Outcome {
    pub window: u64,
    pub limit: u64,
    /// The estimate plus the cost when the request was allowed, else the estimate.
    pub count: u64,
    pub remaining: u64,
    /// -1 when this limit alone allows the request, or never can (cost > limit).
    pub retry_after: i64,
    pub reset_after: u64,
}

/// The seed's estimate for `counts` at `elapsed` units into window `counts.index`.
/// Same operations, same order as the Lua script: weight, multiply, add, floor.
fn estimate(window: u64, counts: Counts, elapsed: u64) -> u64 {
    let weight = (window - elapsed) as f64 / window as f64;
    // The sum is never negative, so `as` (truncation) is the floor, without the call to
    // libm's floor that the baseline x86-64 target (no SSE4.1) would make.
    (counts.previous as f64 * weight + counts.current as f64) as u64
}

/// The counts in force in window `index` given what the counter holds.
fn counts_at(stored: Option<&Counter>, index: u64) -> Counts {
    let (previous, current) = match stored {
        Some(c) if c.index == index => (c.previous, c.current),
        Some(c) if c.index + 1 == index => (c.current, 0),
        _ => (0, 0),
    };
    Counts {
        index,
        previous,
        current,
    }
}

/// For `SLIDINGWINDOW.COUNTS`: the counts of `window` in force at `now`, and the units
/// elapsed in the current window, judged as `decide` judges (a clock behind the
/// counter's window is taken to the start of that window).
pub fn counts(stored: Option<&State>, unit: Unit, window: u64, now: u64) -> (Counts, u64) {
    let c = stored.and_then(|s| s.find(unit, window));
    let (judged_at, counts) = in_force(c, window, now);
    (counts, judged_at % window)
}

/// SLIDINGWINDOW.REFUND: gives `req.cost` back, in `state` itself, in each window the request names and the key holds, newest count first (the current
/// window's, then the previous one's), none below 0, each window judged at the time
/// `decide` would judge it. Windows not named, and named windows with nothing to give
/// back, are left exactly as they are; nothing is dropped or reordered. Returns the
/// units given back, summed over the windows: 0 means `state` is unchanged.
pub fn refund(state: &mut State, req: &Request) -> u64 {
    let mut given = 0;
    for limit in req.limits {
        let held = state
            .counters_mut()
            .iter_mut()
            .find(|c| c.unit == req.unit && c.window == limit.window);
        let Some(c) = held else {
            continue;
        };
        let (_, counts) = in_force(Some(c), limit.window, req.now);
        let from_current = counts.current.min(req.cost);
        let from_previous = counts.previous.min(req.cost - from_current);
        if from_current + from_previous == 0 {
            continue;
        }
        *c = Counter {
            index: counts.index,
            current: counts.current - from_current,
            previous: counts.previous - from_previous,
            ..*c
        };
        given += from_current + from_previous;
    }
    given
}

/// Decides one request against what the key holds (`None` for a missing key).
#[inline]
pub fn decide<'a>(stored: Option<&'a State>, req: &Request<'a>) -> Decision<'a> {
    let first = judge(stored, req, 0);
    let allowed = first.allows(req.cost)
        && (1..req.limits.len()).all(|i| judge(stored, req, i).allows(req.cost));
    Decision {
        allowed,
        first,
        stored,
        req: *req,
    }
}

/// Limit `i` of `req` judged on its own counter in `stored`.
#[inline(always)]
fn judge(stored: Option<&State>, req: &Request, i: usize) -> Judged {
    let limit = req.limits[i];
    let counter = stored.and_then(|s| s.find(req.unit, limit.window));
    Judged::new(counter, limit, req.now)
}

impl Decision<'_> {
    /// Limit `i` judged on its own counter.
    #[inline(always)]
    fn judge(&self, i: usize) -> Judged {
        match i {
            0 => self.first,
            _ => judge(self.stored, &self.req, i),
        }
    }

    fn judged(&self) -> impl Iterator<Item = Judged> + '_ {
        (0..self.req.limits.len()).map(|i| self.judge(i))
    }

    /// Writes into `out` the key's state after this (allowed) request: the named
    /// windows with the cost counted, then the other windows the key holds, less those
    /// whose counts can no longer matter (two windows old at `now`) and, past
    /// `MAX_WINDOWS`, those whose newest counts are oldest. When it keeps windows the
    /// call did not name (`counters().len() > limit_count()`), the key's expiry must not
    /// be shortened. Into a state the caller holds: no copy of the result.
    pub fn next_state_into(&self, out: &mut State) {
        let req = &self.req;
        out.clear();
        for j in self.judged() {
            out.append(self.counted(&j));
        }
        let named = out.counters().len();
        let now_ms = req.now * req.unit.millis();
        let is_other = |c: &Counter| !req.names(c) && !c.aged_out(now_ms);
        let stored = self.stored.map(State::counters).unwrap_or_default();
        if stored.iter().any(is_other) {
            let mut others = [Counter::default(); MAX_WINDOWS];
            let mut n = 0;
            for c in stored.iter().filter(|c| is_other(c)) {
                others[n] = *c;
                n += 1;
            }
            others[..n].sort_unstable_by_key(|c| std::cmp::Reverse(c.newest_ms()));
            for c in &others[..n.min(MAX_WINDOWS - named)] {
                out.append(*c);
            }
        }
        out.counters_mut().sort_unstable_by_key(Counter::sort_key);
    }

    /// The next state (see `next_state_into`) when it is one counter (one limit, and
    /// the key holds no other window): the common case, which the handler encodes
    /// without building a `State`. `None` otherwise.
    pub fn next_single(&self) -> Option<Counter> {
        if self.req.limits.len() != 1 {
            return None;
        }
        match self.stored.map(State::counters).unwrap_or_default() {
            [] => {}
            [c] if self.req.names(c) => {}
            _ => return None,
        }
        Some(self.counted(&self.first))
    }

    /// `j`'s counter after this (allowed) request: its counts with the cost added.
    fn counted(&self, j: &Judged) -> Counter {
        Counter {
            unit: self.req.unit,
            window: j.limit.window,
            index: j.counts.index,
            current: j.counts.current + self.req.cost,
            previous: j.counts.previous,
        }
    }

    /// The number of limits the call named.
    pub fn limit_count(&self) -> usize {
        self.req.limits.len()
    }

    /// What limit `i` (in call order) reports.
    pub fn outcome(&self, i: usize) -> Outcome {
        let j = self.judge(i);
        let count = self.count_of(&j);
        Outcome {
            window: j.limit.window,
            limit: j.limit.limit,
            count,
            remaining: j.limit.limit.saturating_sub(count),
            retry_after: self.retry_after_of(&j),
            reset_after: self.reset_after_of(&j),
        }
    }

    /// The estimate plus the cost when the request was allowed, else the estimate.
    fn count_of(&self, j: &Judged) -> u64 {
        if self.allowed {
            j.est + self.req.cost
        } else {
            j.est
        }
    }

    /// -1 when `j` alone allows the request or never can; else the units until it does.
    fn retry_after_of(&self, j: &Judged) -> i64 {
        let cost = self.req.cost;
        if j.allows(cost) || cost > j.limit.limit {
            return -1;
        }
        // Denied: nothing was written, so the counts are as judged.
        self.units_until(j, j.counts, j.limit.limit - cost) as i64
    }

    fn reset_after_of(&self, j: &Judged) -> u64 {
        let after = if self.allowed {
            Counts {
                current: j.counts.current + self.req.cost,
                ..j.counts
            }
        } else {
            j.counts
        };
        self.units_until(j, after, 0)
    }

    /// The limit whose figures the reply shows: when denied, the denying limit with the
    /// longest wait ("never" longest of all); when allowed, the one with the least
    /// remaining. Ties go to the first in call order.
    #[inline]
    pub fn governing(&self) -> usize {
        if self.limit_count() == 1 {
            return 0;
        }
        self.governing_of_several()
    }

    /// `governing` for two or more limits. Out of line, as every part of the
    /// multi-limit path is: the single-limit path stays a few cache lines long.
    #[inline(never)]
    fn governing_of_several(&self) -> usize {
        let cost = self.req.cost;
        // (index, key): the first with the largest key wins.
        let mut best: Option<(usize, u64)> = None;
        for (i, j) in self.judged().enumerate() {
            let key = if self.allowed {
                // Least remaining first: allowed means est + cost <= limit.
                u64::MAX - (j.limit.limit - (j.est + cost))
            } else if j.allows(cost) {
                continue;
            } else {
                match self.retry_after_of(&j) {
                    -1 => u64::MAX,
                    r => r as u64,
                }
            };
            if best.is_none_or(|(_, b)| key > b) {
                best = Some((i, key));
            }
        }
        best.map_or(0, |(i, _)| i)
    }

    /// The governing limit's count: all a reply without DETAILS needs.
    pub fn count(&self) -> u64 {
        self.count_of(&self.judge(self.governing()))
    }

    /// Units until the same request would be allowed by every limit with no other
    /// traffic: -1 when allowed now, or when some limit never can (cost > limit).
    pub fn retry_after(&self) -> i64 {
        if self.allowed {
            return -1;
        }
        let mut longest = -1;
        for j in self.judged().filter(|j| !j.allows(self.req.cost)) {
            match self.retry_after_of(&j) {
                -1 => return -1,
                r => longest = longest.max(r),
            }
        }
        longest
    }

    /// Units until every named window's estimate is 0 with no further traffic.
    pub fn reset_after(&self) -> u64 {
        self.judged()
            .map(|j| self.reset_after_of(&j))
            .max()
            .unwrap_or(0)
    }

    /// Whole units from the caller's `now` until `j`'s estimate is at most `most`,
    /// given `counts` in force at `j.judged_at`, capped at `MAX_VALUE`: near the top of
    /// the ranges the wait can pass 2^53 - 1, which a Lua number (the Functions
    /// library's) could not carry exactly. The cap is ~285 million years in seconds.
    fn units_until(&self, j: &Judged, counts: Counts, most: u64) -> u64 {
        let at = first_time_at_most(j.limit.window, counts, j.judged_at, most);
        if at == j.judged_at {
            0
        } else {
            (at - self.req.now).min(MAX_VALUE)
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
#[path = "unit_tests/window.rs"]
mod tests;
