//! Memory pressure, on every server.
//!
//! * `noeviction` with maxmemory reached: CHECK (flag deny-oom) answers an OOM error —
//!   directly, inside MULTI (refused when queued, so EXEC aborts) and from a script —
//!   and counts nothing; PEEK still answers with the right counts; once memory is
//!   freed, CHECK carries on from the counts it had.
//! * `volatile-lru` with the application's other keys persistent: the limiter keys are
//!   the only keys with a TTL, so they are the only eviction candidates and are all
//!   evicted first: their counts are lost and the identities start again from zero.
//! * `allkeys-lru`: the limiter keys compete with everything else by idle time. Limiter
//!   keys idle for a day, other data idle for an hour, and limiter keys just used: the
//!   first are evicted, the last kept, each with its exact count or back to zero, never
//!   anything in between; CHECK never answers OOM.

#[macro_use]
mod support;

use std::time::Instant;
use support::{get_raw, info_u64, pexpiretime, sw, Kind, Server, Sw};

on_every_server!(noeviction, volatile_lru, allkeys_lru);

const IDENTITIES: usize = 200;
/// CHECKs per identity before the pressure.
const USED: i64 = 3;
const JUNK: usize = 64 * 1024;

fn key(i: usize) -> String {
    support::key("mem:user", i)
}

/// A request of `key`: limit 10 per hour, at a fixed time.
fn limiter(key: &str) -> Sw {
    sw(key).limit(10).window(3600).now(3_000_000)
}

/// PEEK's reply for an identity with `n` requests counted (allowed: count n + 1).
fn counted(n: i64) -> Vec<i64> {
    vec![1, n + 1]
}

fn used_memory(con: &mut redis::Connection) -> u64 {
    info_u64(con, "memory", "used_memory")
}

fn config_set(con: &mut redis::Connection, name: &str, value: impl redis::ToRedisArgs) {
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg(name)
        .arg(value)
        .query(con)
        .unwrap_or_else(|e| panic!("CONFIG SET {name}: {e}"));
}

/// A server holding IDENTITIES limiter keys with USED allowed CHECKs each, under
/// `policy`, with no memory limit yet.
fn setup(kind: Kind, policy: &str) -> (Server, redis::Connection) {
    let s = Server::start(kind, &[]);
    let mut con = s.connection();
    config_set(&mut con, "maxmemory-policy", policy);
    for i in 0..IDENTITIES {
        for n in 1..=USED {
            assert_eq!(limiter(&key(i)).check(&mut con), vec![1, n]);
        }
    }
    (s, con)
}

