//! What a user sees of CHECK and PEEK on a real server (Redis 7.0 and Valkey 8.1):
//! replies, DETAILS exactness, backward time, window changes, expiry, PEEK's purity,
//! keyspace notifications, WATCH, INFO and COMMAND DOCS.

mod support;

use support::{check, get_raw, peek, Rng, Server, KINDS};

fn ttl_ms(con: &mut redis::Connection, key: &str) -> i64 {
    redis::cmd("PTTL").arg(key).query(con).unwrap()
}

#[test]
fn replies_follow_the_seed_article() {
    for kind in KINDS {
        let s = Server::start(kind, &[]);
        let mut c = s.connection();
        // 80 requests in minute 1000, then 30 at the very start of minute 1001, where
        // the previous minute still weighs in full.
        assert_eq!(
            check(&mut c, &["a", "200", "60", "60000", "COST", "80"]),
            [1, 80]
        );
        assert_eq!(
            check(&mut c, &["a", "200", "60", "60060", "COST", "30"]),
            [1, 110]
        );
        // 18 s (30%) into minute 1001: 80 * 0.7 + 30 = 86, as in the article.
        assert_eq!(peek(&mut c, &["a", "100", "60", "60078"]), [1, 87]);
        assert_eq!(peek(&mut c, &["a", "86", "60", "60078"]), [0, 86]);
        assert_eq!(
            peek(&mut c, &["a", "100", "60", "60078", "DETAILS"]),
            [1, 87, 100, 13, -1, 101]
        );
        // Reset: 31 requests weigh under 1 only 59 s into minute 1002 (31 * 1/60):
        // 60179 - 60078 = 101.
    }
}

#[test]
fn details_retry_and_reset_are_exact_on_the_server() {
    for kind in KINDS {
        let s = Server::start(kind, &[]);
        let mut c = s.connection();
        let mut rng = Rng::new(kind as u64 + 1);
        for case in 0..300 {
            let key = format!("d{case}");
            let window = rng.range(1, 30);
            let limit = rng.range(1, 12);
            let (w, l) = (window.to_string(), limit.to_string());
            let mut now = rng.range(0, 10_000);
            // Build some history with random traffic.
            for _ in 0..rng.range(0, 40) {
                now += rng.range(0, window / 2 + 1);
                check(&mut c, &[&key, &l, &w, &now.to_string()]);
            }
            let cost = rng.range(1, limit + 1).to_string();
            let n = now.to_string();
            let r = check(&mut c, &[&key, &l, &w, &n, "COST", &cost, "DETAILS"]);
            let (allowed, count, retry, reset) = (r[0], r[1], r[4], r[5]);
            assert_eq!(r[2], limit as i64);
            assert_eq!(r[3], (limit as i64 - count).max(0));
            let at = |c: &mut redis::Connection, dt: i64| {
                let t = (now as i64 + dt).to_string();
                peek(c, &[&key, &l, &w, &t, "COST", &cost])
            };
            // The estimate alone: a PEEK of cost 1 under a limit nothing reaches.
            let estimate_at = |c: &mut redis::Connection, dt: i64| {
                let t = (now as i64 + dt).to_string();
                peek(c, &[&key, "9007199254740991", &w, &t])[1] - 1
            };
            if allowed == 1 || cost.parse::<u64>().unwrap() > limit {
                assert_eq!(retry, -1);
            } else {
                assert!(retry >= 1, "case {case}: {r:?}");
                assert_eq!(at(&mut c, retry)[0], 1, "case {case}: retry {r:?}");
                assert_eq!(at(&mut c, retry - 1)[0], 0, "case {case}: retry-1 {r:?}");
            }
            assert_eq!(estimate_at(&mut c, reset), 0, "case {case}: reset {r:?}");
            if reset > 0 {
                assert!(
                    estimate_at(&mut c, reset - 1) > 0,
                    "case {case}: reset-1 {r:?}"
                );
            }
        }
    }
}

