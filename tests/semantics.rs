//! What a user sees of CHECK and PEEK on a real server: replies, DETAILS exactness
//! (against the seed script too), backward time, window changes, the server's clock,
//! expiry, PEEK's purity, keyspace notifications, WATCH, INFO and COMMAND INFO/DOCS.

#[macro_use]
mod support;

use redis::Value;
use std::collections::BTreeMap;
use support::{
    check_expires_in, get_raw, info, info_field, persist, pexpiretime, server_ms, sw, Kind, Rng,
    Seed, Server, CHECK, PEEK,
};

/// The largest limit: no estimate reaches it, so a PEEK under it shows the bare estimate.
const NO_LIMIT: u64 = (1 << 53) - 1;

on_every_server!(
    replies_follow_the_seed_article,
    details_are_exact_and_agree_with_the_seed_script,
    a_clock_behind_the_keys_window_is_judged_at_its_start,
    another_window_or_unit_has_its_own_counts,
    the_server_clock_is_used_in_the_commands_unit_when_now_is_omitted,
    allowed_checks_expire_two_windows_later_and_denied_ones_write_nothing,
    peek_changes_nothing,
    a_new_key_is_written_raw_so_the_next_call_reads_it_in_place,
    keyspace_notifications_fire_for_the_write_and_the_expire,
    only_an_allowed_check_breaks_a_watch,
    info_counts_every_kind_of_call,
    command_info_describes_each_command,
    command_docs_describe_each_argument,
    module_list_and_command_docs_give_the_crates_version,
);

fn replies_follow_the_seed_article(kind: Kind) {
    let s = Server::start(kind, &[]);
    let mut c = s.connection();
    let per_minute = |limit| sw("a").limit(limit).window(60);
    // 80 requests in minute 1000 (which starts at 60,000 s), then 30 at the very start of
    // minute 1001, where the previous minute still weighs in full.
    assert_eq!(per_minute(200).now(60_000).cost(80).check(&mut c), [1, 80]);
    assert_eq!(per_minute(200).now(60_060).cost(30).check(&mut c), [1, 110]);
    // 18 s (30%) into minute 1001: 80 * 0.7 + 30 = 86, as in the article.
    assert_eq!(per_minute(100).now(60_078).peek(&mut c), [1, 87]);
    assert_eq!(per_minute(86).now(60_078).peek(&mut c), [0, 86]);
    // DETAILS: limit 100, remaining 13, not denied, and 30 requests weigh under 1 only
    // 59 s into minute 1002 (30 * 1/60 + 0): 60,179 - 60,078 = 101 s.
    assert_eq!(
        per_minute(100).now(60_078).details().peek(&mut c),
        [1, 87, 100, 13, -1, 101]
    );
}

