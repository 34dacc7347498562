//! Unit tests of the pure algorithm: the seed's semantics, exact retry/reset times,
//! backward time, and the extremes of every range.

use super::*;
use crate::testrng::Rng;
use std::collections::HashMap;

fn req(limit: u64, window: u64, now: u64) -> Request {
    Request {
        limit,
        window,
        unit: Unit::Seconds,
        now,
        cost: 1,
    }
}

/// Runs one request against `state` and stores the new state when allowed.
fn check(state: &mut Option<State>, r: &Request) -> Decision {
    let d = decide(state.as_ref(), r);
    if d.allowed {
        *state = Some(d.state);
    }
    d
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
    let mut s = Some(State {
        unit: Unit::Seconds,
        window: 60,
        index: 1000,
        current: 30,
        previous: 80,
    });
    let d = check(&mut s, &req(100, 60, 60_018));
    assert!(d.allowed);
    assert_eq!(d.count, 87);
    assert_eq!(s.unwrap().current, 31);
    let d = check(&mut s, &req(87, 60, 60_018));
    assert!(!d.allowed);
    assert_eq!(d.count, 87);
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
                (d.allowed, d.count),
                seed.call(limit, window, now),
                "w={window} l={limit} now={now}"
            );
        }
    }
}

#[test]
fn cost_is_charged_whole_or_not_at_all() {
    let mut s = None;
    let r = Request {
        cost: 4,
        ..req(10, 60, 0)
    };
    assert_eq!(check(&mut s, &r).count, 4);
    assert_eq!(check(&mut s, &r).count, 8);
    let d = check(&mut s, &r);
    assert!(!d.allowed);
    assert_eq!(d.count, 8);
    assert_eq!(d.remaining(), 2);
    let one = check(&mut s, &Request { cost: 2, ..r });
    assert!(one.allowed);
    assert_eq!(one.count, 10);
    assert_eq!(one.remaining(), 0);
}

#[test]
fn limit_zero_denies_and_cost_over_limit_never_retries() {
    let d = decide(None, &req(0, 60, 5));
    assert!(!d.allowed);
    assert_eq!(d.retry_after(), -1);
    assert_eq!(d.reset_after(), 0);
    let d = decide(
        None,
        &Request {
            cost: 6,
            ..req(5, 60, 5)
        },
    );
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
    assert_eq!(d.count, 4);
    let st = s.unwrap();
    assert_eq!((st.index, st.current, st.previous), (10, 4, 0));
    check(&mut s, &req(5, 10, 87));
    let d = check(&mut s, &req(5, 10, 87));
    assert!(!d.allowed);
    // Retry and reset are counted from the caller's own clock.
    // Window 10 holds 5: the first time the estimate is <= 4 is 111 (5 * 9/10 = 4.5).
    assert_eq!(d.retry_after(), 111 - 87);
    assert_eq!(d.reset_after(), 119 - 87); // 5 * 1/10 floors to 0 at 119
}

#[test]
fn another_window_or_unit_starts_afresh() {
    let mut s = None;
    for _ in 0..5 {
        check(&mut s, &req(5, 10, 100));
    }
    assert!(!check(&mut s, &req(5, 10, 100)).allowed);
    assert!(check(&mut s, &req(5, 11, 100)).allowed);
    let ms = Request {
        unit: Unit::Millis,
        ..req(1, 11, 100)
    };
    let d = check(&mut s, &ms);
    assert!(d.allowed);
    assert_eq!(d.count, 1);
    assert_eq!(s.unwrap().unit, Unit::Millis);
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
        let state = State {
            unit: Unit::Seconds,
            window,
            index,
            current: rng.range(0, limit + 3),
            previous: rng.range(0, 3 * limit + 3),
        };
        // Now: often inside the key's window, sometimes later or (rarely) earlier.
        let now = match rng.range(0, 10) {
            0 => rng.range(0, index * window),
            1 => index * window + rng.range(0, 3 * window),
            _ => index * window + rng.range(0, window),
        };
        let r = Request {
            limit,
            window,
            unit: Unit::Seconds,
            now,
            cost,
        };
        let d = decide(Some(&state), &r);
        let after = if d.allowed { d.state } else { state };
        let horizon = now.max(index * window) + 3 * window;
        let at = |t: u64| decide(Some(&after), &Request { now: t, ..r });
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

impl Decision {
    /// The estimate before this request's cost was added.
    fn count_before(&self, cost: u64) -> u64 {
        if self.allowed {
            self.count - cost
        } else {
            self.count
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
        let state = State {
            unit: Unit::Millis,
            window,
            index,
            current: rng.range(0, limit),
            previous: rng.range(0, MAX_VALUE),
        };
        let now = index * window + rng.range(0, window);
        let r = Request {
            limit,
            window,
            unit: Unit::Millis,
            now,
            cost,
        };
        let d = decide(Some(&state), &r);
        let after = if d.allowed { d.state } else { state };
        let at = |t: u64| decide(Some(&after), &Request { now: t, ..r });
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

/// The largest state and request: every result is exact and nothing overflows (the unit
/// tests run with overflow checks, see `overflow_checks_are_on`). With both counts at
/// 2^53-1 the estimate is 0 only two windows on, whatever the window.
#[test]
fn extremes_do_not_overflow() {
    for &window in &[1, 2, Unit::Millis.max_window()] {
        for &now in &[0, MAX_VALUE - 1, MAX_VALUE] {
            let index = now / window;
            let two_windows_on = (index + 2) * window - now;
            let state = State {
                unit: Unit::Millis,
                window,
                index,
                current: MAX_VALUE,
                previous: MAX_VALUE,
            };
            let r = Request {
                limit: MAX_VALUE,
                window,
                unit: Unit::Millis,
                now,
                cost: MAX_VALUE,
            };
            let d = decide(Some(&state), &r);
            let case = format!("window {window} now {now}");
            assert!(!d.allowed, "{case}");
            assert!(
                d.count >= MAX_VALUE && d.count <= 2 * MAX_VALUE,
                "{case}: {d:?}"
            );
            assert_eq!(d.remaining(), 0, "{case}");
            assert_eq!(d.retry_after(), two_windows_on as i64, "{case}");
            assert_eq!(d.reset_after(), two_windows_on, "{case}");
            let d = decide(None, &r);
            assert!(d.allowed, "{case}");
            assert_eq!(d.count, MAX_VALUE, "{case}");
            assert_eq!(d.remaining(), 0, "{case}");
            assert_eq!(d.retry_after(), -1, "{case}");
            assert_eq!(d.reset_after(), two_windows_on, "{case}");
        }
    }
}

/// `make test` runs the unit tests with `cargo test --lib`: the test profile, which
/// checks every integer operation for overflow (the release profile the module ships
/// with does not). Under `--release` this test fails rather than let the ones above
/// pass without their checks.
#[test]
fn overflow_checks_are_on() {
    let overflowed =
        std::panic::catch_unwind(|| std::hint::black_box(u64::MAX) + std::hint::black_box(1));
    assert!(
        overflowed.is_err(),
        "built without overflow checks: run the unit tests with `cargo test --lib`"
    );
}
