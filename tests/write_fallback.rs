//! A write that cannot happen in place falls back to a fresh string, and every copy
//! agrees. The fault-injection build never writes the key `slidingwindow:test:no-in-place`
//! in place (src/fault.rs); the same calls on another key take the usual in-place path.
//! Both keys must end with the same bytes and expiry on the master, on its replica and
//! after the master restarts from its AOF.

#[macro_use]
mod support;

use support::{
    fault_module_path, get_raw, pexpiretime, replica_of, sw, wait_link, Kind, Server, Sw, CHECK,
};

on_every_server!(the_fresh_string_fallback_keeps_master_replica_and_aof_alike);

const FALLBACK_KEY: &str = "slidingwindow:test:no-in-place";
const IN_PLACE_KEY: &str = "in-place";

fn the_fresh_string_fallback_keeps_master_replica_and_aof_alike(kind: Kind) {
    let mut master = Server::start_with_module(
        kind,
        &fault_module_path(),
        &["--appendonly", "yes", "--appendfsync", "always"],
    );
    let replica = Server::start(kind, &[]);
    let mut m = master.connection();
    let mut r = replica.connection();
    replica_of(&mut r, &master);
    // A new key, same-length writes, a count crossing a varint boundary (127 -> 128), a
    // second window (version 2), then back to one window: every kind of write.
    let calls = |key: &str| {
        let one = |now: u64, cost: u64| sw(key).limit(1000).window(3600).now(now).cost(cost);
        vec![
            one(10_000, 1),
            one(10_001, 1),
            one(10_002, 125),
            one(10_003, 1),
            one(10_004, 1),
            one(10_005, 1).and_limit(50, 60),
            one(10_006, 2).and_limit(50, 60),
            one(25_000, 1),
        ]
    };
    for (fallback, in_place) in calls(FALLBACK_KEY).iter().zip(calls(IN_PLACE_KEY)) {
        let reply = |call: &Sw, c: &mut redis::Connection| -> redis::Value {
            call.clone().details().cmd(CHECK).query(c).unwrap()
        };
        let (a, b) = (reply(fallback, &mut m), reply(&in_place, &mut m));
        assert_eq!(a, b, "the same call on both keys");
        assert_eq!(fallback.check(&mut m)[0], 1, "every call is allowed: {a:?}");
        assert_eq!(in_place.check(&mut m)[0], 1, "every call is allowed: {a:?}");
        assert_eq!(
            get_raw(&mut m, FALLBACK_KEY),
            get_raw(&mut m, IN_PLACE_KEY),
            "master bytes after {fallback:?}"
        );
    }
    let master_bytes = get_raw(&mut m, FALLBACK_KEY).expect("the key is written");
    // Each key's own expiry: the two were written a moment apart by the server's clock.
    let expiry: Vec<i64> = [FALLBACK_KEY, IN_PLACE_KEY]
        .iter()
        .map(|key| pexpiretime(&mut m, key))
        .collect();
    assert!(expiry[0] > 0, "the fallback keeps an expiry: {expiry:?}");

    wait_link(&mut r);
    support::wait_replicas(&mut m, 1);
    for (key, expiry) in [FALLBACK_KEY, IN_PLACE_KEY].iter().zip(&expiry) {
        assert_eq!(
            get_raw(&mut r, key).as_ref(),
            Some(&master_bytes),
            "replica {key}"
        );
        assert_eq!(pexpiretime(&mut r, key), *expiry, "replica {key}");
    }

    // SIGKILL, then the AOF (fsync always) is all the master has.
    master.restart();
    let mut m = master.connection();
    for (key, expiry) in [FALLBACK_KEY, IN_PLACE_KEY].iter().zip(&expiry) {
        assert_eq!(
            get_raw(&mut m, key).as_ref(),
            Some(&master_bytes),
            "AOF {key}"
        );
        assert_eq!(pexpiretime(&mut m, key), *expiry, "AOF {key}");
    }
}