/// Random histories, then one CHECK with DETAILS: `retry_after` and `reset_after` are
/// checked one unit before and at the answer, with the module's PEEK and, where the seed
/// script is present (`support::seed_script`), with the seed fed the same requests,
/// whose estimate must agree at every probed instant.
fn details_are_exact_and_agree_with_the_seed_script(kind: Kind) {
    let s = Server::start(kind, &[]);
    let mut c = s.connection();
    let seed = Seed::load(
        &mut c,
        "semantics::details_are_exact_and_agree_with_the_seed_script",
    );
    let mut rng = Rng::new(kind as u64 + 1);
    let mut denied_and_probed = 0;
    for case in 0..300 {
        let key = format!("d{case}");
        let (window, limit) = (rng.range(1, 30), rng.range(1, 12));
        let limiter = |now: u64| sw(&key).limit(limit).window(window).now(now);
        let mut now = rng.range(0, 10_000);
        // A history of random traffic, identical in the module and in the seed.
        for _ in 0..rng.range(0, 40) {
            now += rng.range(0, window / 2 + 1);
            let module = limiter(now).check(&mut c);
            persist(&mut c, &[&key]);
            if let Some(seed) = &seed {
                let script = seed.check(&mut c, &key, limit, window, now);
                assert_eq!(module, script, "case {case}: history at {now}");
            }
        }
        // The estimate `t`, from the module's PEEK and, when present, from the seed.
        let estimate_at_time = |c: &mut redis::Connection, t: u64| {
            let module = sw(&key).limit(NO_LIMIT).window(window).now(t).peek(c)[1] - 1;
            if let Some(seed) = &seed {
                let script = seed.estimate(c, &key, window, t);
                assert_eq!(module, script, "case {case}: estimate at {t}");
            }
            module
        };
        let estimate = estimate_at_time(&mut c, now);
        let cost = rng.range(1, limit + 1);
        let r = limiter(now).cost(cost).details().check(&mut c);
        persist(&mut c, &[&key]);
        assert_eq!(r.len(), 6, "{r:?}");
        let (allowed, count, retry, reset) = (r[0] == 1, r[1], r[4], r[5]);
        let (l, n) = (limit as i64, cost as i64);
        assert_eq!((r[2], r[3]), (l, (l - count).max(0)), "{r:?}");
        if allowed {
            assert_eq!(count, estimate + n, "case {case}: {r:?}");
            // The same request in the seed: one of cost n is n requests of cost 1.
            if let Some(seed) = &seed {
                for i in 1..=n {
                    let script = seed.check(&mut c, &key, limit, window, now);
                    assert_eq!(script, [1, estimate + i], "case {case}");
                }
            }
        } else {
            assert_eq!(count, estimate, "case {case}: {r:?}");
            assert!(estimate + n > l, "case {case}: {r:?}");
        }
        let later = |dt: i64| (now as i64 + dt) as u64;
        // The estimate `dt` units after `now`.
        let estimate_at = |c: &mut redis::Connection, dt: i64| estimate_at_time(c, later(dt));
        if allowed || cost > limit {
            assert_eq!(retry, -1, "case {case}: {r:?}");
        } else {
            assert!(retry >= 1, "case {case}: {r:?}");
            assert!(
                estimate_at(&mut c, retry) + n <= l,
                "case {case}: retry {r:?}"
            );
            assert!(
                estimate_at(&mut c, retry - 1) + n > l,
                "case {case}: retry-1 {r:?}"
            );
            // And the module's PEEK of the same request agrees.
            let same = |t| limiter(t).cost(cost);
            assert_eq!(same(later(retry)).peek(&mut c)[0], 1, "case {case}: {r:?}");
            assert_eq!(
                same(later(retry - 1)).peek(&mut c)[0],
                0,
                "case {case}: {r:?}"
            );
            denied_and_probed += 1;
        }
        assert_eq!(estimate_at(&mut c, reset), 0, "case {case}: reset {r:?}");
        if reset > 0 {
            assert!(
                estimate_at(&mut c, reset - 1) > 0,
                "case {case}: reset-1 {r:?}"
            );
        }
    }
    eprintln!("{kind}: 300 histories, {denied_and_probed} denied requests probed");
    // The denied branch, where retry_after is computed, ran on many histories.
    assert!(
        denied_and_probed > 100,
        "only {denied_and_probed} denied cases probed"
    );
}

fn a_clock_behind_the_keys_window_is_judged_at_its_start(kind: Kind) {
    let s = Server::start(kind, &[]);
    let mut c = s.connection();
    let b = |now| sw("b").limit(4).window(10).now(now);
    for _ in 0..3 {
        b(105).check(&mut c); // window 10
    }
    let before = get_raw(&mut c, "b");
    // Two windows behind (window 8): counted into window 10, judged at 100.
    assert_eq!(b(87).check(&mut c), [1, 4]);
    // Denied; retry_after 24 and reset_after 31 are counted from the caller's 87.
    assert_eq!(b(87).details().check(&mut c), [0, 4, 4, 0, 24, 31]);
    assert_ne!(get_raw(&mut c, "b"), before);
    // A caller back on time sees the same counts: nothing went backwards.
    assert_eq!(b(109).peek(&mut c), [0, 4]);
    assert_eq!(b(111).peek(&mut c), [1, 4]); // 4 * 0.9 = 3.6
}

