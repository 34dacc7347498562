//! Random call sequences with the reference's answers (crates/testkit's reference, the seed's own
//! arithmetic, no code shared with the module), and the runner that sends them to a
//! server and compares every reply. Used by tests/multi_limit.rs (CHECK, PEEK, COUNTS)
//! and tests/refund.rs (REFUND too).

use super::Rng;
use redis::Value;

use slidingwindow_testkit::reference::{RefKey, RefReply};

/// A reply as integers: the head, and the 7th element's arrays when present.
pub fn ints(v: &Value) -> (Vec<i64>, Option<Vec<Vec<i64>>>) {
    let Value::Array(items) = v else {
        panic!("not an array: {v:?}");
    };
    let mut head = Vec::new();
    let mut per_limit = None;
    for item in items {
        match item {
            Value::Int(i) => head.push(*i),
            Value::Array(limits) => {
                per_limit = Some(limits.iter().map(|l| ints(l).0).collect());
            }
            other => panic!("unexpected element {other:?} in {v:?}"),
        }
    }
    (head, per_limit)
}

/// What the reference says the server must reply.
fn expected(r: &RefReply, details: bool) -> (Vec<i64>, Option<Vec<Vec<i64>>>) {
    let per_limit = (details && r.outcomes.len() > 1)
        .then(|| r.outcomes.iter().map(|o| o.to_vec()).collect::<Vec<_>>());
    (r.head(details), per_limit)
}

/// One generated call and the reply the reference expects.
pub struct Call {
    pub command: &'static str,
    pub args: Vec<String>,
    pub want: (Vec<i64>, Option<Vec<Vec<i64>>>),
}

/// What to generate.
pub struct Mix {
    pub sequences: usize,
    /// Calls per sequence (one key each).
    pub calls: usize,
    /// REFUNDs among the calls, some larger than what is held, and clock steps of
    /// exactly one and two windows.
    pub refund: bool,
    /// Longest window drawn: seconds, milliseconds. The reference scans time one
    /// unit at a time, so these bound its cost.
    pub windows_s: u64,
    pub windows_ms: u64,
}

/// How many calls of each kind were generated.
#[derive(Debug, Default)]
pub struct Tally {
    /// CHECK and PEEK calls.
    pub calls: usize,
    pub denied: usize,
    /// DETAILS replies with a 7th element.
    pub seventh: usize,
    /// Denied by two or more limits.
    pub several: usize,
    pub refunds: usize,
    /// REFUNDs that gave something back, and that gave back less than their cost.
    pub refunds_giving: usize,
    pub refunds_short: usize,
    pub counts: usize,
}

/// Random sequences of CHECK, PEEK, COUNTS (and REFUND) calls, with the reference's
/// answers: limits 0-11, costs 1-3 (refunds up to 12), 1 to 8 windows per call from a
/// pool of 8 (unit, window) pairs per key (both units in one key), a clock that mostly
/// creeps forward, sometimes jumps, sometimes goes back.
pub fn generate(mix: &Mix, seed: u64) -> (Vec<Vec<Call>>, Tally) {
    let mut rng = Rng::new(seed);
    let mut tally = Tally::default();
    let mut all = Vec::new();
    for seq in 0..mix.sequences {
        let key = format!("rc:{seed}:{seq}");
        let mut pool: Vec<(bool, u64)> = Vec::new();
        while pool.len() < 8 {
            let p = match rng.range(0, 2) {
                0 => (true, rng.range(1, mix.windows_ms)),
                _ => (false, rng.range(1, mix.windows_s)),
            };
            if !pool.contains(&p) {
                pool.push(p);
            }
        }
        let mut reference = RefKey::default();
        let mut clock_ms = 1_780_000_000_000 + rng.range(0, 10_000_000);
        let mut calls = Vec::new();
        // The last CHECK's unit, limits, cost and options: a REFUND often gives back
        // exactly what it counted, as the README's pattern does.
        let mut last_check: Option<(bool, Drawn)> = None;
        for _ in 0..mix.calls {
            clock_ms = match rng.range(0, 14) {
                0 => clock_ms - rng.range(0, 20_000), // a clock behind
                1 => clock_ms + rng.range(0, 60_000),
                // Exactly one or two windows on, for refunds a window or two later.
                2 | 3 if mix.refund => {
                    let (m, w) = pool[rng.range(0, 7) as usize];
                    let unit_ms = if m { 1 } else { 1000 };
                    clock_ms + rng.range(1, 2) * w * unit_ms
                }
                _ => clock_ms + rng.range(0, 700),
            };
            let command = match rng.range(0, 11) {
                0..=2 => "SLIDINGWINDOW.PEEK",
                3..=6 if mix.refund => "SLIDINGWINDOW.REFUND",
                _ => "SLIDINGWINDOW.CHECK",
            };
            let refund = command == "SLIDINGWINDOW.REFUND";
            let repeat = match &last_check {
                Some(last) if refund && rng.range(0, 1) == 0 => Some(last.clone()),
                _ => None,
            };
            let millis = match &repeat {
                Some((m, _)) => *m,
                None => pool[rng.range(0, 7) as usize].0,
            };
            let now = if millis { clock_ms } else { clock_ms / 1000 };
            let mut windows: Vec<u64> = pool
                .iter()
                .filter(|(m, _)| *m == millis)
                .map(|&(_, w)| w)
                .collect();
            if repeat.is_none() && rng.range(0, 8) == 0 {
                let w = windows[rng.range(0, windows.len() as u64 - 1) as usize];
                calls.push(counts_call(&key, &reference, millis, w, now));
                tally.counts += 1;
                continue;
            }
            let (limits, cost, options) = match repeat {
                Some((_, drawn)) => drawn,
                None => draw(&mut rng, &mut windows, refund, millis),
            };
            if command == "SLIDINGWINDOW.CHECK" {
                last_check = Some((millis, (limits.clone(), cost, options.clone())));
            }
            let n = limits.len();
            let details = options.iter().any(|o| o[0] == "DETAILS");
            let answer = match command {
                "SLIDINGWINDOW.CHECK" => reference.call(&limits, millis, now, cost),
                _ => {
                    if refund {
                        let named: Vec<u64> = limits.iter().map(|&(_, w)| w).collect();
                        let given = reference.refund(&named, millis, now, cost);
                        tally.refunds += 1;
                        tally.refunds_giving += usize::from(given > 0);
                        tally.refunds_short += usize::from(given < cost * n as u64);
                    }
                    // What PEEK answers: what CHECK would, counting nothing.
                    reference.clone().call(&limits, millis, now, cost)
                }
            };
            let mut args = vec![
                key.clone(),
                limits[0].0.to_string(),
                limits[0].1.to_string(),
                now.to_string(),
            ];
            args.extend(options.into_iter().flatten());
            if !refund {
                tally.calls += 1;
                if !answer.allowed {
                    tally.denied += 1;
                    let denying = answer
                        .outcomes
                        .iter()
                        .filter(|o| o[2] + cost as i64 > o[1])
                        .count();
                    tally.several += usize::from(denying > 1);
                }
            }
            tally.seventh += usize::from(details && n > 1);
            calls.push(Call {
                command,
                args,
                want: expected(&answer, details),
            });
            if refund && rng.range(0, 1) == 0 {
                // The counts the refund left, in one of its windows.
                let w = limits[rng.range(0, n as u64 - 1) as usize].1;
                calls.push(counts_call(&key, &reference, millis, w, now));
                tally.counts += 1;
            }
        }
        all.push(calls);
    }
    (all, tally)
}

