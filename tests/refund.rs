//! SLIDINGWINDOW.REFUND on real servers: replies and counts against the reference
//! (crates/testkit/src/reference.rs) over random CHECK/REFUND/PEEK/COUNTS sequences, the key's expiry
//! kept, no write when nothing is given back, replicas and AOF replay byte-identical,
//! concurrency, errors, INFO.

#[macro_use]
mod support;

use std::sync::{Arc, Barrier, OnceLock};
use support::random_calls::{generate, run_sequences, Call, Mix, Tally};
use support::*;

on_every_server!(
    refunds_match_the_reference,
    a_refund_gives_back_newest_first_and_keeps_the_expiry,
    a_refund_with_nothing_to_give_back_writes_and_replicates_nothing,
    replicas_and_aof_replay_hold_the_same_bytes_after_refunds,
    concurrent_checks_and_refunds_end_with_the_counts_they_imply,
    refund_errors_come_before_the_key_is_touched,
);

/// 10,000 sequences of CHECK, REFUND, PEEK and COUNTS, generated once for all servers.
fn sequences() -> &'static (Vec<Vec<Call>>, Tally) {
    static SEQUENCES: OnceLock<(Vec<Vec<Call>>, Tally)> = OnceLock::new();
    SEQUENCES.get_or_init(|| {
        let mix = Mix {
            sequences: 10_000,
            calls: 6,
            refund: true,
            windows_s: 10,
            windows_ms: 1000,
        };
        generate(&mix, 20)
    })
}

fn refunds_match_the_reference(kind: Kind) {
    let (sequences, tally) = sequences();
    // Every branch ran, many times: refunds that gave back all, part or nothing.
    assert!(
        tally.refunds > 10_000
            && tally.refunds_giving > tally.refunds / 5
            && tally.refunds_short > tally.refunds / 4
            && tally.denied > tally.calls / 10
            && tally.counts > 10_000,
        "{tally:?}"
    );
    let s = Server::start(kind, &[]);
    run_sequences(&mut s.connection(), kind, sequences);
    eprintln!("{kind}: {tally:?}: identical replies and counts");
}

fn a_refund_gives_back_newest_first_and_keeps_the_expiry(kind: Kind) {
    let s = Server::start(kind, &[]);
    let mut c = s.connection();
    let call = |now: u64| sw("r:1").limit(10).window(60).now(now);
    let counts = |c: &mut redis::Connection, now: u64| -> Vec<i64> {
        redis::cmd(COUNTS)
            .arg("r:1")
            .arg(60)
            .arg(now)
            .query(c)
            .unwrap()
    };
    // 3 in window 100 (t = 6000..6059), then 4 in window 101.
    call(6000).cost(3).check(&mut c);
    call(6060).cost(4).check(&mut c);
    let expiry = pexpiretime(&mut c, "r:1");
    assert!(expiry > 0);
    assert_eq!(counts(&mut c, 6070), [3, 4, 10]);
    // Cost 5 at 6070: 4 from the current window, then 1 from the previous one. The
    // reply is PEEK's right after: the estimate 2 * 50/60 + 0 = 1 (floored), plus 1.
    let reply: Vec<i64> = call(6070)
        .cost(5)
        .details()
        .cmd(REFUND)
        .query(&mut c)
        .unwrap();
    assert_eq!(counts(&mut c, 6070), [2, 0, 10]);
    let peek = call(6070).cost(5).details().peek(&mut c);
    assert_eq!(reply, peek, "REFUND answers as PEEK then does");
    assert_eq!(reply[..4], [1, 6, 10, 4], "{reply:?}");
    assert_eq!(
        pexpiretime(&mut c, "r:1"),
        expiry,
        "the expiry is not extended"
    );
    // More than is held: down to 0, never below; the key stays with zero counts.
    call(6070)
        .cost(50)
        .cmd(REFUND)
        .query::<Vec<i64>>(&mut c)
        .unwrap();
    assert_eq!(counts(&mut c, 6070), [0, 0, 10]);
    assert!(get_raw(&mut c, "r:1").is_some(), "a refunded key is kept");
    assert_eq!(pexpiretime(&mut c, "r:1"), expiry);
    // One window later, the refund takes from what is now the previous window.
    call(6130).cost(2).check(&mut c);
    assert_eq!(counts(&mut c, 6190), [2, 0, 10]);
    call(6190).cmd(REFUND).query::<Vec<i64>>(&mut c).unwrap();
    assert_eq!(counts(&mut c, 6190), [1, 0, 10]);
    // A clock behind the key's window is judged at its start: the same counts.
    call(6000).cmd(REFUND).query::<Vec<i64>>(&mut c).unwrap();
    assert_eq!(counts(&mut c, 6190), [0, 0, 10]);
    // A key without expiry keeps none.
    call(7000).cost(2).check(&mut c);
    let _: () = redis::cmd("PERSIST").arg("r:1").query(&mut c).unwrap();
    call(7000).cmd(REFUND).query::<Vec<i64>>(&mut c).unwrap();
    assert_eq!(counts(&mut c, 7000), [0, 1, 40]);
    assert_eq!(pexpiretime(&mut c, "r:1"), -1, "no expiry added");
    // A missing key: nothing written, PEEK's answer.
    let missing: Vec<i64> = sw("r:none")
        .limit(10)
        .window(60)
        .now(6000)
        .details()
        .cmd(REFUND)
        .query(&mut c)
        .unwrap();
    // The one request counted would weigh < 1 from 61 s on (floor(59/60) = 0).
    assert_eq!(missing, [1, 1, 10, 9, -1, 61]);
    assert_eq!(get_raw(&mut c, "r:none"), None);
    // Windows the call does not name keep their counts.
    let two = || {
        sw("r:2")
            .limit(10)
            .window(60)
            .now(6000)
            .and_limit(100, 3600)
    };
    two().cost(3).check(&mut c);
    sw("r:2")
        .limit(10)
        .window(60)
        .now(6000)
        .cmd(REFUND)
        .query::<Vec<i64>>(&mut c)
        .unwrap();
    let hour: Vec<i64> = redis::cmd(COUNTS)
        .arg("r:2")
        .arg(3600)
        .arg(6000)
        .query(&mut c)
        .unwrap();
    assert_eq!(hour, [0, 3, 2400], "the hour keeps its 3");
    let info = info(&mut c, "slidingwindow");
    assert_eq!(
        info_field(&info, "slidingwindow_refunds"),
        Some("7"),
        "{info}"
    );
    // Given back: 5 + 2 (of 50) + 1 + 1 + 1 + 0 + 1.
    assert_eq!(
        info_field(&info, "slidingwindow_refunded_units"),
        Some("11"),
        "{info}"
    );
}

