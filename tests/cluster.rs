//! Redis Cluster (3 masters + 3 replicas), on Redis 7.0 and Valkey 8.1:
//!
//! * 10,000 identities driven through the cluster-aware client (pipelined, explicit
//!   `now`): each gets exactly its limit, and no redirection or cross-slot error ever
//!   reaches this code;
//! * PEEK is served by replicas in READONLY mode: directly on each replica (refused with
//!   MOVED before READONLY, right counts after, INFO commandstats on the replica counts
//!   the PEEKs and the master's does not) and through the client routed to replicas;
//! * resharding (`--cluster reshard`, MIGRATE underneath) of slots holding live
//!   identities, with CHECKs and PEEKs running during the move: the state bytes, the
//!   counts and the denials at the limit survive.

#[path = "support/cluster.rs"]
mod cluster_support;
mod support;

use cluster_support::{key_slot, Cluster};
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
use redis::Value;
use std::collections::HashMap;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;
use support::Kind;

const IDENTITIES: usize = 10_000;
const WINDOW: &str = "3600";
/// An explicit time (seconds) in the middle of a window: every reply is deterministic.
const NOW: &str = "1000000";
const PIPELINE: usize = 5_000;

fn key(i: usize) -> String {
    format!("sw:user:{i}")
}

/// Limits 1 to 7.
fn limit(i: usize) -> u64 {
    1 + (i % 7) as u64
}

fn ints(v: &Value) -> Vec<i64> {
    redis::from_redis_value(v.clone())
        .unwrap_or_else(|e| panic!("not an integer array: {v:?}: {e}"))
}

#[test]
fn cluster_redis() {
    drive_peek_reshard(Kind::Redis);
}

#[test]
fn cluster_valkey() {
    drive_peek_reshard(Kind::Valkey);
}

