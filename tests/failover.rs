//! Failover in a 3 masters + 3 replicas cluster, on every server.
//!
//! Allowed CHECKs are written on every master and acknowledged by its replica with
//! `WAIT 1 0` on the same connection. Then:
//!
//! 1. one master is killed with SIGKILL; once its replica has been promoted and the
//!    cluster is ok again, every identity keeps its exact count: PEEK gives it, and
//!    CHECK allows exactly the rest of the limit, never more;
//! 2. the killed node comes back (empty, no persistence), rejoins as a replica of the
//!    promoted one and serves the same counts in READONLY mode;
//! 3. a manual `CLUSTER FAILOVER` on another shard's replica: same checks.

#[path = "support/cluster.rs"]
mod cluster_support;
#[macro_use]
mod support;

use cluster_support::{key_slot, Cluster};
use std::collections::HashMap;
use std::time::Instant;
use support::{replies, sw, wait_until, Kind, Sw, CHECK, PATIENCE, PEEK};

on_every_server!(failover);

const IDENTITIES: usize = 3_000;
const WINDOW: u64 = 3600;
const NOW: u64 = 5_000_000;

fn key(i: usize) -> String {
    support::key("fo:user", i)
}

/// Limits 2 to 6.
fn limit(i: usize) -> u64 {
    2 + (i % 5) as u64
}

/// Allowed CHECKs sent before the failovers: the whole limit for even identities,
/// one less for odd ones (so exact counts are checked, not only "at the limit").
fn used(i: usize) -> u64 {
    limit(i) - (i % 2) as u64
}

/// The `i`th identity's request.
fn limiter(i: usize) -> Sw {
    sw(key(i)).limit(limit(i)).window(WINDOW).now(NOW)
}

/// What PEEK answers once `used(i)` requests are counted: allowed with count
/// estimate + 1, or denied at the limit.
fn peek_after_use(i: usize) -> Vec<i64> {
    if used(i) < limit(i) {
        vec![1, used(i) as i64 + 1]
    } else {
        vec![0, limit(i) as i64]
    }
}

/// Writes `used(i)` allowed CHECKs for every identity owned by `master`, plus one denied
/// CHECK for those at the limit, then `WAIT 1 0` on the same connection.
fn write_and_wait(c: &Cluster, master: u16, ids: &[usize]) {
    let mut con = c.connection(master);
    con.set_read_timeout(Some(PATIENCE)).unwrap();
    let max = ids.iter().map(|&i| used(i)).max().unwrap();
    for round in 0..=max {
        let todo: Vec<usize> = ids
            .iter()
            .copied()
            .filter(|&i| round < used(i) || (round == used(i) && used(i) == limit(i)))
            .collect();
        let mut pipe = redis::pipe();
        for &i in &todo {
            pipe.add_command(limiter(i).cmd(CHECK));
        }
        let got: Vec<Vec<i64>> = pipe.query(&mut con).expect("CHECK on master");
        for (&i, r) in todo.iter().zip(&replies(got, todo.len(), "CHECK")) {
            let expect = if round < used(i) {
                vec![1, round as i64 + 1]
            } else {
                vec![0, limit(i) as i64]
            };
            assert_eq!(r, &expect, "{} round {round}", key(i));
        }
    }
    // The replica has acknowledged everything this connection wrote.
    support::wait_replicas(&mut con, 1);
}

/// Every identity keeps its exact count: PEEK says so, CHECK allows exactly the rest.
fn verify_all(c: &Cluster, what: &str) {
    let client = c.client(false);
    let mut con = client.get_connection().expect("cluster connection");
    let all: Vec<usize> = (0..IDENTITIES).collect();
    for chunk in all.chunks(3_000) {
        let mut pipe = redis::cluster::cluster_pipe();
        for &i in chunk {
            pipe.add_command(limiter(i).cmd(PEEK));
        }
        let got: Vec<Vec<i64>> = pipe
            .query(&mut con)
            .unwrap_or_else(|e| panic!("{what}: PEEK: {e}"));
        for (&i, r) in chunk.iter().zip(&replies(got, chunk.len(), what)) {
            assert_eq!(r, &peek_after_use(i), "{what}: PEEK {}", key(i));
        }
    }
}