#[test]
fn a_clock_behind_the_keys_window_is_judged_at_its_start() {
    for kind in KINDS {
        let s = Server::start(kind, &[]);
        let mut c = s.connection();
        for _ in 0..3 {
            check(&mut c, &["b", "4", "10", "105"]);
        }
        let before = get_raw(&mut c, "b");
        // Two windows behind: counted into window 10, never into window 8.
        assert_eq!(check(&mut c, &["b", "4", "10", "87"]), [1, 4]);
        assert_eq!(
            check(&mut c, &["b", "4", "10", "87", "DETAILS"]),
            [0, 4, 4, 0, 24, 31]
        );
        assert_ne!(get_raw(&mut c, "b"), before);
        // A caller back on time sees the same counts: nothing went backwards.
        assert_eq!(peek(&mut c, &["b", "4", "10", "109"]), [0, 4]);
        assert_eq!(peek(&mut c, &["b", "4", "10", "111"]), [1, 4]); // 4 * 0.9 = 3.6
    }
}

#[test]
fn another_window_or_unit_starts_the_key_afresh() {
    for kind in KINDS {
        let s = Server::start(kind, &[]);
        let mut c = s.connection();
        for _ in 0..2 {
            check(&mut c, &["w", "2", "60", "1000"]);
        }
        assert_eq!(check(&mut c, &["w", "2", "60", "1000"]), [0, 2]);
        assert_eq!(check(&mut c, &["w", "2", "30", "1000"]), [1, 1]);
        // 30 milliseconds is not 30 seconds.
        assert_eq!(check(&mut c, &["w", "2", "30", "1000", "MS"]), [1, 1]);
        assert_eq!(check(&mut c, &["w", "2", "30", "1000", "ms"]), [1, 2]);
        assert_eq!(check(&mut c, &["w", "2", "30", "1000", "Ms"]), [0, 2]);
    }
}

#[test]
fn server_clock_is_used_when_now_is_omitted() {
    for kind in KINDS {
        let s = Server::start(kind, &[]);
        let mut c = s.connection();
        let (secs, _): (String, String) = redis::cmd("TIME").query(&mut c).unwrap();
        let secs: u64 = secs.parse().unwrap();
        // A one-hour window: the server's now lies in the same window as TIME's answer
        // (or the next one if the hour turned between the two calls).
        assert_eq!(check(&mut c, &["clock", "5", "3600"]), [1, 1]);
        let explicit = peek(&mut c, &["clock", "5", "3600", &secs.to_string()]);
        let later = peek(&mut c, &["clock", "5", "3600", &(secs + 3600).to_string()]);
        assert!(
            explicit == [1, 2] || later == [1, 2],
            "{explicit:?} {later:?}"
        );
        // In MS the same key starts afresh and counts in milliseconds.
        assert_eq!(check(&mut c, &["clock", "5", "3600000", "MS"]), [1, 1]);
        // Two requests counted in this hour-long window (the peeked one included):
        // they weigh under 1 halfway through the next window, so within 2 hours.
        let r = peek(&mut c, &["clock", "5", "3600000", "MS", "DETAILS"]);
        assert_eq!(r[..5], [1, 2, 5, 3, -1]);
        assert!(r[5] > 1_800_000 && r[5] <= 5_400_001, "{r:?}");
    }
}

#[test]
fn allowed_checks_write_with_two_windows_of_ttl_and_denied_ones_write_nothing() {
    for kind in KINDS {
        let s = Server::start(kind, &[]);
        let mut c = s.connection();
        assert_eq!(check(&mut c, &["t", "1", "100", "5000"]), [1, 1]);
        let ttl = ttl_ms(&mut c, "t");
        assert!(ttl > 199_000 && ttl <= 200_000, "{ttl}");
        let bytes = get_raw(&mut c, "t").unwrap();
        assert_eq!(bytes[0], 0xA1);
        // Make the TTL distinguishable, then deny: neither bytes nor TTL change.
        let _: () = redis::cmd("PEXPIRE")
            .arg("t")
            .arg(50_000)
            .query(&mut c)
            .unwrap();
        assert_eq!(check(&mut c, &["t", "1", "100", "5001"]), [0, 1]);
        assert_eq!(get_raw(&mut c, "t").unwrap(), bytes);
        assert!(ttl_ms(&mut c, "t") <= 50_000);
        // Milliseconds: 2 windows of 1500 ms.
        check(&mut c, &["tm", "5", "1500", "MS"]);
        let ttl = ttl_ms(&mut c, "tm");
        assert!(ttl > 2_000 && ttl <= 3_000, "{ttl}");
    }
}

