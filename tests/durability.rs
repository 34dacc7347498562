//! Crash durability with the AOF, on every server: a writer thread sends allowed
//! CHECKs while the main thread kills the server with SIGKILL in the middle of the load,
//! then restarts it from the AOF, several times.
//!
//! * `appendfsync always`: for every identity, the estimate after the restart (PEEK at
//!   the same `now`) is at least the number of allowed replies the client had received
//!   (nothing acknowledged is lost), and at most the number of CHECKs it sent (nothing
//!   counted twice).
//! * `appendfsync everysec`: nothing counted twice either, and what is lost is within
//!   the bound of the policy: SIGKILL leaves what Redis wrote to the AOF in the OS page
//!   cache, and Redis postpones its write(2) only while a background fsync is in flight,
//!   for 2 seconds at most. So each kill, after more than 3 s of load, may lose at most
//!   2 seconds of acknowledged writes (at the measured rate); a module whose writes did
//!   not reach the AOF would lose them all.

#[macro_use]
mod support;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::{replies, sw, Kind, Server, Sw, CHECK, PEEK};

on_every_server!(aof_always, aof_everysec);

const IDENTITIES: usize = 1_000;
const BATCH: usize = 16;
const KILLS: usize = 3;

/// The `i`th identity's request: a limit nothing reaches, in an hour-long window.
fn limiter(i: usize) -> Sw {
    sw(support::key("dur:user", i))
        .limit(1_000_000_000)
        .window(3600)
        .now(7_000_000)
}

struct Outcome {
    /// Allowed replies received by the client, per identity, over all runs.
    received: Vec<u64>,
    /// CHECKs sent (whether or not a reply came back), per identity.
    sent: Vec<u64>,
    /// Replies received per second of load.
    rate: f64,
    /// Largest loss seen after one kill, and the total.
    worst_loss: u64,
    total_loss: u64,
    total_received: u64,
}

/// Sends batches of allowed CHECKs round-robin over the identities until the server
/// goes away (or `stop`, or 30 s), counting what was sent and what was acknowledged.
fn writer(
    port: u16,
    start: usize,
    progress: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
) -> (Vec<u64>, Vec<u64>, Duration) {
    let mut sent = vec![0u64; IDENTITIES];
    let mut received = vec![0u64; IDENTITIES];
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}/")).unwrap();
    let mut con = client
        .get_connection_with_timeout(Duration::from_secs(5))
        .expect("writer connects");
    con.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let t = Instant::now();
    let mut next = start;
    while !stop.load(Ordering::SeqCst) && t.elapsed() < Duration::from_secs(30) {
        let ids: Vec<usize> = (0..BATCH).map(|k| (next + k) % IDENTITIES).collect();
        next += BATCH;
        let mut pipe = redis::pipe();
        for &i in &ids {
            pipe.add_command(limiter(i).cmd(CHECK));
            sent[i] += 1;
        }
        match pipe.query::<Vec<Vec<i64>>>(&mut con) {
            Ok(got) => {
                for (&i, r) in ids.iter().zip(&replies(got, BATCH, "CHECK")) {
                    assert_eq!(r[0], 1, "{i} denied: {r:?}");
                    received[i] += 1;
                }
                progress.fetch_add(BATCH as u64, Ordering::SeqCst);
            }
            Err(_) => break, // killed
        }
    }
    (sent, received, t.elapsed())
}

/// The estimate each identity has in the server now (PEEK at the same `now`).
fn estimates(server: &Server) -> Vec<u64> {
    let mut con = server.connection();
    let mut pipe = redis::pipe();
    for i in 0..IDENTITIES {
        pipe.add_command(limiter(i).cmd(PEEK));
    }
    let got: Vec<Vec<i64>> = pipe.query(&mut con).unwrap_or_else(|e| {
        panic!(
            "PEEK after restart: {}",
            e.to_string().chars().take(300).collect::<String>()
        )
    });
    // Allowed (always, under this limit): count = estimate + 1.
    replies(got, IDENTITIES, "PEEK")
        .iter()
        .map(|r| {
            assert_eq!(r[0], 1);
            r[1] as u64 - 1
        })
        .collect()
}

