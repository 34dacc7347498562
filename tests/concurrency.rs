//! Atomicity under concurrency, on Redis 7.0 and Valkey 8.1, with a replica (REPLICAOF)
//! and the AOF (appendfsync always) attached to the master:
//!
//! 1. 50 connections (threads) hammer one identity with limit 1000 in one window, some
//!    with direct CHECKs, some inside MULTI/EXEC, some through EVAL: exactly 1000 are
//!    allowed, and the allowed replies' counts are exactly 1..=1000, once each.
//! 2. The same 400-step sequence of requests (time moving forward and backward, window
//!    and unit changes, costs, DETAILS, PEEKs, over-limit costs) gives the same replies
//!    and the same state bytes after every step whether sent directly, inside MULTI/EXEC
//!    or from a Lua script.
//! 3. The replica, and the master restarted from its AOF, hold the same keys with the
//!    same bytes (GET) and the same absolute expiry (PEXPIRETIME) as the master.

mod support;

use redis::Value;
use std::collections::BTreeMap;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};
use support::{Kind, Rng, Server};

const THREADS: usize = 50;
const PER_THREAD: usize = 40;
const LIMIT: i64 = 1000;
const WINDOW: &str = "3600";
const NOW: &str = "9000000";
const SCRIPT: &str = "return redis.call('SLIDINGWINDOW.CHECK', KEYS[1], ARGV[1], ARGV[2], ARGV[3])";
const SCRIPT_ANY: &str = "return redis.call(ARGV[1], KEYS[1], unpack(ARGV, 2))";

#[test]
fn concurrency_redis() {
    concurrency(Kind::Redis);
}

#[test]
fn concurrency_valkey() {
    concurrency(Kind::Valkey);
}

fn info_line(con: &mut redis::Connection, section: &str, field: &str) -> String {
    let info: String = redis::cmd("INFO").arg(section).query(con).expect("INFO");
    info.lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .unwrap_or("")
        .trim()
        .to_string()
}

fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// One thread's CHECKs on the hot identity, in the thread's mode; the allowed flags and
/// counts of all replies.
fn hammer(port: u16, t: usize, barrier: Arc<Barrier>) -> Vec<(i64, i64)> {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}/")).unwrap();
    let mut con = client
        .get_connection_with_timeout(Duration::from_secs(5))
        .unwrap();
    let lim = LIMIT.to_string();
    barrier.wait();
    let mut out = Vec::with_capacity(PER_THREAD);
    match t % 3 {
        0 => {
            for _ in 0..PER_THREAD {
                let r: Vec<i64> = redis::cmd("SLIDINGWINDOW.CHECK")
                    .arg("hot")
                    .arg(&lim)
                    .arg(WINDOW)
                    .arg(NOW)
                    .query(&mut con)
                    .unwrap();
                out.push((r[0], r[1]));
            }
        }
        1 => {
            for _ in 0..PER_THREAD / 5 {
                let mut pipe = redis::pipe();
                pipe.atomic();
                for _ in 0..5 {
                    pipe.cmd("SLIDINGWINDOW.CHECK")
                        .arg("hot")
                        .arg(&lim)
                        .arg(WINDOW)
                        .arg(NOW);
                }
                let rs: Vec<Vec<i64>> = pipe.query(&mut con).unwrap();
                out.extend(rs.iter().map(|r| (r[0], r[1])));
            }
        }
        _ => {
            for _ in 0..PER_THREAD {
                let r: Vec<i64> = redis::cmd("EVAL")
                    .arg(SCRIPT)
                    .arg(1)
                    .arg("hot")
                    .arg(&lim)
                    .arg(WINDOW)
                    .arg(NOW)
                    .query(&mut con)
                    .unwrap();
                out.push((r[0], r[1]));
            }
        }
    }
    out
}

