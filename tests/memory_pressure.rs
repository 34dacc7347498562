//! Memory pressure, on Redis 7.0 and Valkey 8.1.
//!
//! * `noeviction` with maxmemory reached: CHECK (flag deny-oom) answers an OOM error —
//!   directly, inside MULTI (the transaction is refused) and from a script — and counts
//!   nothing; PEEK still answers with the right counts; once memory is freed, CHECK
//!   carries on from the counts it had.
//! * `volatile-lru` with the application's other keys persistent: the limiter keys are
//!   the only keys with a TTL, so they are the only eviction candidates and are all
//!   evicted first: their counts are lost and the identities start again from zero.
//! * `allkeys-lru`: the limiter keys compete with everything else; a key is either kept
//!   with its exact count or evicted (count back to zero), never anything in between;
//!   CHECK never answers OOM. The number evicted is printed.

mod support;

use std::time::Instant;
use support::{Kind, Server};

const IDENTITIES: usize = 200;
const LIMIT: &str = "10";
const WINDOW: &str = "3600";
const NOW: &str = "3000000";
/// CHECKs per identity before the pressure.
const USED: i64 = 3;
const JUNK: usize = 64 * 1024;

fn key(i: usize) -> String {
    format!("mem:user:{i}")
}

fn check_args(i: usize) -> Vec<String> {
    vec![key(i), LIMIT.into(), WINDOW.into(), NOW.into()]
}

