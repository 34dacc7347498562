//! The library in a 3 masters + 3 replicas cluster, on every server: FUNCTION LOAD on
//! each primary (replicas copy it), 10,000 identities counted by FCALL and acknowledged
//! by WAIT, then a master SIGKILLed: once its replica is promoted, every identity keeps
//! its exact count (FCALL_RO PEEK), and CHECK allows exactly the rest of the limit.

#[path = "support/cluster.rs"]
mod cluster_support;
#[macro_use]
mod support;

use cluster_support::{key_slot, Cluster};
use std::collections::HashMap;
use std::time::Instant;
use support::lua::{load_library, wait_library};
use support::{replies, wait_until, Kind, PATIENCE};

on_every_server!(library_counts_exactly_through_a_failover);

const IDENTITIES: usize = 10_000;

fn key(i: usize) -> String {
    support::key("luafo:user", i)
}

/// Limits 2 to 6.
fn limit(i: usize) -> u64 {
    2 + (i % 5) as u64
}

/// Allowed CHECKs before the failover: the whole limit for even identities, one less
/// for odd ones.
fn used(i: usize) -> u64 {
    limit(i) - (i % 2) as u64
}

/// `FCALL[_RO] function 1 key limit 3600 5000000`.
fn call(function: &str, ro: bool, i: usize) -> redis::Cmd {
    let mut c = redis::cmd(if ro { "FCALL_RO" } else { "FCALL" });
    c.arg(function)
        .arg(1)
        .arg(key(i))
        .arg(limit(i))
        .arg(3600)
        .arg(5_000_000);
    c
}

fn check(i: usize) -> redis::Cmd {
    call("slidingwindow_check", false, i)
}

fn peek_after_use(i: usize) -> Vec<i64> {
    if used(i) < limit(i) {
        vec![1, used(i) as i64 + 1]
    } else {
        vec![0, limit(i) as i64]
    }
}

fn library_counts_exactly_through_a_failover(kind: Kind) {
    let t0 = Instant::now();
    let mut c = Cluster::start(kind, 3, 1);
    let shards = c.shards();
    assert_eq!(shards.len(), 3);
    for (m, replicas) in &shards {
        load_library(&mut c.connection(m.port));
        for r in replicas {
            let mut rc = c.connection(*r);
            let _: () = redis::cmd("READONLY").query(&mut rc).unwrap();
            wait_library(&mut rc);
        }
    }
    let mut by_master: HashMap<u16, Vec<usize>> = HashMap::new();
    for i in 0..IDENTITIES {
        let slot = key_slot(key(i).as_bytes());
        let m = shards.iter().find(|(m, _)| m.owns(slot)).unwrap().0.port;
        by_master.entry(m).or_default().push(i);
    }
    for (m, _) in &shards {
        let ids = &by_master[&m.port];
        let mut con = c.connection(m.port);
        con.set_read_timeout(Some(PATIENCE)).unwrap();
        for round in 0..6 {
            let todo: Vec<usize> = ids.iter().copied().filter(|&i| round < used(i)).collect();
            let mut pipe = redis::pipe();
            for &i in &todo {
                pipe.add_command(check(i));
            }
            let got: Vec<Vec<i64>> = pipe.query(&mut con).expect("FCALL on master");
            for (&i, r) in todo.iter().zip(&replies(got, todo.len(), "FCALL")) {
                assert_eq!(r, &vec![1, round as i64 + 1], "{} round {round}", key(i));
            }
        }
        support::wait_replicas(&mut con, 1);
    }
    let written: u64 = (0..IDENTITIES).map(used).sum();
    eprintln!(
        "{kind}: {IDENTITIES} identities, {written} allowed FCALLs acknowledged; {:?}",
        t0.elapsed()
    );

    let (victim, heir) = (shards[0].0.port, shards[0].1[0]);
    let t = Instant::now();
    c.kill(victim);
    wait_until(PATIENCE, "the replica's promotion", || {
        Ok(c.role(heir) == "master")
    });
    c.wait_converged();
    assert_eq!(
        c.owner(key_slot(key(by_master[&victim][0]).as_bytes())),
        heir
    );
    eprintln!(
        "{kind}: master {victim} killed, {heir} promoted, cluster ok in {:?}",
        t.elapsed()
    );

    // Every identity, through its shard's master now: the exact count, by FCALL_RO.
    let mut owners: HashMap<u16, Vec<usize>> = HashMap::new();
    for i in 0..IDENTITIES {
        owners
            .entry(c.owner(key_slot(key(i).as_bytes())))
            .or_default()
            .push(i);
    }
    for (port, ids) in &owners {
        let mut con = c.connection(*port);
        let mut pipe = redis::pipe();
        for &i in ids {
            pipe.add_command(call("slidingwindow_peek", true, i));
        }
        let got: Vec<Vec<i64>> = pipe.query(&mut con).expect("FCALL_RO PEEK");
        for (&i, r) in ids.iter().zip(&replies(got, ids.len(), "PEEK")) {
            assert_eq!(r, &peek_after_use(i), "PEEK {} on {port}", key(i));
        }
        // Then two CHECKs: odd identities get exactly one more, then all are denied.
        let mut pipe = redis::pipe();
        for &i in ids {
            pipe.add_command(check(i)).add_command(check(i));
        }
        let got: Vec<Vec<i64>> = pipe.query(&mut con).expect("FCALL CHECK");
        let got = replies(got, 2 * ids.len(), "CHECK");
        for (n, &i) in ids.iter().enumerate() {
            let l = limit(i) as i64;
            let first = if used(i) < limit(i) {
                vec![1, l]
            } else {
                vec![0, l]
            };
            assert_eq!(got[2 * n], first, "CHECK {}", key(i));
            assert_eq!(got[2 * n + 1], vec![0, l], "second CHECK {}", key(i));
        }
    }
    eprintln!("{kind}: library failover test done in {:?}", t0.elapsed());
}