fn drive_peek_reshard(kind: Kind) {
    let t0 = Instant::now();
    let c = Cluster::start(kind, 3, 1);
    let shards = c.shards();
    assert_eq!(shards.len(), 3, "{shards:?}");
    assert!(shards.iter().all(|(_, r)| r.len() == 1), "{shards:?}");

    // Our slot function agrees with the servers'.
    let mut any = c.connection(shards[0].0.port);
    for i in (0..IDENTITIES).step_by(997) {
        let s: u16 = redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(key(i))
            .query(&mut any)
            .unwrap();
        assert_eq!(s, key_slot(key(i).as_bytes()));
    }

    // 1. Every identity gets exactly its limit, through the cluster client.
    let client = c.client(true);
    let mut con = client.get_connection().expect("cluster connection");
    let rounds = 7 + 2;
    let mut sent = 0usize;
    for round in 0..rounds {
        let todo: Vec<usize> = (0..IDENTITIES)
            .filter(|&i| (round as u64) < limit(i) + 2)
            .collect();
        for chunk in todo.chunks(PIPELINE) {
            let mut pipe = redis::cluster::cluster_pipe();
            for &i in chunk {
                let l = limit(i).to_string();
                pipe.cmd("SLIDINGWINDOW.CHECK")
                    .arg(key(i))
                    .arg(&l)
                    .arg(WINDOW)
                    .arg(NOW);
                if round == rounds - 1 {
                    pipe.arg("DETAILS");
                }
            }
            // Any MOVED/ASK/CROSSSLOT that the client did not absorb would be an Err here.
            let replies: Vec<Value> = pipe
                .query(&mut con)
                .unwrap_or_else(|e| panic!("round {round}: {e}"));
            sent += chunk.len();
            for (&i, v) in chunk.iter().zip(&replies) {
                let r = ints(v);
                let l = limit(i) as i64;
                let expect = if (round as i64) < l {
                    [1, round as i64 + 1]
                } else {
                    [0, l]
                };
                assert_eq!(r[..2], expect, "{} limit {l} round {round}", key(i));
                if round == rounds - 1 {
                    // DETAILS: limit, remaining 0, retry_after > 0, reset_after > 0.
                    assert_eq!(r.len(), 6);
                    assert_eq!((r[2], r[3]), (l, 0));
                    assert!(r[4] > 0 && r[5] > 0, "{r:?}");
                }
            }
        }
    }
    let allowed_total: u64 = (0..IDENTITIES).map(limit).sum();
    eprintln!(
        "{kind:?}: {IDENTITIES} identities, {sent} CHECKs ({allowed_total} allowed) through the cluster client in {:?}",
        t0.elapsed()
    );

    // 2. PEEK on replicas.
    c.wait_replicas_caught_up();
    let mut by_master: HashMap<u16, Vec<usize>> = HashMap::new();
    for i in 0..IDENTITIES {
        by_master
            .entry(c.owner(key_slot(key(i).as_bytes())))
            .or_default()
            .push(i);
    }
    let mut replica_peeks_sent: HashMap<u16, u64> = HashMap::new();
    for (m, reps) in &shards {
        let ids = &by_master[&m.port];
        let replica = reps[0];
        let master_peeks_before = c.command_calls(m.port, "slidingwindow.peek");
        let replica_peeks_before = c.command_calls(replica, "slidingwindow.peek");
        let mut rc = c.connection(replica);
        // Without READONLY the replica redirects to its master.
        let err = support::sw(
            &mut rc,
            "SLIDINGWINDOW.PEEK",
            &[&key(ids[0]), "1", WINDOW, NOW],
        )
        .unwrap_err();
        assert_eq!(err.code(), Some("MOVED"), "{err}");
        let _: () = redis::cmd("READONLY").query(&mut rc).unwrap();
        for chunk in ids.chunks(PIPELINE) {
            let mut pipe = redis::pipe();
            for &i in chunk {
                pipe.cmd("SLIDINGWINDOW.PEEK")
                    .arg(key(i))
                    .arg(limit(i))
                    .arg(WINDOW)
                    .arg(NOW);
            }
            let replies: Vec<Vec<i64>> = pipe.query(&mut rc).expect("PEEK on replica");
            for (&i, r) in chunk.iter().zip(&replies) {
                assert_eq!(
                    r,
                    &vec![0, limit(i) as i64],
                    "PEEK {} on replica {replica}",
                    key(i)
                );
            }
        }
        // Same bytes as the master, for a sample.
        let mut mc = c.connection(m.port);
        for &i in ids.iter().step_by(25) {
            let on_master = support::get_raw(&mut mc, &key(i)).expect("state on master");
            assert_eq!(on_master[0], 0xA1);
            assert_eq!(support::get_raw(&mut rc, &key(i)), Some(on_master));
        }
        let served = c.command_calls(replica, "slidingwindow.peek") - replica_peeks_before;
        assert!(
            served >= ids.len() as u64,
            "replica {replica} counted {served} PEEKs, sent {}",
            ids.len()
        );
        assert_eq!(
            c.command_calls(m.port, "slidingwindow.peek"),
            master_peeks_before,
            "master served PEEKs"
        );
        replica_peeks_sent.insert(replica, served);
    }
    // Through the cluster client, routed to replicas (the client does not know PEEK is
    // read-only, so the route is explicit).
    let before: u64 = shards
        .iter()
        .map(|(_, r)| c.command_calls(r[0], "slidingwindow.peek"))
        .sum();
    let sample: Vec<usize> = (0..IDENTITIES).step_by(20).collect();
    for &i in &sample {
        let mut cmd = redis::cmd("SLIDINGWINDOW.PEEK");
        cmd.arg(key(i))
            .arg(limit(i))
            .arg(WINDOW)
            .arg(NOW)
            .arg("DETAILS");
        let route = RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(Route::new(
            key_slot(key(i).as_bytes()),
            SlotAddr::ReplicaRequired,
        )));
        let v = con
            .route_command(&cmd, route)
            .unwrap_or_else(|e| panic!("routed PEEK {}: {e}", key(i)));
        let r = ints(&v);
        assert_eq!(
            r[..4],
            [0, limit(i) as i64, limit(i) as i64, 0],
            "{}",
            key(i)
        );
    }
    let after: u64 = shards
        .iter()
        .map(|(_, r)| c.command_calls(r[0], "slidingwindow.peek"))
        .sum();
    assert!(
        after - before >= sample.len() as u64,
        "replicas served {} of {}",
        after - before,
        sample.len()
    );
    eprintln!(
        "{kind:?}: replicas served {:?} direct READONLY PEEKs + {} routed ones; {:?} so far",
        replica_peeks_sent,
        after - before,
        t0.elapsed()
    );

    // 3. Resharding: slots with live identities move from one master to another.
    reshard(&c, &client, &shards, t0);
}

fn snapshot(con: &mut redis::cluster::ClusterConnection) -> Vec<Vec<u8>> {
    let mut out = Vec::with_capacity(IDENTITIES);
    let all: Vec<usize> = (0..IDENTITIES).collect();
    for chunk in all.chunks(PIPELINE) {
        let mut pipe = redis::cluster::cluster_pipe();
        for &i in chunk {
            pipe.cmd("GET").arg(key(i));
        }
        let got: Vec<Option<Vec<u8>>> = pipe.query(con).expect("GET");
        out.extend(got.into_iter().map(|g| g.expect("state present")));
    }
    out
}

