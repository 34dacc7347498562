//! Several limits in one call (`LIMIT limit window`, repeatable), on real servers:
//! replies against the per-window seed reference (crates/testkit/src/reference.rs), exact retry and
//! reset, keys written by release 0.1, windows kept across policies, expiry, atomicity,
//! replicas and AOF, and SLIDINGWINDOW.COUNTS.

#[macro_use]
mod support;

use redis::Value;
use support::random_calls::{generate, ints, run_sequences, Mix};
use support::*;

on_every_server!(
    several_limits_match_the_per_window_seed_reference,
    retry_after_and_reset_after_are_exact_for_several_limits,
    keys_written_by_release_0_1_keep_their_counts,
    windows_a_call_does_not_name_keep_their_counts,
    the_expiry_covers_the_longest_window_held,
    argument_errors_come_before_the_key_is_read,
    concurrent_three_limit_checks_let_exactly_the_tightest_through,
    replicas_and_aof_replay_hold_the_same_multi_window_keys,
    command_docs_show_the_repeatable_limit_block_and_counts,
);

fn several_limits_match_the_per_window_seed_reference(kind: Kind) {
    let mix = Mix {
        sequences: 300,
        calls: 40,
        refund: false,
        windows_s: 30,
        windows_ms: 300,
    };
    let (sequences, tally) = generate(&mix, 21);
    assert!(tally.calls >= 10_000, "{tally:?}");
    assert!(
        tally.denied > tally.calls / 5 && tally.seventh > tally.calls / 3 && tally.several > 300,
        "{tally:?}"
    );
    let s = Server::start(kind, &[]);
    run_sequences(&mut s.connection(), kind, &sequences);
    eprintln!(
        "{kind:?}: {} CHECK/PEEK calls ({} denied, {} with a 7th element, {} denied by \
         several limits) and the COUNTS calls between them: identical",
        tally.calls, tally.denied, tally.seventh, tally.several
    );
}

/// `[allowed, count, limit, remaining, retry, reset]` and the per-limit arrays.
fn details(c: &mut redis::Connection, cmd: &str, args: &[String]) -> (Vec<i64>, Vec<Vec<i64>>) {
    let v: Value = redis::cmd(cmd)
        .arg(args)
        .arg("DETAILS")
        .query(c)
        .unwrap_or_else(|e| panic!("{cmd} {args:?}: {e}"));
    let (head, per_limit) = ints(&v);
    (head, per_limit.unwrap_or_default())
}

fn retry_after_and_reset_after_are_exact_for_several_limits(kind: Kind) {
    let mut rng = Rng::new(22);
    let s = Server::start(kind, &[]);
    let mut c = s.connection();
    let (mut retries, mut resets) = (0, 0);
    for case in 0..150 {
        let key = format!("x:{case}");
        let millis = rng.range(0, 1) == 0;
        let mut windows: Vec<u64> = Vec::new();
        let n = rng.range(2, 4) as usize;
        while windows.len() < n {
            let w = if millis {
                rng.range(10, 5_000)
            } else {
                rng.range(1, 100)
            };
            if !windows.contains(&w) {
                windows.push(w);
            }
        }
        let limits: Vec<(u64, u64)> = windows.iter().map(|&w| (rng.range(1, 8), w)).collect();
        let mut now = 1_780_000_000 * if millis { 1000 } else { 1 };
        let call = |now: u64, cost: u64| -> Vec<String> {
            let mut a = vec![
                key.clone(),
                limits[0].0.to_string(),
                limits[0].1.to_string(),
                now.to_string(),
                "COST".into(),
                cost.to_string(),
            ];
            for &(l, w) in &limits[1..] {
                a.extend(["LIMIT".into(), l.to_string(), w.to_string()]);
            }
            if millis {
                a.push("MS".into());
            }
            a
        };
        // A history: some requests spread over a window or two.
        let longest = *windows.iter().max().unwrap();
        for _ in 0..rng.range(1, 30) {
            now += rng.range(0, longest / 4 + 1);
            let _: Value = redis::cmd("SLIDINGWINDOW.CHECK")
                .arg(call(now, 1))
                .query(&mut c)
                .unwrap();
        }
        // No expiry while probing: the windows may be a few milliseconds long.
        let _: i64 = redis::cmd("PERSIST").arg(&key).query(&mut c).unwrap();
        let cost = rng.range(1, 3);
        let (head, per_limit) = details(&mut c, "SLIDINGWINDOW.PEEK", &call(now, cost));
        assert_eq!(per_limit.len(), limits.len());
        let retry = head[4];
        if head[0] == 0 && retry >= 0 {
            // Allowed at now + retry, denied one unit earlier.
            retries += 1;
            let mut at = |t: u64| details(&mut c, "SLIDINGWINDOW.PEEK", &call(t, cost)).0[0];
            assert_eq!(
                at(now + retry as u64),
                1,
                "{kind:?} case {case} retry {head:?}"
            );
            assert_eq!(
                at(now + retry as u64 - 1),
                0,
                "{kind:?} case {case} retry {head:?}"
            );
        }
        // Reset: after a real CHECK (cost 1, counted when allowed), every window's
        // estimate is 0 at now + reset, and not every one a unit earlier. A PEEK
        // with a generous limit per window reads each estimate: its count is the
        // estimate + 1.
        let probe = |c: &mut redis::Connection, t: u64| -> Vec<i64> {
            let mut a = vec![
                key.clone(),
                "1000".into(),
                windows[0].to_string(),
                t.to_string(),
            ];
            for w in &windows[1..] {
                a.extend(["LIMIT".into(), "1000".into(), w.to_string()]);
            }
            if millis {
                a.push("MS".into());
            }
            details(c, "SLIDINGWINDOW.PEEK", &a)
                .1
                .iter()
                .map(|o| o[2] - 1)
                .collect()
        };
        // CHECK and PERSIST in one transaction: a window of a few milliseconds must not
        // expire between them on a loaded machine.
        let mut pipe = redis::pipe();
        pipe.atomic()
            .cmd(CHECK)
            .arg(call(now, 1))
            .arg("DETAILS")
            .cmd("PERSIST")
            .arg(&key)
            .ignore();
        let (checked,): (Value,) = pipe.query(&mut c).unwrap();
        let reset_now = ints(&checked).0[5] as u64;
        assert!(
            probe(&mut c, now + reset_now).iter().all(|&e| e == 0),
            "{kind:?} case {case}"
        );
        if reset_now > 0 {
            resets += 1;
            assert!(
                probe(&mut c, now + reset_now - 1).iter().any(|&e| e > 0),
                "{kind:?} case {case}: reset {reset_now} not the first"
            );
        }
    }
    assert!(
        retries > 30 && resets > 100,
        "{kind:?}: {retries} retries, {resets} resets"
    );
}

