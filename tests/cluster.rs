//! Redis Cluster (3 masters + 3 replicas), on every server:
//!
//! * 10,000 identities driven through the cluster-aware client (pipelined, explicit
//!   `now`): each gets exactly its limit, and no redirection or cross-slot error ever
//!   reaches this code;
//! * PEEK is served by replicas in READONLY mode: directly on each replica (refused with
//!   MOVED before READONLY, right counts after, INFO commandstats on the replica counts
//!   the PEEKs and the master's does not) and through the client routed to replicas;
//! * resharding (`--cluster reshard`, MIGRATE underneath) of slots holding live
//!   identities, with CHECKs and PEEKs running during the move (and counted while it
//!   runs): the state bytes, the absolute expiries, the counts and the denials at the
//!   limit survive.

#[path = "support/cluster.rs"]
mod cluster_support;
#[macro_use]
mod support;

use cluster_support::{key_slot, Cluster};
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
use redis::Value;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::{replies, sw, Kind, Sw, CHECK, PEEK};

on_every_server!(cluster);

const IDENTITIES: usize = 10_000;
const WINDOW: u64 = 3600;
/// An explicit time (seconds) in the middle of a window: every reply is deterministic.
const NOW: u64 = 1_000_000;
const PIPELINE: usize = 5_000;

fn key(i: usize) -> String {
    support::key("sw:user", i)
}

/// Limits 1 to 7.
fn limit(i: usize) -> u64 {
    1 + (i % 7) as u64
}

/// The `i`th identity's request.
fn limiter(i: usize) -> Sw {
    sw(key(i)).limit(limit(i)).window(WINDOW).now(NOW)
}

fn ints(v: &Value) -> Vec<i64> {
    redis::from_redis_value(v.clone())
        .unwrap_or_else(|e| panic!("not an integer array: {v:?}: {e}"))
}