fn another_window_or_unit_has_its_own_counts(kind: Kind) {
    let s = Server::start(kind, &[]);
    let mut c = s.connection();
    let w = |window| sw("w").limit(2).window(window).now(1_000_000);
    w(3_600).check(&mut c);
    w(3_600).check(&mut c);
    assert_eq!(w(3_600).check(&mut c), [0, 2]);
    assert_eq!(w(1_800_000).check(&mut c), [1, 1]);
    // 1,800,000 milliseconds is not 1,800,000 seconds; options in any case.
    assert_eq!(w(1_800_000).ms().check(&mut c), [1, 1]);
    let lower = ["w", "2", "1800000", "1000000", "ms"];
    assert_eq!(support::call(&mut c, CHECK, &lower).unwrap(), [1, 2]);
    let mixed = ["w", "2", "1800000", "1000000", "Ms"];
    assert_eq!(support::call(&mut c, CHECK, &mixed).unwrap(), [0, 2]);
    // The other windows kept their counts: the hour still refuses, the 1,800,000 s
    // window still holds its one request.
    assert_eq!(w(3_600).peek(&mut c), [0, 2]);
    assert_eq!(w(1_800_000).peek(&mut c), [1, 2]);
}

/// With a window longer than the epoch, every `now` lies in window 0, and one request
/// weighs 1 until one unit into window 1: a fresh key's reset_after is
/// `window + 1 - now`. So the module's clock can be read back exactly and compared with
/// TIME just before and after, in seconds (floored) and in milliseconds. The expiry of an
/// allowed CHECK (two windows after the server's time in ms) is bracketed the same way.
fn the_server_clock_is_used_in_the_commands_unit_when_now_is_omitted(kind: Kind) {
    let s = Server::start(kind, &[]);
    let mut c = s.connection();
    for ms in [false, true] {
        // 10^12 seconds, 10^15 milliseconds: about 31,700 years either way.
        let (window, unit_ms) = if ms {
            (1_000_000_000_000_000, 1)
        } else {
            (1_000_000_000_000, 1000)
        };
        for command in [CHECK, PEEK] {
            let key = format!("clock:{ms}:{command}");
            let mut call = sw(&key).limit(5).window(window).details();
            if ms {
                call = call.ms();
            }
            let before = server_ms(&mut c);
            let r: Vec<i64> = call.cmd(command).query(&mut c).unwrap();
            let after = server_ms(&mut c);
            assert_eq!(r[..5], [1, 1, 5, 4, -1], "{command} MS={ms}");
            // Signed: a clock in the wrong unit must fail here, not overflow.
            let module_now = window as i128 + 1 - r[5] as i128;
            let (lo, hi) = ((before / unit_ms) as i128, (after / unit_ms) as i128);
            assert!(
                lo <= module_now && module_now <= hi,
                "{command} MS={ms}: the module's now is {module_now}, TIME says {lo} to {hi}"
            );
            if command == CHECK {
                let expiry = pexpiretime(&mut c, &key) as u64;
                let two_windows = 2 * window * unit_ms;
                assert!(
                    before + two_windows <= expiry && expiry <= after + two_windows,
                    "MS={ms}: expiry {expiry}, TIME {before} to {after} + {two_windows}"
                );
            } else {
                assert_eq!(get_raw(&mut c, &key), None, "PEEK wrote");
            }
        }
    }
}

fn allowed_checks_expire_two_windows_later_and_denied_ones_write_nothing(kind: Kind) {
    let s = Server::start(kind, &[]);
    let mut c = s.connection();
    let t = |now| sw("t").limit(1).window(100).now(now);
    // Two windows of 100 s after the server's clock, whatever `now` says.
    check_expires_in(&mut c, &t(5000), 200_000);
    let bytes = get_raw(&mut c, "t").unwrap();
    assert_eq!(bytes[0], 0xA1);
    // Make the expiry distinguishable, then deny: neither bytes nor expiry change.
    let _: () = redis::cmd("PEXPIRE")
        .arg("t")
        .arg(50_000_000)
        .query(&mut c)
        .unwrap();
    let moved = pexpiretime(&mut c, "t");
    assert_eq!(t(5001).check(&mut c), [0, 1]);
    assert_eq!(get_raw(&mut c, "t").unwrap(), bytes);
    assert_eq!(pexpiretime(&mut c, "t"), moved);
    // Milliseconds: two windows of 1,500,000 ms (the server's clock, no `now`).
    check_expires_in(&mut c, &sw("tm").limit(5).window(1_500_000).ms(), 3_000_000);
}