/// KILLS runs of load, each ended by a SIGKILL `load(run)` after replies started
/// flowing, then a restart from the AOF. Returns what was acknowledged and what survived;
/// panics if any identity counts more than was sent, or, per kill, if more was lost than
/// `max_loss(acknowledged per second in that run)`.
fn crash_runs(
    kind: Kind,
    fsync: &str,
    load: impl Fn(usize) -> Duration,
    max_loss: impl Fn(f64) -> u64,
) -> Outcome {
    let mut server = Server::start(kind, &["--appendonly", "yes", "--appendfsync", fsync]);
    let mut out = Outcome {
        received: vec![0; IDENTITIES],
        sent: vec![0; IDENTITIES],
        rate: 0.0,
        worst_loss: 0,
        total_loss: 0,
        total_received: 0,
    };
    let mut busy = Duration::ZERO;
    for run in 0..KILLS {
        let progress = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let port = server.port;
        let w = {
            let (p, s) = (progress.clone(), stop.clone());
            std::thread::spawn(move || writer(port, run * 337, p, s))
        };
        support::wait_for("the writer's first replies", || {
            progress.load(Ordering::SeqCst) >= 500
        });
        std::thread::sleep(load(run));
        server.kill();
        stop.store(true, Ordering::SeqCst);
        let (sent, received, took) = w.join().expect("writer");
        busy += took;
        let run_received: u64 = received.iter().sum();
        for i in 0..IDENTITIES {
            out.sent[i] += sent[i];
            out.received[i] += received[i];
        }
        out.total_received += run_received;

        server.restart(); // from the AOF
        let mut loss = 0;
        for (i, e) in estimates(&server).into_iter().enumerate() {
            assert!(
                e <= out.sent[i],
                "{fsync}: identity {i} counts {e} but only {} CHECKs were sent",
                out.sent[i]
            );
            loss += out.received[i].saturating_sub(e);
            // Later runs build on what survived.
            out.received[i] = out.received[i].min(e);
        }
        let bound = max_loss(run_received as f64 / took.as_secs_f64());
        eprintln!(
            "{kind} appendfsync {fsync}: kill #{} after {run_received} acknowledged CHECKs in {took:?}: {loss} lost (at most {bound} allowed)",
            run + 1
        );
        assert!(
            loss <= bound,
            "{fsync}: kill #{} lost {loss} acknowledged CHECKs, more than {bound}",
            run + 1
        );
        out.worst_loss = out.worst_loss.max(loss);
        out.total_loss += loss;
    }
    out.rate = out.total_received as f64 / busy.as_secs_f64();
    out
}

/// Kills after 0.2, 0.7 and 1.2 s of load: nothing acknowledged may be lost.
fn aof_always(kind: Kind) {
    let t = Instant::now();
    let load = |run| Duration::from_millis(200 + 500 * run as u64);
    let o = crash_runs(kind, "always", load, |_| 0);
    eprintln!(
        "{kind} appendfsync always: {KILLS} kills, {} acknowledged CHECKs over {IDENTITIES} identities ({:.0}/s), nothing lost; {:?}",
        o.total_received,
        o.rate,
        t.elapsed()
    );
}

/// Kills after 3.2, 3.7 and 4.2 s of load, so that everysec's background fsyncs are
/// running: each may lose at most 2 seconds of acknowledged writes.
fn aof_everysec(kind: Kind) {
    let t = Instant::now();
    let load = |run| Duration::from_millis(3_200 + 500 * run as u64);
    let o = crash_runs(kind, "everysec", load, |rate| (2.0 * rate).ceil() as u64);
    eprintln!(
        "{kind} appendfsync everysec: {KILLS} kills, {} acknowledged CHECKs ({:.0}/s); lost: worst {} in one kill, {} in all; {:?}",
        o.total_received,
        o.rate,
        o.worst_loss,
        o.total_loss,
        t.elapsed()
    );
}