fn used_memory(con: &mut redis::Connection) -> u64 {
    let info: String = redis::cmd("INFO").arg("memory").query(con).unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

fn stat(con: &mut redis::Connection, field: &str) -> u64 {
    let info: String = redis::cmd("INFO").arg("stats").query(con).unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// A server holding IDENTITIES limiter keys with USED allowed CHECKs each, with
/// maxmemory set just above what it uses and `policy`.
fn setup(kind: Kind, policy: &str) -> (Server, redis::Connection) {
    let s = Server::start(kind, &[]);
    let mut con = s.connection();
    for i in 0..IDENTITIES {
        for n in 1..=USED {
            let a = check_args(i);
            let a: Vec<&str> = a.iter().map(String::as_str).collect();
            assert_eq!(support::check(&mut con, &a), vec![1, n]);
        }
    }
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory-policy")
        .arg(policy)
        .query(&mut con)
        .unwrap();
    let limit = used_memory(&mut con) + 1024 * 1024;
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory")
        .arg(limit)
        .query(&mut con)
        .unwrap();
    (s, con)
}

/// SETs persistent junk keys until one is refused with OOM (or `max` were stored);
/// how many were stored.
fn fill(con: &mut redis::Connection, max: usize) -> (usize, bool) {
    let value = vec![b'x'; JUNK];
    for n in 0..max {
        let r: redis::RedisResult<()> = redis::cmd("SET")
            .arg(format!("junk:{n}"))
            .arg(&value)
            .query(con);
        match r {
            Ok(()) => {}
            Err(e) if e.code() == Some("OOM") => return (n, true),
            Err(e) => panic!("SET junk: {e}"),
        }
    }
    (max, false)
}

fn noeviction(kind: Kind) {
    let t = Instant::now();
    let (_s, mut con) = setup(kind, "noeviction");
    let (stored, oom) = fill(&mut con, 1000);
    assert!(oom, "{kind:?}: no OOM after {stored} junk keys");
    // Right at the limit, whether a command is refused depends on the memory its own
    // arguments and the client buffers take at that moment: set the limit 256 KiB below
    // what is used, so every deny-oom command is refused, deterministically.
    let used = used_memory(&mut con);
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory")
        .arg(used - 256 * 1024)
        .query(&mut con)
        .unwrap();
    let before = support::get_raw(&mut con, &key(0)).unwrap();

    // CHECK: OOM, on an existing identity and on a new one.
    for k in [key(0), "mem:new".to_string()] {
        let e =
            support::sw(&mut con, "SLIDINGWINDOW.CHECK", &[&k, LIMIT, WINDOW, NOW]).unwrap_err();
        assert_eq!(e.code(), Some("OOM"), "{kind:?}: {e}");
    }
    // Inside MULTI the CHECK is refused when queued, and EXEC aborts.
    let mut pipe = redis::pipe();
    pipe.atomic()
        .cmd("SLIDINGWINDOW.CHECK")
        .arg(key(0))
        .arg(LIMIT)
        .arg(WINDOW)
        .arg(NOW);
    let e = pipe.query::<redis::Value>(&mut con).unwrap_err();
    assert!(
        e.to_string().contains("OOM") || e.code() == Some("EXECABORT"),
        "{kind:?}: MULTI: {e}"
    );
    // From a script.
    let e = redis::cmd("EVAL")
        .arg("return redis.call('SLIDINGWINDOW.CHECK', KEYS[1], ARGV[1], ARGV[2], ARGV[3])")
        .arg(1)
        .arg(key(0))
        .arg(LIMIT)
        .arg(WINDOW)
        .arg(NOW)
        .query::<redis::Value>(&mut con)
        .unwrap_err();
    assert!(e.to_string().contains("OOM"), "{kind:?}: EVAL: {e}");
    // Nothing was counted or created.
    assert_eq!(support::get_raw(&mut con, &key(0)), Some(before));
    assert_eq!(support::get_raw(&mut con, "mem:new"), None);

    // PEEK answers, with the counts as they were.
    for i in 0..IDENTITIES {
        assert_eq!(
            support::peek(&mut con, &[&key(i), LIMIT, WINDOW, NOW]),
            vec![1, USED + 1],
            "{}",
            key(i)
        );
    }
    let r = support::peek(&mut con, &["mem:new", LIMIT, WINDOW, NOW, "DETAILS"]);
    assert_eq!(r[..5], [1, 1, 10, 9, -1]);

    // Memory freed: CHECK carries on where it was.
    for n in 0..stored {
        let _: i64 = redis::cmd("DEL")
            .arg(format!("junk:{n}"))
            .query(&mut con)
            .unwrap();
    }
    assert_eq!(
        support::check(&mut con, &[&key(0), LIMIT, WINDOW, NOW]),
        vec![1, USED + 1]
    );
    assert_eq!(
        support::check(&mut con, &["mem:new", LIMIT, WINDOW, NOW]),
        vec![1, 1]
    );
    eprintln!("{kind:?} noeviction: OOM after {stored} x 64 KiB; CHECK refused (direct, MULTI, EVAL), PEEK served, counts intact; {:?}", t.elapsed());
}

fn volatile_lru(kind: Kind) {
    let t = Instant::now();
    let (_s, mut con) = setup(kind, "volatile-lru");
    let (stored, oom) = fill(&mut con, 1000);
    // The limiter keys (the only volatile keys) went first, then SET hit OOM.
    assert!(oom, "{kind:?}: no OOM after {stored} junk keys");
    let evicted = stat(&mut con, "evicted_keys");
    assert_eq!(evicted, IDENTITIES as u64, "{kind:?}: evicted_keys");
    let dbsize: u64 = redis::cmd("DBSIZE").query(&mut con).unwrap();
    assert_eq!(dbsize, stored as u64, "{kind:?}: only junk left");
    for i in 0..IDENTITIES {
        assert_eq!(
            support::peek(&mut con, &[&key(i), LIMIT, WINDOW, NOW]),
            vec![1, 1],
            "{} kept a count",
            key(i)
        );
    }
    eprintln!("{kind:?} volatile-lru: all {IDENTITIES} limiter keys evicted before any persistent key, counts reset to 0; {:?}", t.elapsed());
}

fn allkeys_lru(kind: Kind) {
    let t = Instant::now();
    let (_s, mut con) = setup(kind, "allkeys-lru");
    let (stored, oom) = fill(&mut con, 300);
    assert!(!oom, "{kind:?}: allkeys-lru answered OOM");
    let evicted = stat(&mut con, "evicted_keys");
    assert!(
        evicted > 0,
        "{kind:?}: nothing evicted after {stored} x 64 KiB over a 1 MiB margin"
    );
    // Each identity: exact count kept, or evicted and back to zero.
    let mut kept = 0;
    for i in 0..IDENTITIES {
        let r = support::peek(&mut con, &[&key(i), LIMIT, WINDOW, NOW]);
        assert!(
            r == vec![1, USED + 1] || r == vec![1, 1],
            "{}: {r:?}",
            key(i)
        );
        if r[1] == USED + 1 {
            kept += 1;
        }
    }
    // CHECK keeps working under pressure (it evicts instead of failing).
    for i in 0..IDENTITIES {
        let r = support::check(&mut con, &[&key(i), LIMIT, WINDOW, NOW]);
        assert_eq!(r[0], 1);
    }
    eprintln!(
        "{kind:?} allkeys-lru: {evicted} keys evicted in all; {} of {IDENTITIES} limiter keys evicted (counts reset), {kept} kept exactly; {:?}",
        IDENTITIES - kept,
        t.elapsed()
    );
}

#[test]
fn noeviction_redis() {
    noeviction(Kind::Redis);
}

#[test]
fn noeviction_valkey() {
    noeviction(Kind::Valkey);
}

#[test]
fn volatile_lru_redis() {
    volatile_lru(Kind::Redis);
}

#[test]
fn volatile_lru_valkey() {
    volatile_lru(Kind::Valkey);
}

#[test]
fn allkeys_lru_redis() {
    allkeys_lru(Kind::Redis);
}

#[test]
fn allkeys_lru_valkey() {
    allkeys_lru(Kind::Valkey);
}