fn peek_changes_nothing(kind: Kind) {
    let s = Server::start(kind, &[]);
    let mut c = s.connection();
    let p = |window, now| sw("p").limit(3).window(window).now(now);
    assert_eq!(p(60, 100).peek(&mut c), [1, 1]);
    assert_eq!(get_raw(&mut c, "p"), None);
    p(60, 100).check(&mut c);
    let bytes = get_raw(&mut c, "p");
    let expiry = pexpiretime(&mut c, "p");
    for now in [100, 130, 170, 500, 10] {
        p(60, now).details().peek(&mut c);
        p(61, now).peek(&mut c); // another window: would start a counter of its own
    }
    assert_eq!(get_raw(&mut c, "p"), bytes);
    assert_eq!(pexpiretime(&mut c, "p"), expiry);
    assert_eq!(p(60, 100).check(&mut c), [1, 2]);
}

/// A new key's value is made `raw` (RM_StringTruncate), not compact: RM_StringDMA turns
/// any other encoding into a fresh raw copy, even to read it, so a compact value would
/// cost every identity an allocation and a copy on its second request, and would put its
/// value apart from its key in memory (measured: 8% more server time on PEEK and denied
/// CHECKs, bench/PROFILE.md).
fn a_new_key_is_written_raw_so_the_next_call_reads_it_in_place(kind: Kind) {
    let s = Server::start(kind, &[]);
    let mut c = s.connection();
    let encoding = |c: &mut redis::Connection| -> String {
        redis::cmd("OBJECT")
            .arg("ENCODING")
            .arg("e")
            .query(c)
            .expect("OBJECT ENCODING")
    };
    let e = |now| sw("e").limit(1000).window(60).now(now);
    assert_eq!(e(100).check(&mut c), [1, 1]);
    assert_eq!(encoding(&mut c), "raw");
    let bytes = get_raw(&mut c, "e");
    assert_eq!(e(100).peek(&mut c), [1, 2]);
    assert_eq!(get_raw(&mut c, "e"), bytes);
    assert_eq!(e(100).check(&mut c), [1, 2]);
    assert_eq!(encoding(&mut c), "raw");
}

fn keyspace_notifications_fire_for_the_write_and_the_expire(kind: Kind) {
    let s = Server::start(kind, &["--notify-keyspace-events", "KEA"]);
    let mut c = s.connection();
    let mut sub = s.connection();
    let _: () = redis::cmd("PSUBSCRIBE")
        .arg("__keyspace@0__:*")
        .exec(&mut sub)
        .unwrap();
    sw("n1").limit(0).window(60).now(100).check(&mut c); // denied: no event
    sw("n2").limit(5).window(60).now(100).check(&mut c); // allowed: set + expire
    let _: () = redis::cmd("SET")
        .arg("marker")
        .arg("x")
        .query(&mut c)
        .unwrap();
    let mut events = Vec::new();
    loop {
        let msg: redis::Value = sub.recv_response().unwrap();
        let text = format!("{msg:?}");
        if text.contains("marker") {
            break;
        }
        events.push(text);
    }
    assert_eq!(events.len(), 2, "{events:?}");
    assert!(
        events[0].contains("n2") && events[0].contains("set"),
        "{events:?}"
    );
    assert!(
        events[1].contains("n2") && events[1].contains("expire"),
        "{events:?}"
    );
}

fn only_an_allowed_check_breaks_a_watch(kind: Kind) {
    let s = Server::start(kind, &[]);
    let mut a = s.connection();
    let mut b = s.connection();
    let x = |limit| sw("x").limit(limit).window(60).now(100);
    x(1).check(&mut a);
    // Whether EXEC ran after a WATCH on x and the call from another connection.
    let exec_runs = |a: &mut redis::Connection, b: &mut redis::Connection, call: support::Sw| {
        let _: () = redis::cmd("WATCH").arg("x").query(a).unwrap();
        call.check(b);
        let r: Option<Vec<String>> = redis::pipe().atomic().cmd("PING").query(a).unwrap();
        r.is_some()
    };
    assert!(exec_runs(&mut a, &mut b, x(1)), "a denied CHECK broke it");
    assert!(!exec_runs(&mut a, &mut b, x(9)), "an allowed CHECK did not");
}