/// A key written by release 0.1 (version 1 bytes), captured from that build on Redis
/// 7.0.15: three requests at 1780000000 and five at 1780000030 (window 60 s), then one
/// more at 1780000070. GET gave `V1_STATE`, DUMP gave `V1_DUMP` (RDB 10), and
/// `PEEK v1 10 60 1780000070 DETAILS` answered [1, 7, 10, 3, -1, 62].
const V1_STATE: &[u8] = &[0xa1, 0x00, 0x3c, 0xeb, 0xda, 0x92, 0x0e, 0x06, 0x03];
const V1_DUMP: &str = "0009a1003cebda920e06030a009266681520e54793";

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

fn keys_written_by_release_0_1_keep_their_counts(kind: Kind) {
    let s = Server::start(kind, &[]);
    let mut c = s.connection();
    let _: () = redis::cmd("SET")
        .arg("v1:set")
        .arg(V1_STATE)
        .query(&mut c)
        .unwrap();
    let _: () = redis::cmd("RESTORE")
        .arg("v1:restored")
        .arg(0)
        .arg(unhex(V1_DUMP))
        .query(&mut c)
        .unwrap();
    for key in ["v1:set", "v1:restored"] {
        assert_eq!(get_raw(&mut c, key).unwrap(), V1_STATE, "{kind:?} {key}");
        let minute = sw(key).limit(10).window(60).now(1_780_000_070);
        let peeked = minute.clone().details().peek(&mut c);
        assert_eq!(
            peeked,
            [1, 7, 10, 3, -1, 62],
            "{kind:?} {key}: as release 0.1 answered"
        );
        let counts: Vec<i64> = redis::cmd("SLIDINGWINDOW.COUNTS")
            .arg(key)
            .arg(60)
            .arg(1780000070u64)
            .query(&mut c)
            .unwrap();
        assert_eq!(counts, [3, 6, 50], "{kind:?} {key}");
        // Adding an hourly limit keeps the minute's counts: the key becomes
        // version 2 with both windows.
        let both = minute.clone().and_limit(1000, 3600);
        assert_eq!(both.check(&mut c), [1, 7], "{kind:?} {key}");
        assert_eq!(get_raw(&mut c, key).unwrap()[0], 0xA2);
        assert_eq!(minute.check(&mut c), [1, 8]);
    }
}