fn reshard(
    c: &Cluster,
    client: &redis::cluster::ClusterClient,
    shards: &[(cluster_support::NodeEntry, Vec<u16>)],
    t0: Instant,
) {
    let kind = c.kind;
    let mut con = client.get_connection().unwrap();
    let before = snapshot(&mut con);
    let (from, to) = (&shards[0].0, &shards[1].0);
    let moving = 1000usize;
    // redis-cli moves the lowest-numbered slots of the source first.
    let mut from_slots: Vec<u16> = from.slots.iter().flat_map(|&(a, b)| a..=b).collect();
    from_slots.sort_unstable();
    let moved_slots: Vec<u16> = from_slots[..moving].to_vec();
    let moved_ids: Vec<usize> = (0..IDENTITIES)
        .filter(|&i| moved_slots.contains(&key_slot(key(i).as_bytes())))
        .collect();
    assert!(
        moved_ids.len() > 300,
        "only {} identities in the moved slots",
        moved_ids.len()
    );

    // Traffic during the move: CHECKs at the limit must stay denied, PEEKs must agree.
    let stop = Arc::new(AtomicBool::new(false));
    let traffic = {
        let stop = stop.clone();
        let client = client.clone();
        let ids = moved_ids.clone();
        std::thread::spawn(move || -> Result<u64, String> {
            let mut con = client.get_connection().map_err(|e| e.to_string())?;
            let mut ops = 0u64;
            let mut n = 0usize;
            // One command at a time: the client follows MOVED and ASK for single
            // commands (its sync pipelines return ASK as an error).
            while !stop.load(Ordering::SeqCst) && ops < 200_000 {
                let i = ids[n % ids.len()];
                n += 7;
                for command in ["SLIDINGWINDOW.CHECK", "SLIDINGWINDOW.PEEK"] {
                    let r: Vec<i64> = redis::cmd(command)
                        .arg(key(i))
                        .arg(limit(i))
                        .arg(WINDOW)
                        .arg(NOW)
                        .query(&mut con)
                        .map_err(|e| format!("{command} {} during reshard: {e}", key(i)))?;
                    if r != vec![0, limit(i) as i64] {
                        return Err(format!("{command} {} during reshard: {r:?}", key(i)));
                    }
                    ops += 1;
                }
            }
            Ok(ops)
        })
    };
    let t = Instant::now();
    let out = Command::new(cluster_support::cli(kind))
        .args(["--cluster", "reshard", &format!("127.0.0.1:{}", from.port)])
        .args(["--cluster-from", &from.id, "--cluster-to", &to.id])
        .args(["--cluster-slots", &moving.to_string(), "--cluster-yes"])
        .output()
        .expect("run reshard");
    let took = t.elapsed();
    stop.store(true, Ordering::SeqCst);
    let ops = traffic.join().unwrap().unwrap_or_else(|e| panic!("{e}"));
    assert!(
        out.status.success(),
        "reshard failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    c.wait_converged();
    for s in &moved_slots {
        assert_eq!(c.owner(*s), to.port, "slot {s} not moved");
    }
    // Every moved key now lives on the target master, with its TTL.
    let mut tc = c.connection(to.port);
    for &i in &moved_ids {
        let pttl: i64 = redis::cmd("PTTL").arg(key(i)).query(&mut tc).unwrap();
        assert!(pttl > 0, "{} on the target: PTTL {pttl}", key(i));
    }
    // Same bytes, same counts, still denied at the limit — for all identities.
    let mut con = client.get_connection().unwrap();
    assert_eq!(
        snapshot(&mut con),
        before,
        "state bytes changed by the reshard"
    );
    let all: Vec<usize> = (0..IDENTITIES).collect();
    for chunk in all.chunks(PIPELINE) {
        let mut pipe = redis::cluster::cluster_pipe();
        for &i in chunk {
            pipe.cmd("SLIDINGWINDOW.PEEK")
                .arg(key(i))
                .arg(limit(i))
                .arg(WINDOW)
                .arg(NOW);
            pipe.cmd("SLIDINGWINDOW.CHECK")
                .arg(key(i))
                .arg(limit(i))
                .arg(WINDOW)
                .arg(NOW);
        }
        let replies: Vec<Vec<i64>> = pipe.query(&mut con).expect("after reshard");
        for (j, &i) in chunk.iter().enumerate() {
            assert_eq!(replies[2 * j], vec![0, limit(i) as i64], "PEEK {}", key(i));
            assert_eq!(
                replies[2 * j + 1],
                vec![0, limit(i) as i64],
                "CHECK {}",
                key(i)
            );
        }
    }
    // The target's replica got the moved keys too, and serves them.
    c.wait_replicas_caught_up();
    let replica = shards[1].1[0];
    let mut rc = c.connection(replica);
    let _: () = redis::cmd("READONLY").query(&mut rc).unwrap();
    let mut pipe = redis::pipe();
    for &i in &moved_ids {
        pipe.cmd("SLIDINGWINDOW.PEEK")
            .arg(key(i))
            .arg(limit(i))
            .arg(WINDOW)
            .arg(NOW);
    }
    let replies: Vec<Vec<i64>> = pipe
        .query(&mut rc)
        .expect("PEEK moved keys on target's replica");
    for (r, &i) in replies.iter().zip(&moved_ids) {
        assert_eq!(
            r,
            &vec![0, limit(i) as i64],
            "{} on the target's replica",
            key(i)
        );
    }
    eprintln!(
        "{kind:?}: resharded {moving} slots ({} identities) in {took:?} with {ops} CHECK/PEEK during the move; total {:?}",
        moved_ids.len(),
        t0.elapsed()
    );
}
