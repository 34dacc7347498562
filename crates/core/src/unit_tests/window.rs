//! Unit tests of the pure algorithm: the seed's semantics, exact retry/reset times,
//! backward time, several limits, and the extremes of every range.

use super::*;
use crate::test_support::{next_state, single};
use slidingwindow_testkit::reference::RefKey;
use slidingwindow_testkit::rng::Rng;
use std::collections::HashMap;

fn lim(limit: u64, window: u64) -> Limit {
    Limit { limit, window }
}

/// One limit, in seconds, cost 1.
fn req(limit: u64, window: u64, now: u64) -> Request<'static> {
    multi(&[lim(limit, window)], Unit::Seconds, now, 1)
}

/// A request owning its limits (leaked: a request borrows them, and tests are short).
fn multi(limits: &[Limit], unit: Unit, now: u64, cost: u64) -> Request<'static> {
    let limits: &'static [Limit] = Box::leak(limits.to_vec().into_boxed_slice());
    Request::new(limits, unit, now, cost).expect("1 to 8 limits")
}

fn with_cost(mut r: Request<'static>, cost: u64) -> Request<'static> {
    r.cost = cost;
    r
}

fn at_time(mut r: Request<'static>, now: u64) -> Request<'static> {
    r.now = now;
    r
}

fn counter(unit: Unit, window: u64, index: u64, current: u64, previous: u64) -> Counter {
    Counter {
        unit,
        window,
        index,
        current,
        previous,
    }
}

impl Decision<'_> {
    fn remaining(&self) -> u64 {
        self.outcome(self.governing()).remaining
    }

    /// The estimate before this request's cost was added (governing limit).
    fn count_before(&self, cost: u64) -> u64 {
        if self.allowed {
            self.count() - cost
        } else {
            self.count()
        }
    }
}

/// What a decision answered, kept after the state it borrowed has changed.
struct Seen {
    allowed: bool,
    count: u64,
    remaining: u64,
    retry_after: i64,
    reset_after: u64,
    outcomes: Vec<Outcome>,
    governing: usize,
}

impl Seen {
    fn count(&self) -> u64 {
        self.count
    }
    fn remaining(&self) -> u64 {
        self.remaining
    }
    fn retry_after(&self) -> i64 {
        self.retry_after
    }
    fn reset_after(&self) -> u64 {
        self.reset_after
    }
    fn outcome(&self, i: usize) -> Outcome {
        self.outcomes[i]
    }
    fn governing(&self) -> usize {
        self.governing
    }
}

/// Runs one request against `state` and stores the new state when allowed.
fn check(state: &mut Option<State>, r: &Request) -> Seen {
    let d = decide(state.as_ref(), r);
    let seen = Seen {
        allowed: d.allowed,
        count: d.count(),
        remaining: d.remaining(),
        retry_after: d.retry_after(),
        reset_after: d.reset_after(),
        outcomes: (0..d.limit_count()).map(|i| d.outcome(i)).collect(),
        governing: d.governing(),
    };
    let next = d.allowed.then(|| next_state(&d));
    if let Some(next) = next {
        // The handler's shortcut for one window must give the same state.
        if let Some(c) = d.next_single() {
            assert_eq!(next.counters(), &[c]);
        }
        *state = Some(next);
    }
    seen
}

/// The only counter of a one-window state.
fn only(s: &Option<State>) -> Counter {
    match s.as_ref().map(State::counters) {
        Some([c]) => *c,
        other => panic!("expected one counter, got {other:?}"),
    }
}

/// The seed's Lua script, transcribed: one counter per window number, the previous
/// window weighted by its overlap. Independent of `decide`'s state layout.
struct SeedModel {
    counts: HashMap<u64, u64>,
}

impl SeedModel {
    fn call(&mut self, limit: u64, window: u64, now: u64) -> (bool, u64) {
        let k = now / window;
        let current = *self.counts.get(&k).unwrap_or(&0) as f64;
        let prev = if k == 0 {
            0.0
        } else {
            *self.counts.get(&(k - 1)).unwrap_or(&0) as f64
        };
        let start = (now as f64 / window as f64).floor() * window as f64;
        let weight = (window as f64 - (now as f64 - start)) / window as f64;
        let est = (prev * weight + current).floor() as u64;
        if est >= limit {
            (false, est)
        } else {
            *self.counts.entry(k).or_insert(0) += 1;
            (true, est + 1)
        }
    }
}

#[test]
fn the_seed_articles_example() {
    // 80 requests in the previous minute, 30 in this one, 18 s (30%) into it: 56 + 30.
    let mut s = Some(single(counter(Unit::Seconds, 60, 1000, 30, 80)));
    let d = check(&mut s, &req(100, 60, 60_018));
    assert!(d.allowed);
    assert_eq!(d.count(), 87);
    assert_eq!(only(&s).current, 31);
    let d = check(&mut s, &req(87, 60, 60_018));
    assert!(!d.allowed);
    assert_eq!(d.count(), 87);
}

#[test]
fn matches_the_seed_model_on_random_monotonic_calls() {
    let mut rng = Rng::new(7);
    for _ in 0..2_000 {
        let window = rng.range(1, 120);
        let limit = rng.range(0, 40);
        let mut now = rng.range(0, 1_000_000);
        let mut seed = SeedModel {
            counts: HashMap::new(),
        };
        let mut state = None;
        for _ in 0..60 {
            now += match rng.range(0, 9) {
                0 => rng.range(0, 3 * window),
                _ => rng.range(0, 2),
            };
            let d = check(&mut state, &req(limit, window, now));
            assert_eq!(
                (d.allowed, d.count()),
                seed.call(limit, window, now),
                "w={window} l={limit} now={now}"
            );
        }
    }
}

#[test]
fn cost_is_charged_whole_or_not_at_all() {
    let mut s = None;
    let r = with_cost(req(10, 60, 0), 4);
    assert_eq!(check(&mut s, &r).count(), 4);
    assert_eq!(check(&mut s, &r).count(), 8);
    let d = check(&mut s, &r);
    assert!(!d.allowed);
    assert_eq!(d.count(), 8);
    assert_eq!(d.remaining(), 2);
    let one = check(&mut s, &with_cost(r, 2));
    assert!(one.allowed);
    assert_eq!(one.count(), 10);
    assert_eq!(one.remaining(), 0);
}

#[test]
fn limit_zero_denies_and_cost_over_limit_never_retries() {
    let d = decide(None, &req(0, 60, 5));
    assert!(!d.allowed);
    assert_eq!(d.retry_after(), -1);
    assert_eq!(d.reset_after(), 0);
    let d = decide(None, &with_cost(req(5, 60, 5), 6));
    assert!(!d.allowed);
    assert_eq!(d.retry_after(), -1);
}

#[test]
fn backward_time_is_judged_at_the_start_of_the_keys_window() {
    let mut s = None;
    for _ in 0..3 {
        check(&mut s, &req(5, 10, 105)); // window 10
    }
    // A clock two windows behind: judged at 100, with window 10's counts.
    let d = check(&mut s, &req(5, 10, 87));
    assert!(d.allowed);
    assert_eq!(d.count(), 4);
    let c = only(&s);
    assert_eq!((c.index, c.current, c.previous), (10, 4, 0));
    check(&mut s, &req(5, 10, 87));
    let d = check(&mut s, &req(5, 10, 87));
    assert!(!d.allowed);
    // Retry and reset are counted from the caller's own clock.
    // Window 10 holds 5: the first time the estimate is <= 4 is 111 (5 * 9/10 = 4.5).
    assert_eq!(d.retry_after(), 111 - 87);
    assert_eq!(d.reset_after(), 119 - 87); // 5 * 1/10 floors to 0 at 119
}

#[test]
fn other_windows_and_units_keep_their_own_counts() {
    let mut s = None;
    for _ in 0..5 {
        check(&mut s, &req(5, 10, 100));
    }
    assert!(!check(&mut s, &req(5, 10, 100)).allowed);
    // Another window size is another counter: it starts at 0 and the first is kept.
    let d = check(&mut s, &req(5, 11, 100));
    assert!(d.allowed);
    assert_eq!(d.count(), 1);
    let ms = multi(&[lim(1, 11)], Unit::Millis, 100, 1);
    let d = check(&mut s, &ms);
    assert!(d.allowed);
    assert_eq!(d.count(), 1);
    let st = s.unwrap();
    let kept: Vec<(Unit, u64, u64)> = st
        .counters()
        .iter()
        .map(|c| (c.unit, c.window, c.current))
        .collect();
    assert_eq!(
        kept,
        [
            (Unit::Seconds, 10, 5),
            (Unit::Seconds, 11, 1),
            (Unit::Millis, 11, 1)
        ]
    );
    // The 10 s window still refuses: its count survived the other calls.
    assert!(!decide(Some(&st), &req(5, 10, 100)).allowed);
}

/// Brute force: the first `t >= now` at which `allowed_at(t)` holds, scanning.
fn scan(now: u64, limit: u64, allowed_at: impl Fn(u64) -> bool) -> u64 {
    (now..=limit).find(|&t| allowed_at(t)).expect("scan range")
}

#[test]
fn retry_after_and_reset_after_are_exact() {
    let mut rng = Rng::new(11);
    for case in 0..20_000 {
        let window = rng.range(1, 50);
        let limit = rng.range(0, 30);
        let cost = rng.range(1, 6);
        let index = rng.range(1, 100);
        let state = single(counter(
            Unit::Seconds,
            window,
            index,
            rng.range(0, limit + 3),
            rng.range(0, 3 * limit + 3),
        ));
        // Now: often inside the key's window, sometimes later or (rarely) earlier.
        let now = match rng.range(0, 10) {
            0 => rng.range(0, index * window),
            1 => index * window + rng.range(0, 3 * window),
            _ => index * window + rng.range(0, window),
        };
        let r = with_cost(req(limit, window, now), cost);
        let d = decide(Some(&state), &r);
        let after = if d.allowed { next_state(&d) } else { state };
        let horizon = now.max(index * window) + 3 * window;
        let at = |t: u64| decide(Some(&after), &at_time(r, t));
        let reset = scan(now, horizon, |t| at(t).count_before(cost) == 0);
        assert_eq!(
            d.reset_after(),
            reset - now,
            "reset, case {case}: {state:?} {r:?}"
        );
        if d.allowed || cost > limit {
            assert_eq!(d.retry_after(), -1);
        } else {
            let retry = scan(now, horizon, |t| at(t).allowed);
            assert_eq!(
                d.retry_after(),
                (retry - now) as i64,
                "case {case}: {state:?} {r:?}"
            );
            assert!(d.retry_after() >= 1);
        }
    }
}

#[test]
fn retry_after_is_exact_for_large_values() {
    // Large counts and windows, where doubles round: check the answer at t and t - 1
    // directly instead of scanning.
    let mut rng = Rng::new(5);
    for _ in 0..20_000 {
        let window = match rng.range(0, 3) {
            0 => rng.range(1, 1_000),
            1 => rng.range(1, 1 << 32),
            _ => rng.range(1, Unit::Millis.max_window() / 4),
        };
        let limit = rng.range(0, MAX_VALUE);
        let cost = rng.range(1, limit.max(1));
        let index = rng.range(0, (MAX_VALUE - 3 * window) / window);
        let state = single(counter(
            Unit::Millis,
            window,
            index,
            rng.range(0, limit),
            rng.range(0, MAX_VALUE),
        ));
        let now = index * window + rng.range(0, window);
        let r = multi(&[lim(limit, window)], Unit::Millis, now, cost);
        let d = decide(Some(&state), &r);
        let after = if d.allowed { next_state(&d) } else { state };
        let at = |t: u64| decide(Some(&after), &at_time(r, t));
        let reset = d.reset_after();
        assert!(reset <= 2 * window);
        assert_eq!(at(now + reset).count_before(cost), 0);
        if reset > 0 {
            assert!(at(now + reset - 1).count_before(cost) > 0);
        }
        if !d.allowed && cost <= limit {
            let retry = d.retry_after() as u64;
            assert!(retry >= 1);
            assert!(at(now + retry).allowed, "{state:?} {r:?}");
            assert!(!at(now + retry - 1).allowed, "{state:?} {r:?}");
        }
    }
}

/// See `overflow_checks_are_on` below for the checks.
#[test]
fn extremes_do_not_overflow() {
    // Every value at the top of its range (the tests run with overflow checks on, so
    // any overflow panics), with the answers each must give.
    for &window in &[1, 2, Unit::Millis.max_window()] {
        for &now in &[0, MAX_VALUE - 1, MAX_VALUE] {
            let index = now / window;
            let full = single(counter(Unit::Millis, window, index, MAX_VALUE, MAX_VALUE));
            let r = multi(&[lim(MAX_VALUE, window)], Unit::Millis, now, MAX_VALUE);
            let d = decide(Some(&full), &r);
            assert!(!d.allowed);
            // Cost = limit: allowed once both windows have aged out, two windows after
            // the counter's window started (`current` is full all window long); waits
            // are capped at 2^53 - 1, which the longest window passes.
            let two_windows_on = ((index + 2) * window - now).min(MAX_VALUE);
            assert_eq!(
                d.retry_after(),
                two_windows_on as i64,
                "w={window} now={now}"
            );
            assert_eq!(d.reset_after(), two_windows_on);
            if window == Unit::Millis.max_window() && now == 0 {
                assert_eq!(two_windows_on, MAX_VALUE, "the cap is reached");
            }
            assert_eq!(d.remaining(), 0);
            assert!(d.count() >= MAX_VALUE);

            let d = decide(None, &r);
            assert!(d.allowed);
            assert_eq!(d.count(), MAX_VALUE);
            assert_eq!(d.remaining(), 0);
            assert_eq!(d.retry_after(), -1);
            // The cost sits in the current window until two windows on.
            assert_eq!(d.reset_after(), ((index + 2) * window - now).min(MAX_VALUE));
            let c = next_state(&d).counters()[0];
            assert_eq!((c.index, c.current, c.previous), (index, MAX_VALUE, 0));
        }
    }
}

/// `make test` runs the unit tests with `cargo test`: the test profile, which checks
/// every integer operation for overflow (the release profile the module ships with
/// does not). Under `--release` this test fails rather than let the others pass
/// without their checks.
#[test]
fn overflow_checks_are_on() {
    let overflowed =
        std::panic::catch_unwind(|| std::hint::black_box(u64::MAX) + std::hint::black_box(1));
    assert!(
        overflowed.is_err(),
        "built without overflow checks: run the unit tests with `cargo test`, not --release"
    );
}

// ---- Several limits ----

#[test]
fn several_limits_match_the_per_window_seed_reference() {
    let mut rng = Rng::new(13);
    let mut denied = 0;
    let mut several_denying = 0;
    let mut calls = 0;
    for seq in 0..300 {
        // At most 8 (unit, window) pairs per key, so no counter is dropped for room;
        // windows small enough for the reference to scan.
        let mut pool: Vec<(Unit, u64)> = Vec::new();
        while pool.len() < 8 {
            let p = match rng.range(0, 2) {
                0 => (Unit::Millis, rng.range(1, 300)),
                _ => (Unit::Seconds, rng.range(1, 30)),
            };
            if !pool.contains(&p) {
                pool.push(p);
            }
        }
        let mut reference = RefKey::default();
        let mut state: Option<State> = None;
        // One clock, in milliseconds; seconds calls see it floored to seconds.
        let mut clock_ms = rng.range(0, 10_000_000);
        for step in 0..50 {
            clock_ms = match rng.range(0, 12) {
                0 => clock_ms.saturating_sub(rng.range(0, 20_000)), // a clock behind
                1 => clock_ms + rng.range(0, 60_000),
                _ => clock_ms + rng.range(0, 700),
            };
            let unit = pool[rng.range(0, 7) as usize].0;
            let now = clock_ms / unit.millis();
            let mut windows: Vec<u64> = pool
                .iter()
                .filter(|(u, _)| *u == unit)
                .map(|&(_, w)| w)
                .collect();
            let n = rng.range(1, windows.len() as u64) as usize;
            // A random subset of n windows, in random order.
            for i in 0..n {
                let j = rng.range(i as u64, windows.len() as u64 - 1) as usize;
                windows.swap(i, j);
            }
            let pairs: Vec<(u64, u64)> = windows[..n]
                .iter()
                .map(|&w| (rng.range(0, 12), w))
                .collect();
            let limits: Vec<Limit> = pairs.iter().map(|&(l, w)| lim(l, w)).collect();
            let cost = rng.range(1, 3);
            let d = check(&mut state, &multi(&limits, unit, now, cost));
            let want = reference.call(&pairs, unit == Unit::Millis, now, cost);
            let ctx = format!("seq {seq} step {step}: {pairs:?} {unit:?} now={now} cost={cost}");
            assert_eq!(d.allowed, want.allowed, "{ctx}");
            for (i, o) in want.outcomes.iter().enumerate() {
                assert_eq!(outcome_array(&d, i), *o, "limit {i}, {ctx}");
            }
            assert_eq!(d.retry_after(), want.retry_after, "{ctx}");
            assert_eq!(d.reset_after() as i64, want.reset_after, "{ctx}");
            assert_eq!(d.governing(), want.governing, "{ctx}");
            let held = state.map_or(0, |s| s.counters().len());
            assert_eq!(held, reference.held(), "windows held, {ctx}");
            calls += 1;
            denied += usize::from(!want.allowed);
            let denying = want
                .outcomes
                .iter()
                .filter(|o| o[2] + cost as i64 > o[1])
                .count();
            several_denying += usize::from(!want.allowed && denying > 1);
        }
    }
    // Both branches, and the several-denying governing rule, must have run.
    assert!(denied > calls / 5, "denied {denied} of {calls}");
    assert!(several_denying > 300, "several denying {several_denying}");
}

fn outcome_array(d: &Seen, i: usize) -> [i64; 6] {
    let o = d.outcome(i);
    [
        o.window as i64,
        o.limit as i64,
        o.count as i64,
        o.remaining as i64,
        o.retry_after,
        o.reset_after as i64,
    ]
}

#[test]
fn the_governing_limit_is_chosen_as_documented() {
    // 10/s and 1000/h: allowed, the 1 s window has the least remaining.
    let limits = [lim(1000, 3600), lim(10, 1)];
    let mut s = None;
    let d = check(&mut s, &multi(&limits, Unit::Seconds, 7200, 1));
    assert_eq!(d.governing(), 1);
    assert_eq!((d.count(), d.remaining()), (1, 9));
    // Ties go to the first: 5/60 and 5/10 both have 4 left.
    let d = decide(None, &multi(&[lim(5, 60), lim(5, 10)], Unit::Seconds, 0, 1));
    assert_eq!(d.governing(), 0);
    // Denied by two: the longer wait governs; "never" (cost > limit) beats any wait.
    let mut s = None;
    let two = [lim(2, 10), lim(2, 100)];
    for _ in 0..2 {
        assert!(check(&mut s, &multi(&two, Unit::Seconds, 1000, 1)).allowed);
    }
    let d = check(&mut s, &multi(&two, Unit::Seconds, 1000, 1));
    assert!(!d.allowed);
    assert_eq!(d.governing(), 1);
    assert_eq!(d.retry_after(), d.outcome(1).retry_after);
    assert!(d.outcome(1).retry_after > d.outcome(0).retry_after);
    let never = [lim(2, 10), lim(1, 100)];
    let d = decide(s.as_ref(), &multi(&never, Unit::Seconds, 1000, 2));
    assert!(!d.allowed);
    assert_eq!(d.governing(), 1);
    assert_eq!(d.retry_after(), -1);
}

#[test]
fn a_denied_request_counts_nowhere() {
    let limits = [lim(10, 1), lim(1, 3600)];
    let mut s = None;
    assert!(check(&mut s, &multi(&limits, Unit::Seconds, 50, 1)).allowed);
    let before = s;
    let d = check(&mut s, &multi(&limits, Unit::Seconds, 51, 1));
    assert!(!d.allowed);
    assert_eq!(s, before, "nothing written");
    // The 1 s limit alone would allow it (the one request of second 50 weighs 1 at
    // 51): its retry is -1 and its count is the estimate, without this request.
    let o = d.outcome(0);
    assert_eq!((o.count, o.retry_after), (1, -1));
}

#[test]
fn aged_out_windows_are_dropped_and_at_most_eight_are_kept() {
    let mut s = None;
    // Eight windows, each named once at t = 1000.
    for w in 1..=8 {
        assert!(check(&mut s, &req(100, w, 1000)).allowed);
    }
    assert_eq!(s.unwrap().counters().len(), 8);
    // A ninth window at t = 1005: windows 1, 2 and 3 (two windows old) are dropped.
    assert!(check(&mut s, &req(100, 9, 1005)).allowed);
    let windows: Vec<u64> = s.unwrap().counters().iter().map(|c| c.window).collect();
    assert_eq!(windows, [4, 5, 6, 7, 8, 9]);
    assert!(check(&mut s, &req(100, 10, 1005)).allowed);
    assert!(check(&mut s, &req(100, 11, 1005)).allowed);
    assert_eq!(s.unwrap().counters().len(), 8);
    // A ninth again (none aged out): the one whose newest counts are oldest goes,
    // window 7 (its newest window, 994..1001, ended first; window 6's at 1002).
    assert!(check(&mut s, &req(100, 12, 1005)).allowed);
    let st = s.unwrap();
    let windows: Vec<u64> = st.counters().iter().map(|c| c.window).collect();
    assert_eq!(windows, [4, 5, 6, 8, 9, 10, 11, 12]);
    // The named windows are never dropped, even when all eight are new.
    let eight: Vec<Limit> = (20..28).map(|w| lim(100, w)).collect();
    let d = decide(Some(&st), &multi(&eight, Unit::Seconds, 1005, 1));
    let next = next_state(&d);
    let windows: Vec<u64> = next.counters().iter().map(|c| c.window).collect();
    assert_eq!(windows, (20..28).collect::<Vec<_>>());
}

#[test]
fn next_state_says_when_other_windows_are_kept() {
    // Whether the state written keeps windows the call did not name: then the key's
    // expiry must not shrink.
    let mut s = None;
    let keeps = |s: &Option<State>, r: &Request| {
        let d = decide(s.as_ref(), r);
        next_state(&d).counters().len() > d.limit_count()
    };
    assert!(!keeps(&s, &req(5, 3600, 0)));
    check(&mut s, &req(5, 3600, 0));
    assert!(keeps(&s, &req(5, 1, 0)));
    check(&mut s, &req(5, 1, 0));
    assert!(!keeps(
        &s,
        &multi(&[lim(5, 1), lim(5, 3600)], Unit::Seconds, 0, 1)
    ));
}

#[test]
fn counts_reports_what_is_in_force() {
    let mut s = None;
    for _ in 0..3 {
        check(&mut s, &req(10, 60, 125)); // window 2 (120..180)
    }
    let st = s.as_ref();
    let at = |now| {
        let (c, e) = counts(st, Unit::Seconds, 60, now);
        (c.previous, c.current, e)
    };
    assert_eq!(at(125), (0, 3, 5));
    assert_eq!(at(190), (3, 0, 10)); // one window on: current became previous
    assert_eq!(at(245), (0, 0, 5)); // two windows on: aged out
    assert_eq!(at(30), (0, 3, 0)); // a clock behind: the start of the key's window
    let (c, e) = counts(st, Unit::Millis, 60, 125);
    assert_eq!((c.previous, c.current, e), (0, 0, 5)); // another unit: nothing held
    let (c, e) = counts(None, Unit::Seconds, 7, 100);
    assert_eq!((c.previous, c.current, e), (0, 0, 2));
}