fn windows_a_call_does_not_name_keep_their_counts(kind: Kind) {
    let s = Server::start(kind, &[]);
    let mut c = s.connection();
    // The old policy: 3 per minute. Three requests.
    let minute = |now| sw("deploy").limit(3).window(60).now(now);
    for _ in 0..3 {
        minute(1000).check(&mut c);
    }
    // New servers send 3/min and 100/h; old servers still send 3/min alone. The
    // minute's count survives both, in either order.
    let new_policy = minute(1001).and_limit(100, 3600).details();
    let v: Value = new_policy.cmd(CHECK).query(&mut c).unwrap();
    let (head, per_limit) = ints(&v);
    // Denied by the minute (3 counted, 3 allowed): its estimate falls to 2 one
    // second into the next minute (1021) and to 0 at 1061.
    assert_eq!(head, [0, 3, 3, 0, 20, 60], "{kind:?}");
    let per_limit = per_limit.unwrap();
    assert_eq!(per_limit[0], [60, 3, 3, 0, 20, 60], "{kind:?}");
    assert_eq!(
        per_limit[1],
        [3600, 100, 0, 100, -1, 0],
        "{kind:?}: the hour starts at 0"
    );
    assert_eq!(minute(1001).check(&mut c), [0, 3]);
    // An hourly request allowed later does not reset the minute either.
    let hour = sw("deploy").limit(100).window(3600).now(1002);
    assert_eq!(hour.check(&mut c), [1, 1]);
    assert_eq!(minute(1002).check(&mut c), [0, 3]);
}

fn the_expiry_covers_the_longest_window_held(kind: Kind) {
    let s = Server::start(kind, &[]);
    let mut c = s.connection();
    let second = |key: &str| sw(key).limit(10).window(1);
    // 1/s and 1000/h: two hours of TTL.
    let two_hours = 7_200_000;
    let e1 = check_expires_in(&mut c, &second("e").and_limit(1000, 3600), two_hours);
    // A call naming the second alone must not cut the hour's counts short.
    let (e2, _, after) = check_with_clock(&mut c, &second("e"));
    assert!(
        e1 <= e2 && e2 <= after + two_hours,
        "{kind:?}: expiry {e1}, then {e2}"
    );
    // A key holding only the second: two seconds.
    check_expires_in(&mut c, &second("f"), 2_000);
}

fn argument_errors_come_before_the_key_is_read(kind: Kind) {
    let s = Server::start(kind, &[]);
    let mut c = s.connection();
    let _: () = redis::cmd("RPUSH")
        .arg("list")
        .arg("x")
        .query(&mut c)
        .unwrap();
    let _: () = redis::cmd("SET")
        .arg("str")
        .arg("hello")
        .query(&mut c)
        .unwrap();
    sw("mine").limit(5).window(60).now(100).check(&mut c);
    let before = get_raw(&mut c, "mine");
    let cases: [(&[&str], &str); 6] = [
        (
            &["5", "60", "LIMIT", "5", "60"],
            "ERR two limits have the same window (60 seconds): give each window once",
        ),
        (
            &["5", "60", "LIMIT", "5"],
            "ERR LIMIT needs a limit and a window",
        ),
        (
            &["5", "60", "LIMIT", "5", "0"],
            "ERR window must be an integer from 1 to 9007199254740 seconds",
        ),
        (
            &["5", "60", "LIMIT", "-5", "10"],
            "ERR limit must be an integer from 0 to 9007199254740991",
        ),
        (
            &[
                "5", "60", "LIMIT", "1", "1", "LIMIT", "1", "2", "LIMIT", "1", "3", "LIMIT", "1",
                "4", "LIMIT", "1", "5", "LIMIT", "1", "6", "LIMIT", "1", "7", "LIMIT", "1", "8",
            ],
            "ERR at most 8 limits per call (the positional one and each LIMIT)",
        ),
        (
            &["5", "60", "LIMITS", "1", "2"],
            "ERR unknown option 'LIMITS' (expected LIMIT, COST, MS or DETAILS)",
        ),
    ];
    for key in ["list", "str", "mine", "missing"] {
        for (args, want) in &cases {
            for cmd in ["SLIDINGWINDOW.CHECK", "SLIDINGWINDOW.PEEK"] {
                let e =
                    call(&mut c, cmd, &[&[key], *args].concat()).expect_err("an argument error");
                assert_eq!(error_text(&e), *want, "{kind:?} {cmd} {key} {args:?}");
            }
        }
    }
    assert_eq!(get_raw(&mut c, "mine"), before);
    assert_eq!(get_raw(&mut c, "missing"), None);
    // COUNTS: its own arguments, the same order of checks.
    for (args, want) in [
        (
            vec!["list", "0"],
            "ERR window must be an integer from 1 to 9007199254740 seconds",
        ),
        (
            vec!["list", "60", "DETAILS"],
            "ERR unknown option 'DETAILS' (expected MS)",
        ),
        (
            vec!["list", "60"],
            "WRONGTYPE Operation against a key holding the wrong kind of value",
        ),
        (
            vec!["str", "60"],
            "WRONGTYPE Operation against a key holding the wrong kind of value",
        ),
    ] {
        let e = call(&mut c, COUNTS, &args).expect_err("an error");
        assert_eq!(error_text(&e), want, "{kind:?} COUNTS {args:?}");
    }
    let e = call(&mut c, COUNTS, &["k"]).expect_err("arity");
    assert!(
        error_text(&e).starts_with("ERR wrong number of arguments"),
        "{e}"
    );
}