/// A deterministic sequence of requests (arguments after the key), all valid.
fn sequence() -> Vec<Vec<String>> {
    let mut rng = Rng::new(0x5EED_0005);
    let mut now: i64 = 100_000;
    let mut out = vec![];
    for _ in 0..400 {
        let millis = rng.range(0, 9) == 0;
        let window: u64 = [10, 10, 10, 60, 7][rng.range(0, 4) as usize];
        now += [0, 0, 1, 1, 2, 5, 9, 25, -3, -30][rng.range(0, 9) as usize];
        now = now.max(0);
        let limit = [5, 20, 20, 100][rng.range(0, 3) as usize];
        let cost = [1, 1, 1, 1, 2, 3, 200][rng.range(0, 6) as usize];
        let command = if rng.range(0, 4) == 0 {
            "SLIDINGWINDOW.PEEK"
        } else {
            "SLIDINGWINDOW.CHECK"
        };
        let mut args = vec![command.to_string(), limit.to_string()];
        if millis {
            args.push((window * 1000).to_string());
            args.push((now * 1000 + rng.range(0, 999) as i64).to_string());
        } else {
            args.push(window.to_string());
            args.push(now.to_string());
        }
        let mut options: Vec<String> = vec![];
        if cost != 1 || rng.range(0, 3) == 0 {
            options.push(format!("COST {cost}"));
        }
        if millis {
            options.push("MS".into());
        }
        if rng.range(0, 1) == 0 {
            options.push("DETAILS".into());
        }
        if options.len() > 1 && rng.range(0, 1) == 0 {
            options.reverse();
        }
        for o in options {
            args.extend(o.split(' ').map(str::to_string));
        }
        out.push(args);
    }
    out
}

/// Runs the sequence on `key` in one of three ways; each step's reply and the key's
/// bytes after it.
fn run_sequence(
    con: &mut redis::Connection,
    key: &str,
    mode: &str,
    seq: &[Vec<String>],
) -> Vec<(Value, Option<Vec<u8>>)> {
    let mut out = vec![];
    for chunk in seq.chunks(10) {
        let mut pipe = redis::pipe();
        if mode == "multi" {
            pipe.atomic();
        }
        for args in chunk {
            if mode == "lua" {
                pipe.cmd("EVAL").arg(SCRIPT_ANY).arg(1).arg(key).arg(args);
            } else {
                pipe.cmd(&args[0]).arg(key).arg(&args[1..]);
            }
            pipe.cmd("GET").arg(key);
        }
        let values: Vec<Value> = pipe.query(con).unwrap_or_else(|e| panic!("{mode}: {e}"));
        for pair in values.chunks(2) {
            let state: Option<Vec<u8>> = redis::from_redis_value(pair[1].clone()).unwrap();
            out.push((pair[0].clone(), state));
        }
    }
    out
}

/// Every key with its bytes and absolute expiry in ms.
fn snapshot(con: &mut redis::Connection) -> BTreeMap<Vec<u8>, (Vec<u8>, i64)> {
    let keys: Vec<Vec<u8>> = redis::cmd("KEYS").arg("*").query(con).unwrap();
    let mut out = BTreeMap::new();
    for k in keys {
        let v: Vec<u8> = redis::cmd("GET").arg(&k).query(con).unwrap();
        let at: i64 = redis::cmd("PEXPIRETIME").arg(&k).query(con).unwrap();
        out.insert(k, (v, at));
    }
    out
}