/// A call's `(limit, window)` pairs, cost and options (each option its words).
type Drawn = (Vec<(u64, u64)>, u64, Vec<Vec<String>>);

/// A call's limits (1 to all of `windows`, limits 0-11), its cost (1-3; a refund's
/// often more than is held, up to 12) and its options in a shuffled order: the
/// positional limit is `limits[0]`, the others follow in the order of their LIMITs.
fn draw(rng: &mut Rng, windows: &mut [u64], refund: bool, millis: bool) -> Drawn {
    let n = rng.range(1, windows.len() as u64) as usize;
    for i in 0..n {
        let j = rng.range(i as u64, windows.len() as u64 - 1) as usize;
        windows.swap(i, j);
    }
    let drawn: Vec<(u64, u64)> = windows[..n]
        .iter()
        .map(|&w| (rng.range(0, 11), w))
        .collect();
    let cost = match rng.range(0, 3) {
        0 if refund => rng.range(1, 12),
        _ => rng.range(1, 3),
    };
    let details = rng.range(0, 2) > 0;
    let mut options: Vec<Vec<String>> = drawn[1..]
        .iter()
        .map(|&(l, w)| vec!["LIMIT".into(), l.to_string(), w.to_string()])
        .collect();
    if cost > 1 || rng.range(0, 1) == 0 {
        options.push(vec!["COST".into(), cost.to_string()]);
    }
    if millis {
        options.push(vec!["ms".into()]);
    }
    if details {
        options.push(vec!["DETAILS".into()]);
    }
    for i in 0..options.len() {
        let j = rng.range(i as u64, options.len() as u64 - 1) as usize;
        options.swap(i, j);
    }
    let mut limits = vec![drawn[0]];
    for o in options.iter().filter(|o| o[0] == "LIMIT") {
        limits.push((o[1].parse().unwrap(), o[2].parse().unwrap()));
    }
    (limits, cost, options)
}

/// COUNTS of one window, with the reference's `[previous, current, elapsed]`.
fn counts_call(key: &str, reference: &RefKey, millis: bool, w: u64, now: u64) -> Call {
    let c = reference.counts(millis, w, now);
    let mut args = vec![key.to_string(), w.to_string(), now.to_string()];
    if millis {
        args.push("MS".into());
    }
    Call {
        command: "SLIDINGWINDOW.COUNTS",
        args,
        want: (c.iter().map(|&v| v as i64).collect(), None),
    }
}

/// Sends each sequence in one transaction and compares every reply with the
/// reference's. One transaction per sequence: the server checks expiry against one
/// instant, so keys with millisecond windows cannot expire in the middle however
/// loaded the machine is.
pub fn run_sequences(c: &mut redis::Connection, kind: super::Kind, sequences: &[Vec<Call>]) {
    for (n, seq) in sequences.iter().enumerate() {
        let mut pipe = redis::pipe();
        pipe.atomic();
        for call in seq {
            pipe.cmd(call.command).arg(&call.args);
        }
        let replies: Vec<Value> = pipe
            .query(c)
            .unwrap_or_else(|e| panic!("{kind:?} sequence {n}: {e}"));
        assert_eq!(replies.len(), seq.len(), "{kind:?} sequence {n}");
        for (i, (call, reply)) in seq.iter().zip(&replies).enumerate() {
            assert_eq!(
                ints(reply),
                call.want,
                "{kind:?} sequence {n} call {i}: {} {}",
                call.command,
                call.args.join(" ")
            );
        }
    }
}