fn info_counts_every_kind_of_call(kind: Kind) {
    let s = Server::start(kind, &[]);
    let mut c = s.connection();
    let i = sw("i").limit(1).window(60).now(1);
    i.check(&mut c); // allowed
    i.check(&mut c); // denied
    i.check(&mut c); // denied
    i.peek(&mut c);
    let _ = support::call(&mut c, CHECK, &["i", "x", "60"]); // an error
    let text = info(&mut c, "slidingwindow");
    for (field, value) in [
        ("slidingwindow_checks", "3"),
        ("slidingwindow_allowed", "1"),
        ("slidingwindow_denied", "2"),
        ("slidingwindow_peeks", "1"),
        ("slidingwindow_errors", "1"),
    ] {
        assert_eq!(info_field(&text, field), Some(value), "{field} in {text}");
    }
}

/// A reply as text, arrays in brackets: `[flags [RW access update] ...]`.
fn flat(v: &Value) -> String {
    match v {
        Value::Array(items) | Value::Set(items) => {
            let inner: Vec<String> = items.iter().map(flat).collect();
            format!("[{}]", inner.join(" "))
        }
        Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
        Value::SimpleString(s) => s.clone(),
        Value::Int(i) => i.to_string(),
        other => format!("{other:?}"),
    }
}

fn items(v: &Value) -> &[Value] {
    match v {
        Value::Array(items) | Value::Set(items) => items,
        other => panic!("not an array: {other:?}"),
    }
}

/// An array of alternating names and values, by name.
fn fields(v: &Value) -> BTreeMap<String, Value> {
    items(v)
        .chunks(2)
        .map(|p| (flat(&p[0]), p[1].clone()))
        .collect()
}

fn command_info_describes_each_command(kind: Kind) {
    let s = Server::start(kind, &[]);
    let mut c = s.connection();
    // Name, arity, flags, key spec flags: the key is argument 1 (read and written by
    // CHECK, only read by PEEK), one key, found at that index.
    let expected = [
        (
            "slidingwindow.check",
            "[denyoom fast module write]",
            "[RW access update]",
        ),
        (
            "slidingwindow.peek",
            "[fast module readonly]",
            "[RO access]",
        ),
        (
            "slidingwindow.refund",
            "[denyoom fast module write]",
            "[RW access update]",
        ),
    ];
    for (name, flags, key_flags) in expected {
        let reply: Value = redis::cmd("COMMAND")
            .arg("INFO")
            .arg(name)
            .query(&mut c)
            .unwrap();
        let info = items(&items(&reply)[0]);
        assert_eq!(flat(&info[0]), name);
        assert_eq!(info[1], Value::Int(-4), "{name}: arity");
        let mut got: Vec<String> = items(&info[2]).iter().map(flat).collect();
        got.sort();
        assert_eq!(format!("[{}]", got.join(" ")), flags, "{name}: flags");
        // First key, last key, step.
        assert_eq!(
            info[3..6],
            [Value::Int(1), Value::Int(1), Value::Int(1)],
            "{name}"
        );
        // info[6] holds the ACL categories, tested with ACLs.
        let specs = items(&info[8]);
        assert_eq!(specs.len(), 1, "{name}: key specs {}", flat(&info[8]));
        assert_eq!(
            flat(&specs[0]),
            format!(
                "[flags {key_flags} begin_search [type index spec [index 1]] \
                 find_keys [type range spec [lastkey 0 keystep 1 limit 0]]]"
            ),
            "{name}: key spec"
        );
        // What cluster clients route by.
        let keys: Vec<String> = redis::cmd("COMMAND")
            .arg("GETKEYS")
            .arg(name)
            .arg(sw("user:1").limit(10).window(60).args())
            .query(&mut c)
            .unwrap();
        assert_eq!(keys, ["user:1"], "{name}: GETKEYS");
    }
}