#[test]
fn peek_changes_nothing() {
    for kind in KINDS {
        let s = Server::start(kind, &[]);
        let mut c = s.connection();
        assert_eq!(peek(&mut c, &["p", "3", "60", "100"]), [1, 1]);
        assert_eq!(get_raw(&mut c, "p"), None);
        check(&mut c, &["p", "3", "60", "100"]);
        let bytes = get_raw(&mut c, "p");
        let ttl = ttl_ms(&mut c, "p");
        for t in ["100", "130", "170", "500", "10"] {
            peek(&mut c, &["p", "3", "60", t, "DETAILS"]);
            peek(&mut c, &["p", "3", "61", t]); // another window: would start afresh
        }
        assert_eq!(get_raw(&mut c, "p"), bytes);
        assert!(ttl_ms(&mut c, "p") <= ttl);
        assert_eq!(check(&mut c, &["p", "3", "60", "100"]), [1, 2]);
    }
}

#[test]
fn keyspace_notifications_fire_for_the_write_and_the_expire() {
    for kind in KINDS {
        let s = Server::start(kind, &["--notify-keyspace-events", "KEA"]);
        let mut c = s.connection();
        let mut sub = s.connection();
        let _: () = redis::cmd("PSUBSCRIBE")
            .arg("__keyspace@0__:*")
            .exec(&mut sub)
            .unwrap();
        check(&mut c, &["n1", "0", "60", "100"]); // denied: no event
        check(&mut c, &["n2", "5", "60", "100"]); // allowed: set + expire
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
}

#[test]
fn only_an_allowed_check_breaks_a_watch() {
    for kind in KINDS {
        let s = Server::start(kind, &[]);
        let mut a = s.connection();
        let mut b = s.connection();
        check(&mut a, &["x", "1", "60", "100"]);
        let watch_then = |a: &mut redis::Connection, b: &mut redis::Connection, args: &[&str]| {
            let _: () = redis::cmd("WATCH").arg("x").query(a).unwrap();
            check(b, args);
            let r: Option<Vec<String>> = redis::pipe().atomic().cmd("PING").query(a).unwrap();
            r.is_some() // EXEC ran: the watched key was not modified
        };
        assert!(
            watch_then(&mut a, &mut b, &["x", "1", "60", "100"]),
            "denied"
        );
        assert!(
            !watch_then(&mut a, &mut b, &["x", "9", "60", "100"]),
            "allowed"
        );
    }
}

#[test]
fn info_counts_every_kind_of_call() {
    for kind in KINDS {
        let s = Server::start(kind, &[]);
        let mut c = s.connection();
        check(&mut c, &["i", "1", "60", "1"]);
        check(&mut c, &["i", "1", "60", "1"]);
        check(&mut c, &["i", "1", "60", "1"]);
        peek(&mut c, &["i", "1", "60", "1"]);
        let _ = support::sw(&mut c, "SLIDINGWINDOW.CHECK", &["i", "x", "60"]);
        let info: String = redis::cmd("INFO")
            .arg("slidingwindow")
            .query(&mut c)
            .unwrap();
        for line in [
            "slidingwindow_checks:3",
            "slidingwindow_allowed:1",
            "slidingwindow_denied:2",
            "slidingwindow_peeks:1",
            "slidingwindow_errors:1",
        ] {
            assert!(info.contains(line), "{line} missing in {info}");
        }
    }
}

#[test]
fn command_info_and_docs_describe_both_commands() {
    for kind in KINDS {
        let s = Server::start(kind, &[]);
        let mut c = s.connection();
        let info: redis::Value = redis::cmd("COMMAND")
            .arg("INFO")
            .arg("slidingwindow.check")
            .arg("slidingwindow.peek")
            .query(&mut c)
            .unwrap();
        let text = format!("{info:?}");
        for needle in ["write", "denyoom", "fast", "readonly", "RW", "RO", "update"] {
            assert!(text.contains(needle), "{needle} missing in {text}");
        }
        let keys: Vec<String> = redis::cmd("COMMAND")
            .arg("GETKEYS")
            .arg("SLIDINGWINDOW.PEEK")
            .arg("user:1")
            .arg("10")
            .arg("60")
            .query(&mut c)
            .unwrap();
        assert_eq!(keys, ["user:1"]);
        let docs: redis::Value = redis::cmd("COMMAND")
            .arg("DOCS")
            .arg("slidingwindow.check")
            .query(&mut c)
            .unwrap();
        let text = format!("{docs:?}");
        for needle in ["summary", "limit", "window", "now", "COST", "MS", "DETAILS"] {
            assert!(text.contains(needle), "{needle} missing in {text}");
        }
    }
}