/// The final CHECKs: odd identities get exactly one more, then everyone is denied.
fn use_up(c: &Cluster, what: &str) {
    let client = c.client(false);
    let mut con = client.get_connection().expect("cluster connection");
    let mut pipe = redis::cluster::cluster_pipe();
    for i in 0..IDENTITIES {
        for _ in 0..2 {
            pipe.add_command(limiter(i).cmd(CHECK));
        }
    }
    let got: Vec<Vec<i64>> = pipe
        .query(&mut con)
        .unwrap_or_else(|e| panic!("{what}: CHECK: {e}"));
    let replies = replies(got, 2 * IDENTITIES, what);
    for i in 0..IDENTITIES {
        let l = limit(i) as i64;
        let first = if used(i) < limit(i) {
            vec![1, l]
        } else {
            vec![0, l]
        };
        assert_eq!(replies[2 * i], first, "{what}: CHECK {}", key(i));
        assert_eq!(
            replies[2 * i + 1],
            vec![0, l],
            "{what}: second CHECK {}",
            key(i)
        );
    }
}

fn failover(kind: Kind) {
    let t0 = Instant::now();
    let mut c = Cluster::start(kind, 3, 1);
    let shards = c.shards();
    assert_eq!(shards.len(), 3);
    let mut by_master: HashMap<u16, Vec<usize>> = HashMap::new();
    for i in 0..IDENTITIES {
        let slot = key_slot(key(i).as_bytes());
        let m = shards.iter().find(|(m, _)| m.owns(slot)).unwrap().0.port;
        by_master.entry(m).or_default().push(i);
    }
    for (m, _) in &shards {
        write_and_wait(&c, m.port, &by_master[&m.port]);
    }
    let written: u64 = (0..IDENTITIES).map(used).sum();
    eprintln!(
        "{kind}: {IDENTITIES} identities, {written} allowed CHECKs acknowledged by WAIT; {:?}",
        t0.elapsed()
    );

    // 1. SIGKILL a master; its replica takes over.
    let (victim, victim_replicas) = (shards[0].0.clone(), shards[0].1.clone());
    let heir = victim_replicas[0];
    let t = Instant::now();
    c.kill(victim.port);
    wait_until(PATIENCE, "the replica's promotion", || {
        Ok(c.role(heir) == "master")
    });
    c.wait_converged();
    let promoted_in = t.elapsed();
    assert_eq!(
        c.owner(key_slot(key(by_master[&victim.port][0]).as_bytes())),
        heir
    );
    verify_all(&c, "after SIGKILL failover");
    eprintln!(
        "{kind}: master {} killed, replica {heir} promoted and cluster ok in {promoted_in:?}; {} identities on it intact",
        victim.port,
        by_master[&victim.port].len()
    );

    // 2. The killed node comes back empty and becomes the new master's replica.
    let t = Instant::now();
    c.nodes
        .iter_mut()
        .find(|s| s.port == victim.port)
        .unwrap()
        .restart();
    c.dead.remove(&victim.port);
    c.wait_converged();
    assert_eq!(c.role(victim.port), "slave");
    c.wait_replicas_caught_up();
    let mut rc = c.connection(victim.port);
    let _: () = redis::cmd("READONLY").query(&mut rc).unwrap();
    let ids = &by_master[&victim.port];
    let mut pipe = redis::pipe();
    for &i in ids {
        pipe.add_command(limiter(i).cmd(PEEK));
    }
    let got: Vec<Vec<i64>> = pipe.query(&mut rc).expect("PEEK on the rejoined node");
    for (&i, r) in ids.iter().zip(&replies(got, ids.len(), "rejoined")) {
        assert_eq!(r, &peek_after_use(i), "rejoined node: PEEK {}", key(i));
    }
    eprintln!(
        "{kind}: the killed node rejoined as a replica and resynced in {:?}",
        t.elapsed()
    );

    // 3. Manual failover on another shard.
    let (m1, r1) = (shards[1].0.port, shards[1].1[0]);
    let t = Instant::now();
    let _: () = redis::cmd("CLUSTER")
        .arg("FAILOVER")
        .query(&mut c.connection(r1))
        .expect("CLUSTER FAILOVER");
    wait_until(PATIENCE, "the manual failover", || {
        Ok(c.role(r1) == "master" && c.role(m1) == "slave")
    });
    c.wait_converged();
    assert_eq!(c.owner(key_slot(key(by_master[&m1][0]).as_bytes())), r1);
    verify_all(&c, "after CLUSTER FAILOVER");
    eprintln!(
        "{kind}: CLUSTER FAILOVER on {r1} done and cluster ok in {:?}",
        t.elapsed()
    );

    // No identity gets more than its limit, whichever node now serves it.
    use_up(&c, "after both failovers");
    eprintln!("{kind}: failover test done in {:?}", t0.elapsed());
}
