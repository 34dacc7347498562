//! A replica ends with byte-identical state, whatever its clock, and serves PEEK.

mod support;

use std::time::{Duration, Instant};
use support::{check, get_raw, peek, sw, Server, KINDS};

fn wait_for_sync(master: &mut redis::Connection, replica: &mut redis::Connection) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let info: String = redis::cmd("INFO")
            .arg("replication")
            .query(replica)
            .unwrap();
        if info.contains("master_link_status:up") {
            break;
        }
        assert!(Instant::now() < deadline, "replica never synced: {info}");
        std::thread::sleep(Duration::from_millis(50));
    }
    let acked: i64 = redis::cmd("WAIT").arg(1).arg(10_000).query(master).unwrap();
    assert_eq!(acked, 1);
}

#[test]
fn a_replica_holds_the_same_bytes_and_answers_peek() {
    for kind in KINDS {
        let master = Server::start(kind, &[]);
        let replica = Server::start(kind, &[]);
        let mut m = master.connection();
        let mut r = replica.connection();
        // Some state before the replica attaches (full sync) and some after (stream).
        for i in 0..20 {
            check(&mut m, &[&format!("u{i}"), "3", "60", "6000"]);
        }
        let _: () = redis::cmd("REPLICAOF")
            .arg("127.0.0.1")
            .arg(master.port)
            .query(&mut r)
            .unwrap();
        wait_for_sync(&mut m, &mut r);
        for i in 0..40 {
            for t in ["6001", "6002", "6030", "6070"] {
                check(&mut m, &[&format!("u{i}"), "3", "60", t]);
                check(
                    &mut m,
                    &[&format!("v{i}"), "7", "1500", t, "MS", "COST", "2"],
                );
            }
        }
        wait_for_sync(&mut m, &mut r);
        for i in 0..40 {
            for key in [format!("u{i}"), format!("v{i}")] {
                let on_master = get_raw(&mut m, &key);
                assert!(on_master.is_some());
                assert_eq!(get_raw(&mut r, &key), on_master, "{kind:?} {key}");
                let ttl_m: i64 = redis::cmd("PEXPIRETIME").arg(&key).query(&mut m).unwrap();
                let ttl_r: i64 = redis::cmd("PEXPIRETIME").arg(&key).query(&mut r).unwrap();
                assert_eq!(ttl_m, ttl_r, "{key}: same absolute expiry");
            }
            let args = [&format!("u{i}") as &str, "3", "60", "6075", "DETAILS"];
            assert_eq!(peek(&mut r, &args), peek(&mut m, &args));
        }
        // A replica refuses CHECK (a write) but not PEEK.
        let e = sw(&mut r, "SLIDINGWINDOW.CHECK", &["u1", "3", "60"]).unwrap_err();
        assert!(support::error_text(&e).starts_with("READONLY"), "{e}");
        // Denied checks and PEEKs replicate nothing.
        let offset = |c: &mut redis::Connection| -> i64 {
            let info: String = redis::cmd("INFO").arg("replication").query(c).unwrap();
            info.lines()
                .find_map(|l| l.strip_prefix("master_repl_offset:"))
                .unwrap()
                .trim()
                .parse()
                .unwrap()
        };
        let before = offset(&mut m);
        for _ in 0..100 {
            assert_eq!(check(&mut m, &["u1", "3", "60", "6075"])[0], 0);
            peek(&mut m, &["u1", "3", "60", "6075"]);
        }
        assert_eq!(offset(&mut m), before);
    }
}