fn concurrency(kind: Kind) {
    let t0 = Instant::now();
    let mut master = Server::start(
        kind,
        &[
            "--appendonly",
            "yes",
            "--appendfsync",
            "always",
            "--repl-diskless-sync-delay",
            "0",
        ],
    );
    let port = master.port.to_string();
    let replica = Server::start(kind, &["--replicaof", "127.0.0.1", &port]);
    let mut rc = replica.connection();
    wait_for("the replica's sync", || {
        info_line(&mut rc, "replication", "master_link_status") == "up"
            && info_line(&mut rc, "replication", "master_sync_in_progress") == "0"
    });

    // 1. 50 connections on one identity.
    let barrier = Arc::new(Barrier::new(THREADS));
    let handles: Vec<_> = (0..THREADS)
        .map(|t| {
            let b = barrier.clone();
            let p = master.port;
            std::thread::spawn(move || hammer(p, t, b))
        })
        .collect();
    let replies: Vec<(i64, i64)> = handles
        .into_iter()
        .flat_map(|h| h.join().expect("hammer thread"))
        .collect();
    assert_eq!(replies.len(), THREADS * PER_THREAD);
    let mut counts: Vec<i64> = replies.iter().filter(|r| r.0 == 1).map(|r| r.1).collect();
    counts.sort_unstable();
    assert_eq!(counts.len() as i64, LIMIT, "{kind:?}: allowed");
    assert_eq!(
        counts,
        (1..=LIMIT).collect::<Vec<_>>(),
        "{kind:?}: each count once"
    );
    assert!(
        replies.iter().filter(|r| r.0 == 0).all(|r| r.1 == LIMIT),
        "{kind:?}: denied replies"
    );
    let mut mc = master.connection();
    let hot: Vec<i64> = support::peek(&mut mc, &["hot", &LIMIT.to_string(), WINDOW, NOW]);
    assert_eq!(hot, vec![0, LIMIT]);
    eprintln!(
        "{kind:?}: {THREADS} connections x {PER_THREAD} CHECKs (direct, MULTI/EXEC, EVAL) on one identity: exactly {LIMIT} allowed; {:?}",
        t0.elapsed()
    );

    // 2. Direct, MULTI/EXEC and Lua agree step by step.
    let seq = sequence();
    let direct = run_sequence(&mut mc, "eq:direct", "direct", &seq);
    let multi = run_sequence(&mut mc, "eq:multi", "multi", &seq);
    let lua = run_sequence(&mut mc, "eq:lua", "lua", &seq);
    let mut allowed = 0;
    for (step, args) in seq.iter().enumerate() {
        assert!(
            matches!(direct[step].0, Value::Array(_)),
            "step {step} {args:?}: {:?}",
            direct[step].0
        );
        assert_eq!(
            direct[step], multi[step],
            "step {step} {args:?}: direct vs MULTI"
        );
        assert_eq!(
            direct[step], lua[step],
            "step {step} {args:?}: direct vs Lua"
        );
        if let Value::Array(a) = &direct[step].0 {
            if args[0] == "SLIDINGWINDOW.CHECK" && a[0] == Value::Int(1) {
                allowed += 1;
            }
        }
    }
    assert!(
        allowed > 50 && allowed < seq.len(),
        "a dull sequence: {allowed} allowed"
    );
    eprintln!(
        "{kind:?}: {} steps ({allowed} allowed CHECKs) identical direct / MULTI / Lua",
        seq.len()
    );

    // 3. The replica and the AOF hold what the master holds.
    let _: () = redis::cmd("SET")
        .arg("marker")
        .arg("x")
        .query(&mut mc)
        .unwrap();
    let acked: i64 = redis::cmd("WAIT")
        .arg(1)
        .arg(10_000)
        .query(&mut mc)
        .unwrap();
    assert_eq!(acked, 1, "WAIT");
    let _: i64 = redis::cmd("DEL").arg("marker").query(&mut mc).unwrap();
    let acked: i64 = redis::cmd("WAIT")
        .arg(1)
        .arg(10_000)
        .query(&mut mc)
        .unwrap();
    assert_eq!(acked, 1, "WAIT");
    let on_master = snapshot(&mut mc);
    assert_eq!(
        on_master.len(),
        4,
        "{:?}",
        on_master.keys().collect::<Vec<_>>()
    );
    for (k, (v, at)) in &on_master {
        assert!(v[0] == 0xA1 || v[0] == 0xA2, "{k:?}: version byte {}", v[0]);
        assert!(*at > 0, "{k:?} has no expiry");
    }
    assert_eq!(
        snapshot(&mut rc),
        on_master,
        "{kind:?}: replica differs from master"
    );
    drop(mc);
    master.restart(); // SIGKILL, then load the AOF
    let mut mc = master.connection();
    wait_for("the AOF load", || {
        let info: String = redis::cmd("INFO")
            .arg("persistence")
            .query(&mut mc)
            .unwrap();
        info.lines().any(|l| l.trim() == "loading:0")
    });
    assert_eq!(
        snapshot(&mut mc),
        on_master,
        "{kind:?}: AOF differs from master"
    );
    eprintln!(
        "{kind:?}: replica and AOF restart hold the same {} keys (bytes and PXAT); {:?}",
        on_master.len(),
        t0.elapsed()
    );
}