fn concurrent_three_limit_checks_let_exactly_the_tightest_through(kind: Kind) {
    let s = Server::start(kind, &[]);
    // 50 connections x 20 CHECKs at one instant; limits 700/60 s, 250/3600 s and
    // 400/10 s: the hour's 250 is the tightest.
    let allowed: Vec<i64> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..50)
            .map(|_| {
                scope.spawn(|| {
                    let mut c = s.connection();
                    let mut counts = Vec::new();
                    for _ in 0..20 {
                        let r = sw("hot")
                            .limit(700)
                            .window(60)
                            .now(1_780_000_000)
                            .and_limit(250, 3600)
                            .and_limit(400, 10)
                            .check(&mut c);
                        if r[0] == 1 {
                            counts.push(r[1]);
                        }
                    }
                    counts
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect()
    });
    assert_eq!(allowed.len(), 250, "{kind:?}");
    let mut seen = allowed.clone();
    seen.sort_unstable();
    // The governing limit is the hour (least remaining): counts 1..=250, once each.
    assert_eq!(seen, (1..=250).collect::<Vec<_>>(), "{kind:?}");
}

/// Waits until the replica has acknowledged everything the master wrote.
fn wait_replica(m: &mut redis::Connection) {
    wait_replicas(m, 1);
}

/// Every key's bytes and absolute expiry.
fn snapshot(c: &mut redis::Connection) -> Vec<(String, Vec<u8>, i64)> {
    let mut keys: Vec<String> = redis::cmd("KEYS").arg("*").query(c).unwrap();
    keys.sort();
    keys.into_iter()
        .map(|k| {
            let v = get_raw(c, &k).unwrap();
            let at: i64 = redis::cmd("PEXPIRETIME").arg(&k).query(c).unwrap();
            (k, v, at)
        })
        .collect()
}

fn replicas_and_aof_replay_hold_the_same_multi_window_keys(kind: Kind) {
    let mut rng = Rng::new(23);
    let mut master = Server::start(kind, &["--appendonly", "yes", "--appendfsync", "always"]);
    let replica = Server::start(kind, &[]);
    let mut rc = replica.connection();
    let _: () = redis::cmd("REPLICAOF")
        .arg("127.0.0.1")
        .arg(master.port)
        .query(&mut rc)
        .unwrap();
    let mut mc = master.connection();
    let mut allowed = 0;
    for i in 0..400 {
        let key = format!("r:{}", rng.range(0, 20));
        let now = (1_780_000_000 + i / 4).to_string();
        // Every call names the hour, so no key expires during the test.
        let mut args = vec![key.as_str(), "100", "3600", now.as_str()];
        let extra: Vec<&str> = match rng.range(0, 3) {
            0 => vec!["LIMIT", "20", "60"],
            1 => vec!["LIMIT", "20", "60", "LIMIT", "3", "1"],
            2 => vec!["LIMIT", "3", "1", "COST", "2"],
            _ => vec![],
        };
        args.extend(extra);
        allowed += call(&mut mc, CHECK, &args).unwrap()[0];
    }
    assert!(allowed > 100 && allowed < 400, "{kind:?} {allowed}");
    wait_replica(&mut mc);
    let on_master = snapshot(&mut mc);
    assert_eq!(on_master.len(), 21, "{kind:?}");
    assert!(on_master.iter().any(|(_, v, _)| v[0] == 0xA2), "{kind:?}");
    assert_eq!(snapshot(&mut rc), on_master, "{kind:?}: replica differs");
    drop(mc);
    master.restart(); // SIGKILL, then the AOF is replayed
    let mut mc = master.connection();
    assert_eq!(snapshot(&mut mc), on_master, "{kind:?}: AOF replay differs");
}

fn command_docs_show_the_repeatable_limit_block_and_counts(kind: Kind) {
    let s = Server::start(kind, &[]);
    let mut c = s.connection();
    let docs: Value = redis::cmd("COMMAND")
        .arg("DOCS")
        .arg("slidingwindow.check")
        .arg("slidingwindow.counts")
        .query(&mut c)
        .unwrap();
    let text = format!("{docs:?}");
    for needle in ["LIMIT", "multiple", "block", "slidingwindow.counts"] {
        assert!(
            text.contains(needle),
            "{kind:?}: COMMAND DOCS lacks {needle}: {text}"
        );
    }
}