fn a_refund_with_nothing_to_give_back_writes_and_replicates_nothing(kind: Kind) {
    let master = Server::start(kind, &["--repl-ping-replica-period", "3600"]);
    let replica = Server::start(kind, &[]);
    let mut m = master.connection();
    let mut r = replica.connection();
    replicate_from(&mut r, &master);
    let call = |key: &str, now: u64| sw(key).limit(10).window(60).now(now);
    call("n:1", 6000).check(&mut m);
    wait_replicas(&mut m, 1);
    let offset = || {
        info_u64(
            &mut master.connection(),
            "replication",
            "master_repl_offset",
        )
    };
    let before = offset();
    let bytes = get_raw(&mut m, "n:1");
    // A missing key, a window the key does not hold, a count two windows old.
    let nothing = [
        call("n:none", 6000),
        sw("n:1").limit(10).window(30).now(6000),
        call("n:1", 6125),
    ];
    for c in &nothing {
        c.cmd(REFUND).query::<Vec<i64>>(&mut m).unwrap();
    }
    // (No WAIT before reading it: WAIT's own REPLCONF GETACK moves the offset.)
    assert_eq!(offset(), before, "nothing was replicated");
    assert_eq!(get_raw(&mut m, "n:1"), bytes);
    // And a WATCH on the key is not broken by it.
    let mut w = master.connection();
    let _: () = redis::cmd("WATCH").arg("n:1").query(&mut w).unwrap();
    call("n:1", 6125)
        .cmd(REFUND)
        .query::<Vec<i64>>(&mut m)
        .unwrap();
    let exec: redis::Value = redis::pipe().atomic().cmd("PING").query(&mut w).unwrap();
    assert_ne!(
        exec,
        redis::Value::Nil,
        "a refund that gave nothing broke a WATCH"
    );
    // One that gives back does move the offset and does break a WATCH.
    let _: () = redis::cmd("WATCH").arg("n:1").query(&mut w).unwrap();
    call("n:1", 6010)
        .cmd(REFUND)
        .query::<Vec<i64>>(&mut m)
        .unwrap();
    let exec: Option<Vec<String>> = redis::pipe().atomic().cmd("PING").query(&mut w).unwrap();
    assert_eq!(exec, None, "a refund that gave back left a WATCH intact");
    assert!(offset() > before);
}