/// maxmemory set `margin` bytes above (or below, when negative) what is used now.
fn limit_memory(con: &mut redis::Connection, margin: i64) {
    let used = used_memory(con) as i64;
    config_set(con, "maxmemory", used + margin);
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

/// `setup`, then maxmemory 1 MiB above what is used, filled with junk until a SET is
/// refused; how many junk keys were stored.
fn full(kind: Kind, policy: &str) -> (Server, redis::Connection, usize) {
    let (s, mut con) = setup(kind, policy);
    limit_memory(&mut con, 1024 * 1024);
    let (stored, oom) = fill(&mut con, 1000);
    assert!(oom, "no OOM after {stored} junk keys");
    (s, con, stored)
}

fn noeviction(kind: Kind) {
    let t = Instant::now();
    let (_s, mut con, stored) = full(kind, "noeviction");
    // Right at the limit, whether a command is refused depends on the memory its own
    // arguments and the client buffers take at that moment: set the limit 256 KiB below
    // what is used, so every deny-oom command is refused, deterministically.
    limit_memory(&mut con, -256 * 1024);
    let before = get_raw(&mut con, &key(0)).unwrap();

    // CHECK: OOM, on an existing identity and on a new one.
    for k in [key(0), "mem:new".to_string()] {
        let e = limiter(&k).try_check(&mut con).unwrap_err();
        assert_eq!(e.code(), Some("OOM"), "{e}");
    }
    // Inside MULTI the CHECK is refused with OOM when queued, and EXEC aborts.
    let _: () = redis::cmd("MULTI").query(&mut con).unwrap();
    let e = limiter(&key(0)).try_check(&mut con).unwrap_err();
    assert_eq!(e.code(), Some("OOM"), "MULTI: {e}");
    let e = redis::cmd("EXEC")
        .query::<redis::Value>(&mut con)
        .unwrap_err();
    assert_eq!(e.code(), Some("EXECABORT"), "EXEC: {e}");
    // From a script.
    let e = redis::cmd("EVAL")
        .arg("return redis.call('SLIDINGWINDOW.CHECK', KEYS[1], ARGV[1], ARGV[2], ARGV[3])")
        .arg(1)
        .arg(limiter(&key(0)).args())
        .query::<redis::Value>(&mut con)
        .unwrap_err();
    assert!(e.to_string().contains("OOM"), "EVAL: {e}");
    // Nothing was counted or created.
    assert_eq!(get_raw(&mut con, &key(0)), Some(before));
    assert_eq!(get_raw(&mut con, "mem:new"), None);

    // PEEK answers, with the counts as they were.
    for i in 0..IDENTITIES {
        assert_eq!(limiter(&key(i)).peek(&mut con), counted(USED), "{}", key(i));
    }
    let r = limiter("mem:new").details().peek(&mut con);
    // Allowed, count 1, limit 10, remaining 9, no retry.
    assert_eq!(r[..5], [1, 1, 10, 9, -1]);

    // Memory freed: CHECK carries on where it was.
    for n in 0..stored {
        let _: i64 = redis::cmd("DEL")
            .arg(format!("junk:{n}"))
            .query(&mut con)
            .unwrap();
    }
    assert_eq!(limiter(&key(0)).check(&mut con), vec![1, USED + 1]);
    assert_eq!(limiter("mem:new").check(&mut con), vec![1, 1]);
    eprintln!("{kind} noeviction: OOM after {stored} x 64 KiB; CHECK refused (direct, MULTI, EVAL), PEEK served, counts intact; {:?}", t.elapsed());
}

fn volatile_lru(kind: Kind) {
    let t = Instant::now();
    // The limiter keys (the only volatile keys) go first, then SET hits OOM.
    let (_s, mut con, stored) = full(kind, "volatile-lru");
    assert_eq!(
        info_u64(&mut con, "stats", "evicted_keys"),
        IDENTITIES as u64
    );
    let dbsize: u64 = redis::cmd("DBSIZE").query(&mut con).unwrap();
    assert_eq!(dbsize, stored as u64, "only junk left");
    for i in 0..IDENTITIES {
        assert_eq!(
            limiter(&key(i)).peek(&mut con),
            counted(0),
            "{} kept a count",
            key(i)
        );
    }
    eprintln!("{kind} volatile-lru: all {IDENTITIES} limiter keys evicted before any persistent key, counts reset to 0; {:?}", t.elapsed());
}

/// Rewrites a key in place (same bytes, same absolute expiry) with an LRU idle time.
fn make_idle(con: &mut redis::Connection, key: &str, seconds: u64) {
    let dump: Vec<u8> = redis::cmd("DUMP").arg(key).query(con).unwrap();
    let at = pexpiretime(con, key).max(0);
    let mut restore = redis::cmd("RESTORE");
    restore.arg(key).arg(at).arg(dump).arg("REPLACE");
    if at > 0 {
        restore.arg("ABSTTL");
    }
    let _: () = restore
        .arg("IDLETIME")
        .arg(seconds)
        .query(con)
        .unwrap_or_else(|e| panic!("RESTORE {key}: {e}"));
}

fn allkeys_lru(kind: Kind) {
    let t = Instant::now();
    let (_s, mut con) = setup(kind, "allkeys-lru");
    // Odd identities idle for a day, 300 x 64 KiB of other data idle for an hour, even
    // identities just used.
    for i in (1..IDENTITIES).step_by(2) {
        make_idle(&mut con, &key(i), 86_400);
    }
    let (stored, _) = fill(&mut con, 300);
    for n in 0..stored {
        make_idle(&mut con, &format!("junk:{n}"), 3_600);
    }
    for i in (0..IDENTITIES).step_by(2) {
        limiter(&key(i)).peek(&mut con); // a read is a use
    }
    // 4 MiB over the limit: the next command evicts, oldest first (approximately, as
    // Redis samples keys: a day against an hour against now leaves no doubt).
    limit_memory(&mut con, -4 * 1024 * 1024);
    let _: String = redis::cmd("PING").query(&mut con).unwrap();
    let evicted = info_u64(&mut con, "stats", "evicted_keys");
    // Each identity: exact count kept, or evicted and back to zero.
    let mut kept = [0, 0]; // even, odd
    for i in 0..IDENTITIES {
        let r = limiter(&key(i)).peek(&mut con);
        assert!(r == counted(USED) || r == counted(0), "{}: {r:?}", key(i));
        if r == counted(USED) {
            kept[i % 2] += 1;
        }
    }
    let half = IDENTITIES / 2;
    assert!(
        kept[1] < half,
        "no idle limiter key evicted ({evicted} keys evicted)"
    );
    assert!(kept[0] > 0, "every recently used limiter key evicted");
    // CHECK keeps working under pressure (it evicts instead of failing).
    for i in 0..IDENTITIES {
        let r = limiter(&key(i)).check(&mut con);
        assert_eq!(r[0], 1, "{}: {r:?}", key(i));
    }
    eprintln!(
        "{kind} allkeys-lru: {evicted} keys evicted in all; limiter keys kept: {} of {half} just used, {} of {half} idle a day; {:?}",
        kept[0],
        kept[1],
        t.elapsed()
    );
}