fn command_docs_describe_each_argument(kind: Kind) {
    let s = Server::start(kind, &[]);
    let mut c = s.connection();
    for name in [
        "slidingwindow.check",
        "slidingwindow.peek",
        "slidingwindow.refund",
    ] {
        let reply: Value = redis::cmd("COMMAND")
            .arg("DOCS")
            .arg(name)
            .query(&mut c)
            .unwrap();
        let reply = items(&reply);
        assert_eq!(flat(&reply[0]), name);
        let doc = fields(&reply[1]);
        assert!(!flat(&doc["summary"]).is_empty(), "{name}: summary");
        assert_eq!(flat(&doc["group"]), "module", "{name}");
        assert_eq!(flat(&doc["module"]), "slidingwindow", "{name}");
        // Each argument as "name type [token] [optional]".
        let args: Vec<String> = items(&doc["arguments"])
            .iter()
            .map(|a| {
                let a = fields(a);
                assert!(!flat(&a["summary"]).is_empty(), "{name}: {a:?}");
                let mut text = format!("{} {}", flat(&a["name"]), flat(&a["type"]));
                if let Some(token) = a.get("token") {
                    text += &format!(" {}", flat(token));
                }
                if a.get("flags").is_some_and(|f| flat(f).contains("optional")) {
                    text += " optional";
                }
                text
            })
            .collect();
        assert_eq!(
            args[..4],
            [
                "key key",
                "limit integer",
                "window integer",
                "now integer optional"
            ],
            "{name}: {args:?}"
        );
        for option in [
            "cost integer COST optional",
            "ms pure-token MS optional",
            "details pure-token DETAILS optional",
        ] {
            assert!(
                args.iter().any(|a| a == option),
                "{name}: {option} in {args:?}"
            );
        }
    }
}

/// The release each command first appeared in.
const SINCE: [(&str, &str); 4] = [
    ("slidingwindow.check", "0.1.0"),
    ("slidingwindow.peek", "0.1.0"),
    ("slidingwindow.counts", "0.2.0"),
    ("slidingwindow.refund", "0.2.0"),
];

/// "0.2.0" -> (0, 2, 0).
fn version_triple(v: &str) -> (u64, u64, u64) {
    let parts: Vec<u64> = v.split('.').map(|p| p.parse().unwrap()).collect();
    assert_eq!(parts.len(), 3, "version {v}");
    (parts[0], parts[1], parts[2])
}

fn module_list_and_command_docs_give_the_crates_version(kind: Kind) {
    let s = Server::start(kind, &[]);
    let mut c = s.connection();
    let crate_version = version_triple(env!("CARGO_PKG_VERSION"));
    let (major, minor, patch) = crate_version;
    let modules: Value = redis::cmd("MODULE").arg("LIST").query(&mut c).unwrap();
    let ours = items(&modules)
        .iter()
        .map(fields)
        .find(|m| flat(&m["name"]) == "slidingwindow")
        .expect("MODULE LIST names slidingwindow");
    assert_eq!(
        ours["ver"],
        Value::Int((major * 10_000 + minor * 100 + patch) as i64),
        "MODULE LIST against Cargo.toml's {}",
        env!("CARGO_PKG_VERSION")
    );
    // Every command the module registers, each with the release that introduced it,
    // none later than this one.
    let mut listed: Vec<String> = redis::cmd("COMMAND")
        .arg("LIST")
        .arg("FILTERBY")
        .arg("MODULE")
        .arg("slidingwindow")
        .query(&mut c)
        .unwrap();
    listed.sort();
    let mut expected: Vec<&str> = SINCE.iter().map(|(n, _)| *n).collect();
    expected.sort();
    assert_eq!(listed, expected, "the module's commands");
    for (name, since) in SINCE {
        let reply: Value = redis::cmd("COMMAND")
            .arg("DOCS")
            .arg(name)
            .query(&mut c)
            .unwrap();
        let doc = fields(&items(&reply)[1]);
        assert_eq!(flat(&doc["since"]), since, "{name}: since");
        assert!(
            version_triple(since) <= crate_version,
            "{name}: since {since}"
        );
    }
}