fn cluster(kind: Kind) {
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
        let last = round == rounds - 1;
        let todo: Vec<usize> = (0..IDENTITIES)
            .filter(|&i| (round as u64) < limit(i) + 2)
            .collect();
        for chunk in todo.chunks(PIPELINE) {
            let mut pipe = redis::cluster::cluster_pipe();
            for &i in chunk {
                let call = if last {
                    limiter(i).details()
                } else {
                    limiter(i)
                };
                pipe.add_command(call.cmd(CHECK));
            }
            // Any MOVED/ASK/CROSSSLOT that the client did not absorb would be an Err here.
            let got: Vec<Value> = pipe
                .query(&mut con)
                .unwrap_or_else(|e| panic!("round {round}: {e}"));
            sent += chunk.len();
            for (&i, v) in chunk.iter().zip(&replies(got, chunk.len(), "CHECK")) {
                let r = ints(v);
                let l = limit(i) as i64;
                let expect = if (round as i64) < l {
                    [1, round as i64 + 1]
                } else {
                    [0, l]
                };
                assert_eq!(r[..2], expect, "{} limit {l} round {round}", key(i));
                if last {
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
        "{kind}: {IDENTITIES} identities, {sent} CHECKs ({allowed_total} allowed) through the cluster client in {:?}",
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
        let err = limiter(ids[0]).try_peek(&mut rc).unwrap_err();
        assert_eq!(err.code(), Some("MOVED"), "{err}");
        let _: () = redis::cmd("READONLY").query(&mut rc).unwrap();
        for chunk in ids.chunks(PIPELINE) {
            let mut pipe = redis::pipe();
            for &i in chunk {
                pipe.add_command(limiter(i).cmd(PEEK));
            }
            let got: Vec<Vec<i64>> = pipe.query(&mut rc).expect("PEEK on replica");
            for (&i, r) in chunk.iter().zip(&replies(got, chunk.len(), "PEEK")) {
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
    let replica_peeks = || -> u64 {
        shards
            .iter()
            .map(|(_, r)| c.command_calls(r[0], "slidingwindow.peek"))
            .sum()
    };
    let before = replica_peeks();
    let sample: Vec<usize> = (0..IDENTITIES).step_by(20).collect();
    for &i in &sample {
        let route = RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(Route::new(
            key_slot(key(i).as_bytes()),
            SlotAddr::ReplicaRequired,
        )));
        let v = con
            .route_command(&limiter(i).details().cmd(PEEK), route)
            .unwrap_or_else(|e| panic!("routed PEEK {}: {e}", key(i)));
        let r = ints(&v);
        let l = limit(i) as i64;
        // Denied at the limit, limit, remaining 0.
        assert_eq!(r[..4], [0, l, l, 0], "{}", key(i));
    }
    let routed = replica_peeks() - before;
    assert!(
        routed >= sample.len() as u64,
        "replicas served {routed} of {}",
        sample.len()
    );
    eprintln!(
        "{kind}: replicas served {replica_peeks_sent:?} direct READONLY PEEKs + {routed} routed ones; {:?} so far",
        t0.elapsed()
    );

    // 3. Resharding: slots with live identities move from one master to another.
    reshard(&c, &client, &shards, t0);
}

/// Every identity's state bytes, through the cluster client.
fn states(con: &mut redis::cluster::ClusterConnection) -> Vec<Vec<u8>> {
    let mut out = Vec::with_capacity(IDENTITIES);
    let all: Vec<usize> = (0..IDENTITIES).collect();
    for chunk in all.chunks(PIPELINE) {
        let mut pipe = redis::cluster::cluster_pipe();
        for &i in chunk {
            pipe.cmd("GET").arg(key(i));
        }
        let got: Vec<Option<Vec<u8>>> = pipe.query(con).expect("GET");
        let got = replies(got, chunk.len(), "GET");
        out.extend(got.into_iter().map(|g| g.expect("state present")));
    }
    out
}

/// The absolute expiry of each of `ids`, on one node.
fn expiries(con: &mut redis::Connection, ids: &[usize]) -> Vec<i64> {
    let mut pipe = redis::pipe();
    for &i in ids {
        pipe.cmd("PEXPIRETIME").arg(key(i));
    }
    let got: Vec<i64> = pipe.query(con).expect("PEXPIRETIME");
    replies(got, ids.len(), "PEXPIRETIME")
}

/// CHECKs and PEEKs on `ids` (all at their limit: denied, nothing written), one at a
/// time, until `stop`; `ops` counts the replies, each checked. The client follows MOVED
/// and ASK for single commands (its sync pipelines return ASK as an error).
fn traffic(
    client: redis::cluster::ClusterClient,
    ids: Vec<usize>,
    ops: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
) -> Result<(), String> {
    let mut con = client.get_connection().map_err(|e| e.to_string())?;
    let deadline = Instant::now() + Duration::from_secs(300);
    let mut n = 0usize;
    while !stop.load(Ordering::SeqCst) && Instant::now() < deadline {
        let i = ids[n % ids.len()];
        n += 7;
        for command in [CHECK, PEEK] {
            let r: Vec<i64> = limiter(i)
                .cmd(command)
                .query(&mut con)
                .map_err(|e| format!("{command} {} during reshard: {e}", key(i)))?;
            if r != vec![0, limit(i) as i64] {
                return Err(format!("{command} {} during reshard: {r:?}", key(i)));
            }
            ops.fetch_add(1, Ordering::SeqCst);
        }
        // Steady traffic, not a busy loop: the servers need the CPU to move the slots.
        std::thread::sleep(Duration::from_micros(500));
    }
    Ok(())
}

fn reshard(
    c: &Cluster,
    client: &redis::cluster::ClusterClient,
    shards: &[(cluster_support::NodeEntry, Vec<u16>)],
    t0: Instant,
) {
    let kind = c.kind;
    let mut con = client.get_connection().unwrap();
    let before = states(&mut con);
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
    let expiry_before = expiries(&mut c.connection(from.port), &moved_ids);

    // Traffic during the move: CHECKs at the limit must stay denied, PEEKs must agree.
    let stop = Arc::new(AtomicBool::new(false));
    let ops = Arc::new(AtomicU64::new(0));
    let load = {
        let (client, ids, ops, stop) =
            (client.clone(), moved_ids.clone(), ops.clone(), stop.clone());
        std::thread::spawn(move || traffic(client, ids, ops, stop))
    };
    support::wait_for("traffic to start", || ops.load(Ordering::SeqCst) > 0);
    let (ops_at_start, ms_at_start) = (
        ops.load(Ordering::SeqCst),
        support::server_ms(&mut c.connection(to.port)),
    );
    let t = Instant::now();
    let runs = c.reshard(from, to, &moved_slots);
    let took = t.elapsed();
    let (ops_at_end, ms_at_end) = (
        ops.load(Ordering::SeqCst),
        support::server_ms(&mut c.connection(to.port)),
    );
    stop.store(true, Ordering::SeqCst);
    load.join().unwrap().unwrap_or_else(|e| panic!("{e}"));
    let during = ops_at_end - ops_at_start;
    assert!(
        during > 0,
        "no CHECK or PEEK completed while the slots moved"
    );
    for s in &moved_slots {
        assert_eq!(c.owner(*s), to.port, "slot {s} not moved");
    }
    // Every moved key now lives on the target master with its absolute expiry. MIGRATE
    // carries a relative TTL: the source subtracts its clock, the target adds its own,
    // both read during the reshard, so the expiry can move by at most the reshard's
    // duration (seen: a few ms later, and once 1 ms earlier, on Valkey 9.1).
    let expiry_after = expiries(&mut c.connection(to.port), &moved_ids);
    let transit = (ms_at_end - ms_at_start) as i64;
    for ((&i, &was), &is) in moved_ids.iter().zip(&expiry_before).zip(&expiry_after) {
        assert!(
            was > 0 && (is - was).abs() <= transit,
            "{}: PEXPIRETIME {was} before, {is} after a {transit} ms reshard",
            key(i)
        );
    }
    // Same bytes, same counts, still denied at the limit, for all identities.
    let mut con = client.get_connection().unwrap();
    assert_eq!(
        states(&mut con),
        before,
        "state bytes changed by the reshard"
    );
    let all: Vec<usize> = (0..IDENTITIES).collect();
    for chunk in all.chunks(PIPELINE) {
        let mut pipe = redis::cluster::cluster_pipe();
        for &i in chunk {
            pipe.add_command(limiter(i).cmd(PEEK));
            pipe.add_command(limiter(i).cmd(CHECK));
        }
        let got: Vec<Vec<i64>> = pipe.query(&mut con).expect("after reshard");
        let got = replies(got, 2 * chunk.len(), "after reshard");
        for (pair, &i) in got.chunks(2).zip(chunk) {
            let denied = vec![0, limit(i) as i64];
            assert_eq!(pair, [denied.clone(), denied], "PEEK, CHECK {}", key(i));
        }
    }
    // The target's replica got the moved keys too, and serves them.
    c.wait_replicas_caught_up();
    let mut rc = c.connection(shards[1].1[0]);
    let _: () = redis::cmd("READONLY").query(&mut rc).unwrap();
    let mut pipe = redis::pipe();
    for &i in &moved_ids {
        pipe.add_command(limiter(i).cmd(PEEK));
    }
    let got: Vec<Vec<i64>> = pipe
        .query(&mut rc)
        .expect("PEEK moved keys on target's replica");
    for (r, &i) in replies(got, moved_ids.len(), "PEEK").iter().zip(&moved_ids) {
        assert_eq!(
            r,
            &vec![0, limit(i) as i64],
            "{} on the target's replica",
            key(i)
        );
    }
    eprintln!(
        "{kind}: resharded {moving} slots ({} identities) in {took:?} ({runs} cli runs) with {during} CHECK/PEEK completed during the move; total {:?}",
        moved_ids.len(),
        t0.elapsed()
    );
}