fn replicas_and_aof_replay_hold_the_same_bytes_after_refunds(kind: Kind) {
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
    let replica = Server::start(kind, &[]);
    let mut m = master.connection();
    let mut r = replica.connection();
    replica_of(&mut r, &master);
    let mut rng = Rng::new(kind as u64 + 20);
    let keys: Vec<String> = (0..30).map(|i| format!("a:{i}")).collect();
    let mut now = 1_780_000_000;
    for _ in 0..600 {
        now += rng.range(0, 5);
        let key = &keys[rng.range(0, 29) as usize];
        let call = sw(key.as_str())
            .limit(20)
            .window(600)
            .now(now)
            .and_limit(200, 3600)
            .cost(rng.range(1, 4));
        match rng.range(0, 2) {
            0 => {
                call.cmd(REFUND).query::<Vec<i64>>(&mut m).unwrap();
            }
            _ => {
                call.check(&mut m);
            }
        }
    }
    // Some keys without expiry, so a refund replicates a plain SET too.
    for key in &keys[..5] {
        let _: () = redis::cmd("PERSIST").arg(key).query(&mut m).unwrap();
        let call = sw(key.as_str()).limit(20).window(600).now(now);
        call.cmd(REFUND).query::<Vec<i64>>(&mut m).unwrap();
    }
    wait_link(&mut r);
    wait_replicas(&mut m, 1);
    let snapshot = |c: &mut redis::Connection| -> Vec<(Option<Vec<u8>>, i64)> {
        keys.iter()
            .map(|k| (get_raw(c, k), pexpiretime(c, k)))
            .collect()
    };
    let on_master = snapshot(&mut m);
    assert!(on_master.iter().all(|(v, _)| v.is_some()));
    assert!(
        on_master.iter().any(|(_, e)| *e == -1),
        "some keys without expiry"
    );
    assert_eq!(snapshot(&mut r), on_master, "the replica");
    master.restart();
    assert_eq!(snapshot(&mut master.connection()), on_master, "AOF replay");
}

fn concurrent_checks_and_refunds_end_with_the_counts_they_imply(kind: Kind) {
    let s = Server::start(kind, &[]);
    const THREADS: usize = 50;
    const ROUNDS: usize = 40;
    let call = || sw("hot").limit(1_000_000).window(3600).now(1_780_000_000);
    let barrier = Arc::new(Barrier::new(THREADS));
    let handles: Vec<_> = (0..THREADS)
        .map(|t| {
            let mut c = s.connection();
            let barrier = barrier.clone();
            std::thread::spawn(move || {
                barrier.wait();
                // Each refund follows this thread's own CHECK, so the count never has
                // less to give back than the refund asks: all of it is given back.
                for round in 0..ROUNDS {
                    let cost = 1 + ((t + round) % 3) as u64;
                    assert_eq!(call().cost(cost).check(&mut c)[0], 1);
                    if round % 2 == 0 {
                        call()
                            .cost(cost)
                            .cmd(REFUND)
                            .query::<Vec<i64>>(&mut c)
                            .unwrap();
                    }
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    let mut c = s.connection();
    // Each thread counted every round's cost and gave back the even rounds'.
    let kept: u64 = (0..THREADS)
        .flat_map(|t| {
            (0..ROUNDS)
                .filter(|r| r % 2 == 1)
                .map(move |r| 1 + ((t + r) % 3) as u64)
        })
        .sum();
    let counts: Vec<u64> = redis::cmd(COUNTS)
        .arg("hot")
        .arg(3600)
        .arg(1_780_000_000)
        .query(&mut c)
        .unwrap();
    assert_eq!(counts[1], kept, "{counts:?}");
    let refunds = info_u64(&mut c, "slidingwindow", "slidingwindow_refunds");
    assert_eq!(refunds as usize, THREADS * ROUNDS / 2);
}

fn refund_errors_come_before_the_key_is_touched(kind: Kind) {
    let s = Server::start(kind, &[]);
    let mut c = s.connection();
    sw("e:1").limit(10).window(60).now(6000).check(&mut c);
    let bytes = get_raw(&mut c, "e:1");
    let _: () = redis::cmd("SET")
        .arg("e:str")
        .arg("hello")
        .query(&mut c)
        .unwrap();
    let _: () = redis::cmd("LPUSH")
        .arg("e:list")
        .arg("x")
        .query(&mut c)
        .unwrap();
    // The same texts as CHECK's for the same arguments.
    for args in [
        vec!["e:1", "10"],
        vec!["e:1", "10", "0"],
        vec!["e:1", "x", "60"],
        vec!["e:1", "10", "60", "-1"],
        vec!["e:1", "10", "60", "COST", "0"],
        vec!["e:1", "10", "60", "LIMIT", "5", "60"],
        vec!["e:1", "10", "60", "FOO"],
        vec!["e:1", "10", "60", "MS", "MS"],
        vec!["e:str", "10", "60"],
        vec!["e:list", "10", "60"],
    ] {
        let refund = redis::cmd(REFUND).arg(&args).query::<Vec<i64>>(&mut c);
        let check = redis::cmd(CHECK).arg(&args).query::<Vec<i64>>(&mut c);
        let (Err(refund), Err(check)) = (refund, check) else {
            panic!("{args:?}: an error was expected");
        };
        let text = |e: &redis::RedisError| error_text(e).replace("slidingwindow.check", "");
        assert_eq!(
            text(&refund).replace("slidingwindow.refund", ""),
            text(&check),
            "{args:?}"
        );
    }
    assert_eq!(get_raw(&mut c, "e:1"), bytes);
    let s: String = redis::cmd("GET").arg("e:str").query(&mut c).unwrap();
    assert_eq!(s, "hello");
}
