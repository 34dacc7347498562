//! A replica ends with byte-identical state and the same absolute expiry, whatever its
//! clock, and serves PEEK; denied CHECKs and PEEKs put nothing in the replication stream.

#[macro_use]
mod support;

use support::{
    call, error_text, get_raw, info_field, info_u64, pexpiretime, sw, try_info, wait_until, Kind,
    Server, CHECK, PATIENCE,
};

on_every_server!(a_replica_holds_the_same_bytes_and_answers_peek);

/// Waits for the replica's link, then until it has acknowledged all the master wrote.
fn wait_for_sync(master: &mut redis::Connection, replica: &mut redis::Connection) {
    wait_until(PATIENCE, "the replica's link", || {
        let text = try_info(replica, "replication").map_err(|e| e.to_string())?;
        Ok(info_field(&text, "master_link_status") == Some("up"))
    });
    support::wait_replicas(master, 1);
}

fn a_replica_holds_the_same_bytes_and_answers_peek(kind: Kind) {
    // The master pings its replicas every repl-ping-replica-period (10 s by default),
    // which moves the replication offset; this test compares offsets, so no ping. And a
    // full sync starts at once, not after the default 5 s.
    let master = Server::start(
        kind,
        &[
            "--repl-ping-replica-period",
            "3600",
            "--repl-diskless-sync-delay",
            "0",
        ],
    );
    let replica = Server::start(kind, &[]);
    let mut m = master.connection();
    let mut r = replica.connection();
    // A minute in seconds, and 1,500,000 ms (25 minutes): long windows, so no key expires
    // by the real clock while the test compares master and replica.
    let u = |i: usize, now| sw(format!("u{i}")).limit(3).window(60).now(now);
    let v = |i: usize, now| {
        sw(format!("v{i}"))
            .limit(7)
            .window(1_500_000)
            .now(now * 1000)
            .ms()
            .cost(2)
    };
    // Some state before the replica attaches (full sync) and some after (the stream).
    for i in 0..20 {
        u(i, 6000).check(&mut m);
    }
    let _: () = redis::cmd("REPLICAOF")
        .arg("127.0.0.1")
        .arg(master.port)
        .query(&mut r)
        .unwrap();
    wait_for_sync(&mut m, &mut r);
    for i in 0..40 {
        for now in [6001, 6002, 6030, 6070] {
            u(i, now).check(&mut m);
            v(i, now).check(&mut m);
        }
    }
    wait_for_sync(&mut m, &mut r);
    for i in 0..40 {
        for key in [format!("u{i}"), format!("v{i}")] {
            let on_master = get_raw(&mut m, &key);
            assert!(on_master.is_some());
            assert_eq!(get_raw(&mut r, &key), on_master, "{key}");
            assert_eq!(
                pexpiretime(&mut r, &key),
                pexpiretime(&mut m, &key),
                "{key}: same absolute expiry"
            );
        }
        let later = u(i, 6075).details();
        assert_eq!(later.peek(&mut r), later.peek(&mut m));
    }
    // A replica refuses CHECK (a write) but not PEEK.
    let e = call(&mut r, CHECK, &["u1", "3", "60"]).unwrap_err();
    assert!(error_text(&e).starts_with("READONLY"), "{e}");
    // Denied checks and PEEKs replicate nothing: not a byte of the stream moves.
    let offset = |c: &mut redis::Connection| info_u64(c, "replication", "master_repl_offset");
    let before = offset(&mut m);
    for _ in 0..100 {
        assert_eq!(u(1, 6075).check(&mut m)[0], 0);
        u(1, 6075).peek(&mut m);
    }
    assert_eq!(offset(&mut m), before);
}
